// Infinity: config, checkpoint names, the transformer's text condition and teacher forward.
#include "core/models/infinity.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/modules/activation.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "core/io/module_binding.h"

namespace varscope {
namespace {

at::Tensor linear(const torch::nn::Linear& l, const at::Tensor& x) {
    const auto& w = l->weight;
    return at::linear(x.to(w.scalar_type()), w,
                      l->bias.defined() ? std::optional<at::Tensor>(l->bias) : std::nullopt);
}

const at::Tensor& require(const StateDict& d, const std::string& name, const std::string& what) {
    auto it = d.find(name);
    if (it == d.end())
        throw CheckpointError(what + ": not an Infinity checkpoint: missing tensor '" + name + "'");
    return it->second;
}

// Truncated normal in [-2 std, 2 std], as torch.nn.init.trunc_normal_ (inverse-CDF sampling).
void trunc_normal_(at::Tensor t, double std, at::Generator& gen) {
    const double lo = std::erf(-2.0 / std::sqrt(2.0)), hi = -lo;
    auto u = at::empty(t.sizes(), t.options().dtype(at::kFloat).device(at::kCPU));
    u.uniform_(lo, hi, gen);
    u.erfinv_().mul_(std * std::sqrt(2.0)).clamp_(-2.0 * std, 2.0 * std);
    t.copy_(u);
}

// The text_norm submodule: the official FastRMSNorm's weight.
struct RmsWeightImpl : torch::nn::Module {
    explicit RmsWeightImpl(int64_t C) { weight = register_parameter("weight", at::ones({C})); }
    at::Tensor weight;
};
TORCH_MODULE(RmsWeight);

}  // namespace

// ----------------------------------------------------------------------------- config

InfinityConfig InfinityConfig::infinity_2b() {
    return InfinityConfig{};
}

InfinityConfig InfinityConfig::infinity_8b() {
    InfinityConfig c;
    c.depth = 40;
    c.embed_dim = 3584;
    c.num_heads = 28;
    c.mlp_hidden = 14336;  // round(3584 * 4 / 256) * 256
    c.codebook_dim = 56;   // 14-bit codes with 2 x 2 spatial patchify
    return c;
}

void InfinityConfig::validate() const {
    auto fail = [](const std::string& m) { throw std::invalid_argument("Infinity config: " + m); };
    if (depth < 1 || depth > 256) fail("depth must be in [1, 256], got " + std::to_string(depth));
    if (num_heads < 1 || embed_dim % num_heads != 0)
        fail("embed_dim (" + std::to_string(embed_dim) + ") must be a multiple of num_heads (" +
             std::to_string(num_heads) + ")");
    if (head_dim() % 4 != 0) fail("the head width must be a multiple of 4 (2-D RoPE)");
    if (pool_heads < 1 || embed_dim % pool_heads != 0)
        fail("embed_dim must be a multiple of pool_heads (" + std::to_string(pool_heads) + ")");
    if (mlp_hidden < 1) fail("mlp_hidden must be >= 1");
    if (text_channels < 1 || text_maxlen < 1) fail("text_channels and text_maxlen must be >= 1");
    if (codebook_dim < 1 || codebook_dim > 64) fail("codebook_dim must be in [1, 64]");
    if (num_levels < 1) fail("num_levels must be >= 1");
}

nlohmann::json InfinityConfig::to_json() const {
    return {
        {"depth", depth},           {"embed_dim", embed_dim},         {"num_heads", num_heads},
        {"mlp_hidden", mlp_hidden}, {"text_channels", text_channels}, {"text_maxlen", text_maxlen},
        {"pool_heads", pool_heads}, {"codebook_dim", codebook_dim},   {"num_levels", num_levels},
        {"norm_eps", norm_eps}};
}

StateDict infinity_canonical_names(const StateDict& dict, const std::string& what) {
    static const std::regex chunked(R"(^block_chunks\.(\d+)\.module\.(\d+)\.(.*)$)");
    // Blocks per chunk: the official MultipleLayers hold depth / block_chunks blocks each.
    std::map<int64_t, std::set<int64_t>> chunks;
    std::smatch m;
    for (const auto& kv : dict)
        if (std::regex_match(kv.first, m, chunked))
            chunks[std::stoll(m[1])].insert(std::stoll(m[2]));
    if (chunks.empty()) return dict;
    const int64_t per = static_cast<int64_t>(chunks.begin()->second.size());
    for (const auto& [c, js] : chunks)
        if (static_cast<int64_t>(js.size()) != per || *js.rbegin() != per - 1)
            throw CheckpointError(what + ": block_chunks." + std::to_string(c) + " holds " +
                                  std::to_string(js.size()) + " blocks, chunk 0 holds " +
                                  std::to_string(per) + " (uneven chunks)");
    StateDict out;
    for (const auto& kv : dict) {
        if (std::regex_match(kv.first, m, chunked)) {
            const int64_t i = std::stoll(m[1]) * per + std::stoll(m[2]);
            out["blocks." + std::to_string(i) + "." + m[3].str()] = kv.second;
        } else {
            out[kv.first] = kv.second;
        }
    }
    return out;
}

InfinityConfig InfinityConfig::infer_from(const StateDict& raw, const std::string& what) {
    const StateDict d = infinity_canonical_names(raw, what);
    InfinityConfig c;
    const at::Tensor we = require(d, "word_embed.weight", what);  // (C, d)
    c.embed_dim = we.size(0);
    c.codebook_dim = we.size(1);
    c.depth = 0;
    while (d.count("blocks." + std::to_string(c.depth) + ".sa.mat_qkv.weight")) ++c.depth;
    if (c.depth == 0) require(d, "blocks.0.sa.mat_qkv.weight", what);
    c.num_heads = require(d, "blocks.0.sa.scale_mul_1H11", what).size(1);
    c.mlp_hidden = require(d, "blocks.0.ffn.fc1.weight", what).size(0);
    c.text_channels = require(d, "text_proj_for_ca.0.weight", what).size(1);
    c.text_maxlen = require(d, "cfg_uncond", what).size(0);
    c.pool_heads = require(d, "text_proj_for_sos.ca.mat_q", what).size(1);
    c.num_levels = require(d, "lvl_embed.weight", what).size(0);
    const int64_t V = require(d, "head.weight", what).size(0);
    if (V != 2 * c.codebook_dim)
        throw CheckpointError(what + ": 'head.weight' has " + std::to_string(V) +
                              " outputs; a bit-label Infinity has 2 x codebook_dim = " +
                              std::to_string(2 * c.codebook_dim) +
                              " (index labels are not supported)");
    // Variants the released models do not use.
    for (const char* n : {"blocks.0.ffn.fcg.weight", "blocks.0.ada_lin.1.weight",
                          "blocks.0.ca_gamma", "norm0_ve.weight", "head.0.weight"})
        if (d.count(n))
            throw CheckpointError(what + ": tensor '" + n +
                                  "' belongs to an Infinity variant that is not supported (the "
                                  "released 2B/8B use shared AdaLN, GELU FFN, no input norm)");
    try {
        c.validate();
    } catch (const std::invalid_argument& e) {
        throw CheckpointError(what + ": " + e.what());
    }
    return c;
}

// ----------------------------------------------------------------------------- transformer

InfinityTransformerImpl::InfinityTransformerImpl(InfinityConfig cfg) : cfg_(std::move(cfg)) {
    cfg_.validate();
    const int64_t C = cfg_.embed_dim, Ct5 = cfg_.text_channels;
    cfg_uncond = register_parameter("cfg_uncond", at::zeros({cfg_.text_maxlen, Ct5}));
    pos_start = register_parameter("pos_start", at::zeros({1, 1, C}));
    text_norm_weight = register_module("text_norm", RmsWeight(Ct5))->weight;
    auto sos = register_module("text_proj_for_sos", std::make_shared<torch::nn::Module>());
    pool_ =
        sos->register_module("ca", InfinityCrossAttention(C, Ct5, cfg_.pool_heads, /*pool=*/true));
    ca_fc1_ = torch::nn::Linear(Ct5, C);
    ca_fc2_ = torch::nn::Linear(C, C);
    text_proj_for_ca = register_module(
        "text_proj_for_ca",
        torch::nn::Sequential(
            ca_fc1_, torch::nn::GELU(torch::nn::GELUOptions().approximate("tanh")), ca_fc2_));
    lvl_embed = register_module("lvl_embed", torch::nn::Embedding(cfg_.num_levels, C));
    word_embed = register_module("word_embed", torch::nn::Linear(cfg_.codebook_dim, C));
    shared_fc_ = torch::nn::Linear(C, 6 * C);
    shared_ada_lin =
        register_module("shared_ada_lin", torch::nn::Sequential(torch::nn::SiLU(), shared_fc_));
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < cfg_.depth; ++i) {
        block_handles_.emplace_back(cfg_);
        blocks->push_back(block_handles_.back());
    }
    head_nm = register_module("head_nm", AdaLNBeforeHead(C, C, cfg_.norm_eps));
    head = register_module("head", torch::nn::Linear(C, cfg_.vocab()));
}

void InfinityTransformerImpl::load(const StateDict& dict, const std::string& what) {
    BindOptions opt;
    opt.what = what;
    // Buffers the official load_state_dict drops and recomputes.
    opt.ignore_unexpected = {"lvl_1L", "attn_bias_for_masking", "Infinity_visible_kvlen",
                             "Infinity_invisible_qlen"};
    opt.optional_buffers.push_back("text_proj_for_sos.ca.zero_k_bias");
    for (int64_t i = 0; i < cfg_.depth; ++i)
        for (const char* b : {".sa.zero_k_bias", ".ca.zero_k_bias"})
            opt.optional_buffers.push_back("blocks." + std::to_string(i) + b);
    bind_state_dict(*this, infinity_canonical_names(dict, what), opt);
}

void InfinityTransformerImpl::init_weights(uint64_t seed) {
    at::NoGradGuard g;
    auto gen = at::detail::createCPUGenerator(seed);
    const double std = std::sqrt(1.0 / cfg_.embed_dim / 3.0);
    auto ends_with = [](const std::string& s, const std::string& e) {
        return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0;
    };
    for (auto& p : named_parameters()) {
        const auto& n = p.key();
        auto t = p.value();
        if (ends_with(n, "scale_mul_1H11"))
            t.fill_(std::log(4.0));
        else if (n == "cfg_uncond") {
            trunc_normal_(t, 1.2, gen);
            t.div_(std::sqrt(double(cfg_.text_channels)));
        } else if (n == "text_norm.weight" || ends_with(n, "ca_norm.weight"))
            t.fill_(1.0);
        else if (ends_with(n, "bias"))
            t.zero_();
        else if (ends_with(n, "ada_gss"))
            t.normal_(0.0, 1.0 / std::sqrt(double(cfg_.embed_dim)), gen);
        else
            trunc_normal_(t, std, gen);
    }
    const double depth_div = std::sqrt(2.0 * cfg_.depth);
    head->weight.mul_(0.02);
    for (auto& b : block_handles_) {
        b->sa->proj->weight.div_(depth_div);
        b->ca->proj->weight.div_(depth_div);
        b->ffn->fc2->weight.div_(depth_div);
    }
}

void InfinityTransformerImpl::use_autocast_bf16() {
    at::NoGradGuard g;
    const auto bf16 = at::kBFloat16;
    TORCH_CHECK(pos_start.scalar_type() == at::kFloat, "bf16-autocast needs an fp32 model");
    if (autocast_) return;
    for (auto& b : block_handles_) b->to(bf16);  // the official block.bfloat16()
    word_embed->to(bf16);
    ca_fc1_->to(bf16);
    ca_fc2_->to(bf16);
    pool_->mat_kv->to(bf16);
    pool_->proj->to(bf16);
    for (auto* t : {&pool_->v_bias, &pool_->zero_k_bias}) t->set_data(t->to(bf16));
    autocast_ = true;
}

at::ScalarType InfinityTransformerImpl::compute_dtype() const {
    return block(0).sa->mat_qkv->weight.scalar_type();
}

InfinityText InfinityTransformerImpl::with_unconditional(const InfinityText& text,
                                                         const InfinityText* negative) const {
    InfinityText out;
    out.lens = text.lens;
    if (negative) {
        if (negative->batch() != text.batch())
            throw std::invalid_argument("Infinity: the negative prompts must be one per row (" +
                                        std::to_string(text.batch()) + "), got " +
                                        std::to_string(negative->batch()));
        out.lens.insert(out.lens.end(), negative->lens.begin(), negative->lens.end());
        out.kv_compact =
            at::cat({text.kv_compact, negative->kv_compact.to(text.kv_compact.options())});
        return out;
    }
    std::vector<at::Tensor> un;
    for (int64_t len : text.lens) {
        if (len > cfg_.text_maxlen)
            throw std::invalid_argument("Infinity: a text of " + std::to_string(len) +
                                        " tokens is longer than cfg_uncond (" +
                                        std::to_string(cfg_.text_maxlen) + ")");
        un.push_back(cfg_uncond.narrow(0, 0, len));
        out.lens.push_back(len);
    }
    out.kv_compact = at::cat({text.kv_compact, at::cat(un).to(text.kv_compact.options())});
    return out;
}

InfinityCondition InfinityTransformerImpl::condition(const InfinityText& text,
                                                     bool block_keys) const {
    const int64_t B = text.batch(), Ct5 = cfg_.text_channels, C = cfg_.embed_dim;
    int64_t total = 0, Lt = 0;
    for (int64_t len : text.lens) {
        if (len < 1) throw std::invalid_argument("Infinity: every text needs at least one token");
        total += len;
        Lt = std::max(Lt, len);
    }
    if (!text.kv_compact.defined() || text.kv_compact.dim() != 2 ||
        text.kv_compact.size(0) != total || text.kv_compact.size(1) != Ct5)
        throw std::invalid_argument("Infinity: text features must be (sum(lens) = " +
                                    std::to_string(total) + ", " + std::to_string(Ct5) + ")");
    // text_norm (FastRMSNorm in fp32), then the packed rows laid out as a padded batch.
    auto x = text.kv_compact.to(pos_start.device(), at::kFloat);
    x = x * at::rsqrt(x.pow(2).mean(-1, true).add_(cfg_.norm_eps)) * text_norm_weight;
    auto padded = at::zeros({B, Lt, Ct5}, x.options());
    InfinityCondition c;
    bool ragged = false;
    std::vector<float> mask(static_cast<size_t>(B * Lt), 0.0f);
    for (int64_t b = 0, off = 0; b < B; off += text.lens[b], ++b) {
        padded[b].narrow(0, 0, text.lens[b]).copy_(x.narrow(0, off, text.lens[b]));
        for (int64_t t = text.lens[b]; t < Lt; ++t) {
            mask[b * Lt + t] = -INFINITY;
            ragged = true;
        }
    }
    if (ragged) c.text_mask = at::tensor(mask).view({B, 1, 1, Lt}).to(x.device());
    c.cond_BD =
        pool_->forward({}, pool_->keys_values(padded), c.text_mask).squeeze(1).to(at::kFloat);
    c.text = linear(ca_fc2_, at::gelu(linear(ca_fc1_, padded), "tanh"));
    c.gss = linear(shared_fc_, at::silu(c.cond_BD)).to(at::kFloat).view({B, 1, 6, C});
    if (block_keys)
        for (const auto& b : block_handles_) c.cross.push_back(b->ca->keys_values(c.text));
    return c;
}

at::Tensor InfinityTransformerImpl::start_tokens(const InfinityCondition& c) const {
    const int64_t B = c.cond_BD.size(0);
    return c.cond_BD.unsqueeze(1) + pos_start.expand({B, 1, -1});
}

at::Tensor InfinityTransformerImpl::level_embedding(int64_t scale) const {
    return lvl_embed->weight[scale].view({1, 1, -1});
}

at::Tensor InfinityTransformerImpl::embed_tokens(const at::Tensor& x_Bld) const {
    return linear(word_embed, x_Bld.to(at::kFloat)).to(at::kFloat);
}

at::Tensor InfinityTransformerImpl::next_scale_input(const at::Tensor& x_Bld, int64_t scale,
                                                     int64_t repeat) const {
    auto x = linear(word_embed, x_Bld.to(at::kFloat)).repeat({repeat, 1, 1});
    return (x + level_embedding(scale)).to(x.scalar_type());
}

at::Tensor InfinityTransformerImpl::logits(const at::Tensor& h, const at::Tensor& cond_BD) const {
    return linear(head, head_nm->forward(h.to(at::kFloat), cond_BD.to(at::kFloat))).to(at::kFloat);
}

at::Tensor InfinityTransformerImpl::forward_teacher(const InfinityText& text,
                                                    const at::Tensor& x_wo_prefix,
                                                    const InfinitySchedule& s, bool eager) const {
    const int64_t B = text.batch(), L = s.total_tokens();
    if (x_wo_prefix.dim() != 3 || x_wo_prefix.size(0) != B || x_wo_prefix.size(1) != L - 1 ||
        x_wo_prefix.size(2) != cfg_.codebook_dim)
        throw std::invalid_argument("Infinity teacher forward: x_BLC_wo_prefix must be (" +
                                    std::to_string(B) + ", " + std::to_string(L - 1) + ", " +
                                    std::to_string(cfg_.codebook_dim) + ")");
    if (s.num_scales() > cfg_.num_levels)
        throw std::invalid_argument("Infinity: the schedule has more scales than level embeddings");
    const auto dev = pos_start.device();
    const auto c = condition(text);
    auto x = at::cat({start_tokens(c), embed_tokens(x_wo_prefix.to(dev))}, 1);
    std::vector<int64_t> lvl;
    for (int64_t si = 0; si < s.num_scales(); ++si)
        for (int64_t t = 0; t < s.tokens(si); ++t) lvl.push_back(si);
    x = x + at::embedding(lvl_embed->weight, at::tensor(lvl, at::kLong).to(dev)).unsqueeze(0);
    const auto rope = infinity_rope(s, cfg_.head_dim(), dev);
    const auto mask = infinity_causal_mask(s, dev);
    const AttendFn attend = [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
        return eager ? attention_eager(q, k, v, 1.0, mask) : attention_sdpa(q, k, v, 1.0, mask);
    };
    for (int64_t i = 0; i < cfg_.depth; ++i)
        x = block(i).forward(x, c.gss, c.cross[i], c.text_mask, rope, attend);
    return logits(x, c.cond_BD);
}

InfinityTransformer random_infinity(const InfinityConfig& cfg, uint64_t seed) {
    InfinityTransformer m(cfg);
    m->init_weights(seed);
    return m;
}

}  // namespace varscope
