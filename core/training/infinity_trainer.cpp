#include "core/training/infinity_trainer.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <ostream>
#include <stdexcept>

#include "core/io/checkpoint.h"
#include "core/io/json_fields.h"
#include "core/io/module_binding.h"
#include "core/models/bsq_quant.h"
#include "core/models/bsq_vae.h"
#include "core/text/sentencepiece_tokenizer.h"
#include "core/training/grow_depth.h"
#include "core/training/mar_trainer.h"  // clip_gradients
#include "core/training/var_train_utils.h"

namespace varscope {
namespace {

using Clock = std::chrono::steady_clock;

// Both trained modules under one root ("transformer.*", "t5.*"), so one optimizer, one
// checkpoint and one EMA cover them; with the text-identity loss also its head
// ("text_identity_head.*", classes > 0), which only the checkpoint keeps.
struct JointModule : torch::nn::Module {
    JointModule(const InfinityTransformer& transformer, const T5Encoder& t5, int64_t classes,
                int64_t width, uint64_t seed) {
        register_module("transformer", transformer.ptr());
        register_module("t5", t5.module_ptr());
        if (classes > 0) {
            head = register_module("text_identity_head", torch::nn::Linear(width, classes));
            // From the run's seed, not the global generator, so a run is the same whatever ran
            // before it in the process (torch's Linear bound 1/sqrt(width), zero bias).
            at::NoGradGuard g;
            auto gen = at::detail::createCPUGenerator(seed);
            const double b = 1.0 / std::sqrt(static_cast<double>(width));
            head->weight.copy_(at::rand({classes, width}, gen, at::kFloat) * (2 * b) - b);
            head->bias.zero_();
        }
    }
    torch::nn::Linear head{nullptr};
};

std::vector<bsq::Size3> vae_schedule_of(const InfinitySchedule& s) {
    std::vector<bsq::Size3> out;
    for (const auto& hw : s.scales) out.push_back({1, hw[0], hw[1]});
    return out;
}

// The bit labels (B, L, d) and next-scale inputs (B, L - 1, d) of encoder features.
struct TeacherBatch {
    at::Tensor bits, inputs;
};
TeacherBatch teacher_batch(const at::Tensor& features, const std::vector<bsq::Size3>& schedule,
                           const bsq::BsqQuantConfig& quant) {
    at::NoGradGuard g;
    const bsq::TeacherForcing tf = bsq::teacher_forcing(features, schedule, quant);
    std::vector<at::Tensor> bits, inputs;
    for (const auto& b : tf.bits) bits.push_back(bsq::token_labels(b, quant));
    for (const auto& x : tf.next_inputs) inputs.push_back(bsq::token_inputs(x, quant));
    return {at::cat(bits, 1), at::cat(inputs, 1).to(at::kFloat)};
}

// Encoder features of every image once (the VAE is frozen), on the training device.
at::Tensor encode_features(BsqVaeImpl& vae, const ImageDataset& data, int64_t chunk = 64) {
    at::NoGradGuard g;  // not InferenceMode: the cache feeds autograd-recorded steps
    std::vector<at::Tensor> parts;
    for (int64_t b = 0; b < data.size(); b += chunk) {
        auto rows = at::arange(b, std::min(b + chunk, data.size()), at::kLong);
        parts.push_back(vae.encode_h(data.batch_images(rows)).to(at::kFloat));
    }
    return at::cat(parts, 0);
}

struct TokenTensors {
    at::Tensor ids, mask;
};
TokenTensors tokenize(const SentencePieceTokenizer& tok, const std::vector<std::string>& prompts,
                      const at::Device& dev) {
    const TokenBatch b = tok.encode_batch(prompts, Padding::kLongest);
    const auto o = at::TensorOptions().dtype(at::kLong);
    return {at::tensor(b.input_ids, o).view({b.rows, b.length}).to(dev),
            at::tensor(b.attention_mask, o).view({b.rows, b.length}).to(dev)};
}

InfinityText encode_text(const T5Encoder& t5, const TokenTensors& t) {
    const TextCondition c = compact_text_features(t5.forward_train(t.ids, t.mask), t.mask);
    return {c.kv_compact, c.lens};
}

std::vector<torch::optim::OptimizerParamGroup> param_groups(JointModule& m, double wd) {
    // No decay on vectors, biases, embeddings and the learnt unconditional text.
    std::vector<at::Tensor> decay, no_decay;
    for (auto& item : m.named_parameters()) {
        const std::string& n = item.key();
        const bool skip = item.value().dim() < 2 || n.find("cfg_uncond") != std::string::npos ||
                          n.find("pos_start") != std::string::npos ||
                          n.find("lvl_embed") != std::string::npos ||
                          n.find("embed_tokens") != std::string::npos ||
                          n.find("relative_attention_bias") != std::string::npos;
        (skip ? no_decay : decay).push_back(item.value());
    }
    std::vector<torch::optim::OptimizerParamGroup> groups;
    auto opts = [](double w) {
        return std::make_unique<torch::optim::AdamWOptions>(
            torch::optim::AdamWOptions(1e-4).betas({0.9, 0.97}).weight_decay(w));
    };
    groups.emplace_back(no_decay, opts(0.0));
    groups.emplace_back(decay, opts(wd));
    return groups;
}

void copy_weights(torch::nn::Module& dst, const torch::nn::Module& src) {
    at::NoGradGuard g;
    auto d = dst.parameters(), s = src.parameters();
    for (size_t i = 0; i < d.size(); ++i) d[i].copy_(s[i]);
}

std::vector<std::string> derived_buffers(const InfinityConfig& c) {
    std::vector<std::string> d{"text_proj_for_sos.ca.zero_k_bias"};
    for (int64_t i = 0; i < c.depth; ++i)
        for (const char* b : {".sa.zero_k_bias", ".ca.zero_k_bias"})
            d.push_back("blocks." + std::to_string(i) + b);
    return d;
}

void check_job(const InfinityTrainJob& job, const ImageDataset& data,
               const SentencePieceTokenizer& tok) {
    job.model.validate();
    if (job.t5.d_model != job.model.text_channels)
        throw std::invalid_argument("train infinity: the T5 width d_model (" +
                                    std::to_string(job.t5.d_model) +
                                    ") must equal the transformer's text_channels (" +
                                    std::to_string(job.model.text_channels) + ")");
    const int64_t needed = tok.piece_size() + tok.options().extra_ids;
    if (job.t5.vocab_size < needed)
        throw std::invalid_argument("train infinity: the T5 vocab_size (" +
                                    std::to_string(job.t5.vocab_size) + ") is smaller than " +
                                    job.tokenizer_path + "'s " + std::to_string(needed) +
                                    " ids (pieces + extra ids)");
    if (static_cast<int64_t>(job.captions.size()) != data.size())
        throw std::invalid_argument("train infinity: " + std::to_string(job.captions.size()) +
                                    " caption rows for " + std::to_string(data.size()) +
                                    " images in " + job.data_path);
    for (size_t i = 0; i < job.captions.size(); ++i)
        if (job.captions[i].empty())
            throw std::invalid_argument("train infinity: row " + std::to_string(i) +
                                        " has no caption");
    if (!(job.cond_drop >= 0 && job.cond_drop < 1))
        throw std::invalid_argument("train infinity: cond_drop must be in [0, 1)");
    if (!(job.ema_rate >= 0 && job.ema_rate < 1))
        throw std::invalid_argument("train infinity: ema_rate must be in [0, 1)");
    if (!(job.grad_clip >= 0))
        throw std::invalid_argument("train infinity: grad_clip must be >= 0");
    if (!(job.text_identity >= 0 && job.text_identity <= 100))
        throw std::invalid_argument("train infinity: text_identity must be in [0, 100]");
    if (job.text_identity > 0 && data.num_classes < 2)
        throw std::invalid_argument("train infinity: text_identity needs class labels in " +
                                    job.data_path + " (it has " + std::to_string(data.num_classes) +
                                    " class)");
}

// Teacher-forced loss and bit accuracy on the first `count` rows, first caption, no drop.
nlohmann::json evaluate(const InfinityTransformerImpl& model, const T5Encoder& t5,
                        const SentencePieceTokenizer& tok, const InfinityTrainJob& job,
                        const at::Tensor& features, const InfinitySchedule& sched,
                        const bsq::BsqQuantConfig& quant, int64_t count = 256, int64_t batch = 64) {
    at::NoGradGuard g;
    const at::Device dev = features.device();
    const int64_t n = std::min(count, features.size(0));
    const auto vs = vae_schedule_of(sched);
    double loss = 0, bit = 0, token = 0;
    std::vector<double> per_scale(sched.scales.size(), 0.0);
    for (int64_t b = 0; b < n; b += batch) {
        const int64_t e = std::min(b + batch, n);
        std::vector<std::string> prompts;
        for (int64_t r = b; r < e; ++r) prompts.push_back(job.captions[size_t(r)].front());
        const auto rows = at::arange(b, e, at::kLong).to(dev);
        const TeacherBatch tb = teacher_batch(features.index_select(0, rows), vs, quant);
        const auto logits =
            model.forward_teacher(encode_text(t5, tokenize(tok, prompts, dev)), tb.inputs, sched);
        const double w = static_cast<double>(e - b);
        loss += bitwise_loss(logits, tb.bits, sched, false).item<double>() * w;
        const BitAccuracy a = bit_accuracy(logits, tb.bits, sched);
        bit += a.mean * w;
        token += a.token * w;
        for (size_t si = 0; si < per_scale.size(); ++si) per_scale[si] += a.per_scale[si] * w;
    }
    const double nd = static_cast<double>(n);
    for (double& v : per_scale) v /= nd;
    return {{"loss", loss / nd},
            {"bit_acc", bit / nd},
            {"token_acc", token / nd},
            {"bit_acc_per_scale", per_scale},
            {"images", n}};
}

}  // namespace

const std::vector<std::string>& infinity_config_keys() {
    static const std::vector<std::string> k = {"model",
                                               "t5",
                                               "cond_drop",
                                               "ema_rate",
                                               "bf16_autocast",
                                               "export_int8",
                                               "grow_depth",
                                               "grad_clip",
                                               "reweight_loss_by_scale",
                                               "pixels",
                                               "h_div_w",
                                               "text_identity",
                                               "caption_noise"};
    return k;
}

void apply_infinity_config(const nlohmann::json& j, int64_t tokenizer_ids, InfinityTrainJob& job) {
    if (!j.is_object()) throw std::invalid_argument("Infinity training config: expected an object");
    auto get = [](const nlohmann::json& o, const std::string& where, const char* key, auto& v) {
        read_json_field(o, key, v, where + ": field ");
    };
    if (j.contains("model")) {
        const auto& m = j["model"];
        if (!m.is_object()) throw std::invalid_argument("Infinity config: expected an object");
        require_known_fields(m, InfinityConfig{}.to_json(), "Infinity config");
        InfinityConfig& c = job.model;
        for (auto [k, v] : {std::pair<const char*, int64_t*>{"depth", &c.depth},
                            {"embed_dim", &c.embed_dim},
                            {"num_heads", &c.num_heads},
                            {"mlp_hidden", &c.mlp_hidden},
                            {"text_channels", &c.text_channels},
                            {"text_maxlen", &c.text_maxlen},
                            {"pool_heads", &c.pool_heads},
                            {"codebook_dim", &c.codebook_dim},
                            {"num_levels", &c.num_levels}})
            get(m, "Infinity config", k, *v);
        get(m, "Infinity config", "norm_eps", c.norm_eps);
    }
    job.model.validate();
    nlohmann::json t5 = j.value("t5", nlohmann::json::object());
    if (!t5.is_object()) throw std::invalid_argument("T5 config: expected an object");
    if (!t5.contains("vocab_size")) t5["vocab_size"] = tokenizer_ids;
    job.t5 = T5EncoderConfig::from_json(t5, "T5 config");
    const std::string top = "Infinity training config";
    get(j, top, "cond_drop", job.cond_drop);
    get(j, top, "ema_rate", job.ema_rate);
    get(j, top, "bf16_autocast", job.bf16_autocast);
    get(j, top, "export_int8", job.export_int8);
    get(j, top, "grow_depth", job.grow_depth);
    get(j, top, "grad_clip", job.grad_clip);
    get(j, top, "reweight_loss_by_scale", job.reweight_loss_by_scale);
    get(j, top, "pixels", job.pixels);
    get(j, top, "h_div_w", job.h_div_w);
    get(j, top, "text_identity", job.text_identity);
    if (!(job.text_identity >= 0 && job.text_identity <= 100))
        throw std::invalid_argument(top + ": 'text_identity' must be in [0, 100]");
    if (j.contains("caption_noise")) {
        const auto& n = j["caption_noise"];
        if (!n.is_object())
            throw std::invalid_argument(top + ": 'caption_noise' must be an object");
        require_known_fields(n,
                             {{"prob", 0},
                              {"max_words", 0},
                              {"word_dropout", 0},
                              {"pseudo_words", 0},
                              {"join", 0},
                              {"mix", 0}},
                             top + ": caption_noise");
        get(n, top + ": caption_noise", "prob", job.caption_noise.prob);
        get(n, top + ": caption_noise", "max_words", job.caption_noise.max_words);
        get(n, top + ": caption_noise", "word_dropout", job.caption_noise.word_dropout);
        get(n, top + ": caption_noise", "pseudo_words", job.caption_noise.pseudo_words);
        get(n, top + ": caption_noise", "join", job.caption_noise.join);
        get(n, top + ": caption_noise", "mix", job.caption_noise.mix);
        const CaptionNoise& c = job.caption_noise;
        if (!(c.prob >= 0 && c.prob <= 1) || !(c.word_dropout >= 0 && c.word_dropout < 1) ||
            c.max_words < 0 || c.max_words > 16 || !(c.pseudo_words >= 0 && c.pseudo_words <= 1) ||
            !(c.join >= 0 && c.join <= 1) || !(c.mix >= 0 && c.mix <= 1))
            throw std::invalid_argument(
                top +
                ": caption_noise: prob in [0, 1], word_dropout in [0, 1), max_words in [0, 16], "
                "pseudo_words in [0, 1], join in [0, 1], mix in [0, 1]");
        if (c.join > 0 && c.mix > 0)
            throw std::invalid_argument(top + ": caption_noise: join and mix exclude each other");
    }
    if (!(job.cond_drop >= 0 && job.cond_drop < 1))
        throw std::invalid_argument(top + ": 'cond_drop' must be in [0, 1)");
    if (!(job.ema_rate >= 0 && job.ema_rate < 1))
        throw std::invalid_argument(top + ": 'ema_rate' must be in [0, 1)");
    if (!(job.grad_clip >= 0)) throw std::invalid_argument(top + ": 'grad_clip' must be >= 0");
    try {
        infinity_schedule(job.h_div_w, job.pixels);
    } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(top + ": 'pixels' / 'h_div_w': " + e.what());
    }
}

const std::vector<std::string> kCaptionFillers = {
    "image",  "emoji",   "symbol", "sign",   "small",   "cute",       "simple", "flat",
    "a",      "an",      "one",    "photo",  "sketch",  "art",        "style",  "graphic",
    "please", "show",    "me",     "make",   "with",    "of",         "and",    "colorful",
    "little", "sticker", "design", "yellow", "cartoon", "vector",     "clean",  "nice",
    "big",    "new",     "my",     "this",   "like",    "illustrated"};

const std::vector<std::string> kHeldOutWords = {"picture", "drawn",    "icon", "showing",
                                                "from",    "category", "the"};

std::string noisy_caption(const std::string& caption, const CaptionNoise& noise,
                          at::Generator& gen) {
    std::vector<std::string> words;
    for (size_t i = 0; i < caption.size();) {
        const size_t j = std::min(caption.find(' ', i), caption.size());
        if (j > i) words.push_back(caption.substr(i, j - i));
        i = j + 1;
    }
    if (words.empty()) return caption;
    // Draws in a fixed order and count per caption: dropouts, then the insertion decision.
    const at::Tensor u = at::rand({static_cast<int64_t>(words.size()) + 1}, gen, at::kDouble);
    const double* d = u.data_ptr<double>();
    std::vector<std::string> kept;
    for (size_t i = 0; i < words.size(); ++i)
        if (d[i] >= noise.word_dropout) kept.push_back(words[i]);
    if (kept.empty()) kept.push_back(words[0]);
    if (d[words.size()] < noise.prob && noise.max_words > 0) {
        const int64_t n = at::randint(1, noise.max_words + 1, {1}, gen, at::kLong).item<int64_t>();
        for (int64_t k = 0; k < n; ++k) {
            std::string filler;
            if (noise.pseudo_words > 0 &&
                at::rand({1}, gen, at::kDouble).item<double>() < noise.pseudo_words) {
                const int64_t len = at::randint(3, 10, {1}, gen, at::kLong).item<int64_t>();
                const at::Tensor letters = at::randint(0, 26, {len}, gen, at::kLong);
                for (int64_t i = 0; i < len; ++i)
                    filler += static_cast<char>('a' + letters[i].item<int64_t>());
                if (std::find(kHeldOutWords.begin(), kHeldOutWords.end(), filler) !=
                    kHeldOutWords.end())
                    filler += 'q';  // (a 1-in-10^5 draw) still a string no template uses
            } else {
                const auto w = at::randint(0, static_cast<int64_t>(kCaptionFillers.size()), {1},
                                           gen, at::kLong)
                                   .item<int64_t>();
                filler = kCaptionFillers[static_cast<size_t>(w)];
            }
            const auto at_pos =
                at::randint(0, static_cast<int64_t>(kept.size()) + 1, {1}, gen, at::kLong)
                    .item<int64_t>();
            kept.insert(kept.begin() + at_pos, filler);
        }
    }
    std::string out;
    for (const auto& w : kept) out += (out.empty() ? "" : " ") + w;
    return out;
}

namespace {
// A phrasing's ", "-separated segments (at least one; empty ones dropped).
std::vector<std::string> split_segments(const std::string& phrasing) {
    std::vector<std::string> out;
    for (size_t i = 0; i <= phrasing.size();) {
        const size_t j = std::min(phrasing.find(", ", i), phrasing.size());
        if (j > i) out.push_back(phrasing.substr(i, j - i));
        i = j + 2;
    }
    if (out.empty()) out.push_back(phrasing);
    return out;
}

// A phrasing of the row other than `drawn`, uniform over the rest by the draw u in [0, 1) (the row
// has at least two).
const std::string& other_phrasing(const std::vector<std::string>& row, const std::string& drawn,
                                  double u) {
    const auto first = std::find(row.begin(), row.end(), drawn) - row.begin();
    auto k = std::min(row.size() - 2, static_cast<size_t>(u * static_cast<double>(row.size() - 1)));
    if (static_cast<std::ptrdiff_t>(k) >= first) ++k;  // skip the one already drawn
    return row[k];
}

// A skin-tone segment ("light skin tone", "light and dark skin tones"): a mix always keeps it.
bool is_skin_tone(const std::string& segment) {
    for (const std::string end : {" skin tone", " skin tones"})
        if (segment.size() > end.size() &&
            segment.compare(segment.size() - end.size(), end.size(), end) == 0)
            return true;
    return false;
}
}  // namespace

std::vector<std::string> pick_captions(const std::vector<std::vector<std::string>>& captions,
                                       const at::Tensor& rows, at::Generator& gen,
                                       const CaptionNoise& noise) {
    const at::Tensor r = rows.to(at::kCPU, at::kLong).contiguous();
    const at::Tensor u = at::rand({r.numel()}, gen, at::kDouble);
    std::vector<std::string> out;
    for (int64_t i = 0; i < r.numel(); ++i) {
        const int64_t row = r.data_ptr<int64_t>()[i];
        if (row < 0 || row >= static_cast<int64_t>(captions.size()) ||
            captions[size_t(row)].empty())
            throw std::invalid_argument("train infinity: no caption for row " +
                                        std::to_string(row));
        const auto& c = captions[size_t(row)];
        const auto k = std::min(c.size() - 1, static_cast<size_t>(u.data_ptr<double>()[i] *
                                                                  static_cast<double>(c.size())));
        out.push_back(c[k]);
    }
    if (noise.join > 0) {
        // Per row: the join decision, then the other phrasing (uniform over the rest).
        const at::Tensor v = at::rand({r.numel(), 2}, gen, at::kDouble);
        const double* d = v.data_ptr<double>();
        for (int64_t i = 0; i < r.numel(); ++i) {
            const auto& c = captions[size_t(r.data_ptr<int64_t>()[i])];
            if (c.size() < 2 || d[2 * i] >= noise.join) continue;
            out[size_t(i)] += ", " + other_phrasing(c, out[size_t(i)], d[2 * i + 1]);
        }
    }
    if (noise.mix > 0) {
        // Per row: the mix decision, the other phrasing (uniform over the rest), then one keep
        // draw per later segment (at most kMixSegments of them), a fixed count per row.
        constexpr int64_t kMixSegments = 8;
        const at::Tensor v = at::rand({r.numel(), 2 + kMixSegments}, gen, at::kDouble);
        for (int64_t i = 0; i < r.numel(); ++i) {
            const double* d = v.data_ptr<double>() + i * (2 + kMixSegments);
            const auto& c = captions[size_t(r.data_ptr<int64_t>()[i])];
            if (d[0] >= noise.mix) continue;
            const auto own = split_segments(out[size_t(i)]);
            std::vector<std::string> later(own.begin() + 1, own.end());
            if (c.size() >= 2) {
                const auto other = split_segments(other_phrasing(c, out[size_t(i)], d[1]));
                later.insert(later.end(), other.begin() + 1, other.end());
            }
            std::string mixed = own.front();
            std::vector<std::string> used = {own.front()};
            for (size_t s = 0; s < later.size() && s < static_cast<size_t>(kMixSegments); ++s) {
                if ((d[2 + s] >= 0.5 && !is_skin_tone(later[s])) ||
                    std::find(used.begin(), used.end(), later[s]) != used.end())
                    continue;
                used.push_back(later[s]);
                mixed += ", " + later[s];
            }
            out[size_t(i)] = mixed;
        }
    }
    if (noise.enabled())
        for (auto& caption : out) caption = noisy_caption(caption, noise, gen);
    return out;
}

InfinityText drop_conditions(const InfinityText& text, const at::Tensor& cfg_uncond,
                             const std::vector<bool>& drop) {
    if (drop.size() != text.lens.size())
        throw std::invalid_argument("drop_conditions: one flag per row needed");
    std::vector<at::Tensor> parts;
    int64_t off = 0;
    for (size_t b = 0; b < drop.size(); ++b) {
        const int64_t len = text.lens[b];
        if (drop[b] && len > cfg_uncond.size(0))
            throw std::invalid_argument("drop_conditions: a text of " + std::to_string(len) +
                                        " tokens is longer than cfg_uncond (" +
                                        std::to_string(cfg_uncond.size(0)) + ")");
        parts.push_back(drop[b] ? cfg_uncond.narrow(0, 0, len).to(text.kv_compact.dtype())
                                : text.kv_compact.narrow(0, off, len));
        off += len;
    }
    return {at::cat(parts, 0), text.lens};
}

at::Tensor mean_text_features(const InfinityText& text) {
    int64_t total = 0;
    for (const int64_t len : text.lens) {
        if (len < 1) throw std::invalid_argument("mean_text_features: a caption of no tokens");
        total += len;
    }
    if (total != text.kv_compact.size(0))
        throw std::invalid_argument("mean_text_features: lengths do not fit the packed text");
    // One segment sum over the packed rows (a few kernels per step, not a few per caption); the
    // row index of each token is built on the CPU, where the lengths are.
    const at::Tensor lens = at::tensor(text.lens, at::kLong);
    const at::Tensor x = text.kv_compact.to(at::kFloat);
    return at::zeros({text.batch(), x.size(1)}, x.options())
               .index_add(0, at::repeat_interleave(lens).to(x.device()), x) /
           lens.to(x.device(), at::kFloat).unsqueeze(1);
}

at::Tensor bitwise_loss(const at::Tensor& logits, const at::Tensor& bits, const InfinitySchedule& s,
                        bool reweight) {
    const int64_t B = logits.size(0), L = logits.size(1), d = bits.size(-1);
    if (bits.dim() != 3 || bits.size(0) != B || bits.size(1) != L || logits.size(2) != 2 * d)
        throw std::invalid_argument("bitwise_loss: logits (B, L, 2d) and bits (B, L, d) differ");
    // Pairs (bit = 0, bit = 1) per bit, as the official reshape(B, L, -1, 2).
    const at::Tensor logp = at::log_softmax(logits.to(at::kFloat).view({B, L, d, 2}), -1);
    const at::Tensor per_token =
        -logp.gather(-1, bits.to(logp.device(), at::kLong).unsqueeze(-1)).squeeze(-1).mean(-1);
    if (!reweight) return per_token.mean();
    // Official reweight_loss_by_scale: sqrt(last scale area / scale area) per token, normalised.
    std::vector<double> w;
    const double last = std::sqrt(static_cast<double>(s.tokens(s.num_scales() - 1)));
    for (int64_t si = 0; si < s.num_scales(); ++si)
        for (int64_t t = 0; t < s.tokens(si); ++t)
            w.push_back(last / std::sqrt(static_cast<double>(s.tokens(si))));
    if (static_cast<int64_t>(w.size()) != L)
        throw std::invalid_argument("bitwise_loss: the schedule has " + std::to_string(w.size()) +
                                    " tokens, the logits " + std::to_string(L));
    at::Tensor lw = at::tensor(w, at::kDouble).to(per_token.device(), at::kFloat);
    lw = lw / lw.sum();
    return (per_token * lw).sum(-1).mean();
}

BitAccuracy bit_accuracy(const at::Tensor& logits, const at::Tensor& bits,
                         const InfinitySchedule& s) {
    at::NoGradGuard g;
    const int64_t B = logits.size(0), L = logits.size(1), d = bits.size(-1);
    const at::Tensor hit =
        logits.view({B, L, d, 2}).argmax(-1).eq(bits.to(logits.device())).to(at::kFloat);
    BitAccuracy a;
    a.mean = hit.mean().item<double>();
    a.token = hit.amin(-1).mean().item<double>();
    const at::Tensor per_pos =
        hit.mean(at::IntArrayRef{0, 2}).to(at::kCPU, at::kDouble).contiguous();
    const double* p = per_pos.data_ptr<double>();
    for (int64_t si = 0; si < s.num_scales(); ++si) {
        double sum = 0;
        for (int64_t t = s.scale_begin(si); t < s.scale_begin(si) + s.tokens(si); ++t) sum += p[t];
        a.per_scale.push_back(sum / static_cast<double>(s.tokens(si)));
    }
    return a;
}

namespace {

// The fine-tuning start of a fresh run: the job's transformer / T5 files, whose configs must be
// the job's (a different shape would fail on the first tensor with a less helpful message).
void init_from(const InfinityTrainJob& job, InfinityTransformer& model, T5Encoder& t5,
               std::ostream& out) {
    if (!job.init_path.empty()) {
        const StateDict dict = load_checkpoint(job.init_path);
        const InfinityConfig found = InfinityConfig::infer_from(dict, job.init_path);
        InfinityConfig same_depth = found;
        same_depth.depth = job.model.depth;
        const bool grow = job.grow_depth && found.depth < job.model.depth &&
                          same_depth.to_json() == job.model.to_json();
        if (!grow && found.to_json() != job.model.to_json())
            throw std::invalid_argument(
                "--init " + job.init_path + ": a transformer of " + found.to_json().dump() +
                ", the config asks for " + job.model.to_json().dump() +
                (job.grow_depth ? " (grow_depth: only the depth may differ, "
                                  "and be smaller)"
                                : ""));
        at::NoGradGuard g;
        if (grow) {
            model->load(grown_state_dict(module_state_dict(*model), job.model.depth, dict,
                                         infinity_grow_spec(), job.init_path),
                        job.init_path);
            out << "transformer initialised from " << job.init_path << ", grown from "
                << found.depth << " to " << job.model.depth << " blocks\n";
        } else {
            model->load(dict, job.init_path);
            out << "transformer initialised from " << job.init_path << "\n";
        }
    }
    if (!job.init_t5_path.empty()) {
        const std::string cfg = job.init_t5_path + "/config.json";
        const T5EncoderConfig found = load_t5_encoder_config(cfg);
        if (found.to_json() != job.t5.to_json())
            throw std::invalid_argument("--init-t5 " + job.init_t5_path + ": a T5 encoder of " +
                                        found.to_json().dump() + ", the config asks for " +
                                        job.t5.to_json().dump());
        std::string what;
        const StateDict tensors = load_t5_encoder_tensors(job.init_t5_path, &what);
        at::NoGradGuard g;
        t5.load(tensors, what);
        t5.set_trainable(true);
        out << "T5 encoder initialised from " << job.init_t5_path << "\n";
    }
}

}  // namespace

nlohmann::json train_infinity(const InfinityTrainJob& job, std::ostream& out) {
    const auto t0 = Clock::now();
    job.model.validate();
    ImageDataset data = prepare_training(job.train, job.data_path);
    const at::Device dev(job.train.device);
    T5TokenizerOptions topt;
    topt.max_length = static_cast<int>(std::min<int64_t>(512, job.model.text_maxlen));
    const SentencePieceTokenizer tok(job.tokenizer_path, topt);
    check_job(job, data, tok);

    const InfinitySchedule sched = infinity_schedule(job.h_div_w, job.pixels);
    if (sched.num_scales() > job.model.num_levels)
        throw std::invalid_argument(
            "train infinity: the schedule has " + std::to_string(sched.num_scales()) +
            " scales but the model only num_levels = " + std::to_string(job.model.num_levels));
    const auto vsched = vae_schedule_of(sched);
    BsqVae vae = load_bsq_vae(job.vae_path);
    if (vae->config().codebook_dim != job.model.codebook_dim)
        throw std::invalid_argument(
            job.vae_path + ": a BSQ VAE of " + std::to_string(vae->config().codebook_dim) +
            " bits, the transformer's codebook_dim is " + std::to_string(job.model.codebook_dim));
    vae->to(dev);
    vae->eval();
    const bsq::BsqQuantConfig quant = vae->quant_config();
    const at::Tensor features = encode_features(*vae, data);
    vae = nullptr;
    const auto& last = sched.scales.back();
    if (features.size(2) != last[0] || features.size(3) != last[1])
        throw std::invalid_argument(
            "train infinity: the VAE turns " + std::to_string(data.images.size(2)) + "x" +
            std::to_string(data.images.size(3)) + " images into a " +
            std::to_string(features.size(2)) + "x" + std::to_string(features.size(3)) +
            " latent, but the schedule (h_div_w " + std::to_string(job.h_div_w) + ", " +
            job.pixels + ") ends at " + std::to_string(last[0]) + "x" + std::to_string(last[1]));
    out << "encoded " << data.size() << " images: features " << features.sizes() << ", "
        << sched.num_scales() << " scales, " << sched.total_tokens() << " tokens\n";

    RunDirectory run(job.run_dir);
    InfinityTransformer model = random_infinity(job.model, job.train.seed);
    T5Encoder t5(job.t5);
    t5.init_weights(job.train.seed + 1);
    t5.set_trainable(true);
    model->to(dev);
    t5.to(dev);
    model->train();
    const int64_t id_classes = job.text_identity > 0 ? data.num_classes : 0;
    JointModule joint(model, t5, id_classes, job.t5.d_model, job.train.seed + 2);
    if (joint.head) joint.head->to(dev);
    torch::optim::AdamW opt(param_groups(joint, job.train.weight_decay),
                            torch::optim::AdamWOptions(job.train.lr).betas({0.9, 0.97}));
    InfinityTransformer ema_model(job.model);
    T5Encoder ema_t5(job.t5);
    ema_model->to(dev);
    ema_t5.to(dev);
    JointModule ema(ema_model, ema_t5, id_classes, job.t5.d_model, job.train.seed + 2);
    if (ema.head) ema.head->to(dev);
    for (auto& p : ema.parameters()) p.set_requires_grad(false);

    const nlohmann::json cfg_json = job.model.to_json();
    const nlohmann::json run_json = {{"transformer", cfg_json},
                                     {"t5", job.t5.to_json()},
                                     {"pixels", job.pixels},
                                     {"h_div_w", job.h_div_w}};
    int64_t step = run.resume(joint, opt, run.path("last.safetensors"));
    if (step == 0) init_from(job, model, t5, out);
    copy_weights(ema, joint);
    if (step) {
        out << "resumed at step " << step << "\n";
        if (job.ema_rate > 0 && std::filesystem::exists(run.path("ema.safetensors"))) {
            BindOptions o;
            o.what = run.path("ema.safetensors");
            bind_state_dict(ema, load_checkpoint(run.path("ema.safetensors")), o);
        }
    }
    auto save = [&](int64_t s) {
        run.save(joint, opt, s, run_json);
        if (job.ema_rate > 0)
            save_safetensors(module_state_dict(ema), run.path("ema.safetensors"),
                             {{"varscope.config", run_json.dump()}});
    };

    const TrainConfig& tc = job.train;
    BatchSampler sampler(data.size(), tc.batch, tc.seed);
    for (int64_t s = 0; s < step; ++s) sampler.next();  // the batches of an unbroken run
    const std::vector<at::Tensor> ema_params = ema.parameters(), params = joint.parameters();
    TimeBudget budget(tc.max_seconds);
    for (; step < tc.steps; ++step) {
        if (step % 10 == 0 && budget.spent(step, out)) break;
        set_learning_rate(opt, tc.lr_at(step));
        const at::Tensor rows = sampler.next();
        // Captions and drops from a generator of (seed, step): a resumed run draws the same.
        auto gen = at::detail::createCPUGenerator(tc.seed * 1000003ULL + 7919ULL +
                                                  static_cast<uint64_t>(step));
        const auto prompts = pick_captions(job.captions, rows, gen, job.caption_noise);
        const at::Tensor u = at::rand({rows.size(0)}, gen, at::kDouble);
        std::vector<bool> drop;
        int64_t dropped = 0;
        for (int64_t i = 0; i < rows.size(0); ++i) {
            drop.push_back(u.data_ptr<double>()[i] < job.cond_drop);
            dropped += drop.back();
        }
        const TeacherBatch tb =
            teacher_batch(features.index_select(0, rows.to(dev)), vsched, quant);
        const TokenTensors tokens = tokenize(tok, prompts, dev);
        at::Tensor logits, loss, total, id_loss, id_logits, id_labels;
        {
            AutocastBf16 ac(dev, job.bf16_autocast);
            const InfinityText encoded = encode_text(t5, tokens);
            const InfinityText text = drop_conditions(encoded, model->cfg_uncond, drop);
            logits = model->forward_teacher(text, tb.inputs, sched);
            loss = bitwise_loss(logits, tb.bits, sched, job.reweight_loss_by_scale);
            if (joint.head) {
                // Every caption, dropped or not: its wording should name its emoji either way.
                id_logits = joint.head->forward(mean_text_features(encoded)).to(at::kFloat);
                id_labels = data.labels.index_select(0, rows.to(data.labels.device()))
                                .to(id_logits.device(), at::kLong);
                id_loss = at::cross_entropy_loss(id_logits, id_labels);
            }
            total = id_loss.defined() ? loss + job.text_identity * id_loss : loss;
        }
        opt.zero_grad();
        total.backward();
        const at::Tensor grad_norm =
            job.grad_clip > 0 ? clip_gradients(joint, job.grad_clip) : at::Tensor();
        opt.step();
        if (job.ema_rate > 0) ema_update(ema_params, params, job.ema_rate);
        if (step % tc.log_every == 0 || step + 1 == tc.steps) {
            const BitAccuracy a = bit_accuracy(logits, tb.bits, sched);
            nlohmann::json rec = {{"step", step},
                                  {"loss", loss.item<double>()},
                                  {"bit_acc", a.mean},
                                  {"token_acc", a.token},
                                  {"bit_acc_per_scale", a.per_scale},
                                  {"dropped", dropped},
                                  {"lr", tc.lr_at(step)},
                                  {"epoch", sampler.epoch()},
                                  {"seconds", budget.elapsed()}};
            if (grad_norm.defined()) rec["grad_norm"] = grad_norm.item<double>();
            if (id_loss.defined()) {
                // "loss" stays the bitwise loss alone, comparable with the runs before.
                rec["text_identity_loss"] = id_loss.item<double>();
                rec["text_identity_acc"] =
                    id_logits.argmax(-1).eq(id_labels).to(at::kDouble).mean().item<double>();
            }
            run.log(rec);
            out << rec.dump() << std::endl;
        }
        if ((step + 1) % tc.checkpoint_every == 0) save(step + 1);
    }
    const double train_seconds = budget.elapsed();
    save(step);
    if (job.ema_rate == 0) copy_weights(ema, joint);

    // fp32 weights for continuing elsewhere, then what ships (EMA when on).
    save_safetensors(module_state_dict(*model), run.path("final.safetensors"),
                     {{"varscope.config", cfg_json.dump()}});
    save_t5_encoder_folder(t5, run.path("t5-final"), at::kFloat, job.tokenizer_path);
    export_half(*ema_model, run.path("export-fp16.safetensors"), cfg_json,
                derived_buffers(job.model), {{"varscope.infinity_train", run_json.dump()}},
                job.export_int8);
    save_t5_encoder_folder(ema_t5, run.path("t5-fp16"), at::kHalf, job.tokenizer_path);

    // The exports as the runner loads them (fp16 -> fp32) against the trained weights.
    model->eval();
    nlohmann::json report;
    report["eval_model"] = evaluate(*model, t5, tok, job, features, sched, quant);
    {
        InfinityTransformer reloaded(job.model);
        reloaded->load(load_checkpoint(run.path("export-fp16.safetensors")),
                       run.path("export-fp16.safetensors"));
        reloaded->to(dev);
        reloaded->eval();
        T5Encoder t5_reloaded(load_t5_encoder_config(run.path("t5-fp16/config.json")));
        std::string what;
        t5_reloaded.load(load_t5_encoder_tensors(run.path("t5-fp16"), &what), what);
        t5_reloaded.to(dev);
        report["eval_export"] = evaluate(*reloaded, t5_reloaded, tok, job, features, sched, quant);
        report["export_bytes"] = std::filesystem::file_size(run.path("export-fp16.safetensors"));
        report["t5_bytes"] = std::filesystem::file_size(run.path("t5-fp16/model.safetensors"));
    }
    int64_t transformer_params = 0, t5_params = 0;
    for (const auto& p : model->parameters()) transformer_params += p.numel();
    for (const auto& p : t5.module().parameters()) t5_params += p.numel();
    report["parameters"] = {{"transformer", transformer_params}, {"t5", t5_params}};
    report["steps"] = step;
    report["train_seconds"] = train_seconds;
    report["seconds"] = std::chrono::duration<double>(Clock::now() - t0).count();
    report["train"] = tc.to_json();
    report["model"] = run_json;
    report["cond_drop"] = job.cond_drop;
    if (!job.init_path.empty()) report["init"] = job.init_path;
    if (!job.init_t5_path.empty()) report["init_t5"] = job.init_t5_path;
    report["caption_noise"] = {{"prob", job.caption_noise.prob},
                               {"max_words", job.caption_noise.max_words},
                               {"word_dropout", job.caption_noise.word_dropout},
                               {"pseudo_words", job.caption_noise.pseudo_words}};
    report["ema_rate"] = job.ema_rate;
    if (job.text_identity > 0) report["text_identity"] = job.text_identity;
    report["bf16_autocast"] = job.bf16_autocast;
    report["export_int8"] = job.export_int8;
    run.log({{"final", report}});
    return report;
}

}  // namespace varscope
