#include "core/models/kl_vae.h"

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/normalization.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/io/checkpoint.h"
#include "core/io/json_fields.h"
#include "core/io/json_read.h"
#include "core/io/module_binding.h"
#include "core/models/detect.h"
#include "core/models/vqvae_blocks.h"

namespace varscope {

// ---------------------------------------------------------------------------------------------
// Building blocks that differ from VAR's VQVAE: the LDM attention block (separate q, k, v),
// and levels / mid / encoder / decoder holding it at configurable resolutions. ResnetBlock,
// the resamplers, GroupNorm and the conv helper are VAR's (identical names and math).

namespace kl_vae {

class AttnBlockImpl : public torch::nn::Module {
  public:
    explicit AttnBlockImpl(int64_t channels) : channels_(channels) {
        norm_ = register_module("norm", vqvae::group_norm(channels));
        q_ = register_module("q", vqvae::conv2d(channels, channels, 1));
        k_ = register_module("k", vqvae::conv2d(channels, channels, 1));
        v_ = register_module("v", vqvae::conv2d(channels, channels, 1));
        proj_out_ = register_module("proj_out", vqvae::conv2d(channels, channels, 1));
    }

    at::Tensor forward(const at::Tensor& x) {
        const int64_t B = x.size(0), C = channels_, H = x.size(2), W = x.size(3);
        const at::Tensor h = norm_(x);
        const at::Tensor q = q_(h).reshape({B, C, H * W}).transpose(1, 2);  // B, HW, C
        const at::Tensor k = k_(h).reshape({B, C, H * W});
        const at::Tensor v = v_(h).reshape({B, C, H * W});
        // pow rather than 1/sqrt: bit-identical to the official int(c) ** (-0.5).
        at::Tensor w = at::bmm(q, k).mul_(std::pow(static_cast<double>(C), -0.5));
        w = at::softmax(w, /*dim=*/2);                         // B, HW(query), HW(key)
        const at::Tensor out = at::bmm(v, w.transpose(1, 2));  // B, C, HW(query)
        return x + proj_out_(out.reshape({B, C, H, W}));
    }

  private:
    int64_t channels_;
    torch::nn::GroupNorm norm_{nullptr};
    torch::nn::Conv2d q_{nullptr}, k_{nullptr}, v_{nullptr}, proj_out_{nullptr};
};
TORCH_MODULE(AttnBlock);

// "down.<i>" / "up.<i>": res blocks, one attention block after each when the level has
// attention, then the optional resampler.
class LevelImpl : public torch::nn::Module {
  public:
    LevelImpl(int64_t in_channels, int64_t out_channels, int64_t num_blocks, bool with_attn,
              const char* resample_name, bool down) {
        auto block = register_module("block", torch::nn::ModuleList());
        auto attn = register_module("attn", torch::nn::ModuleList());
        for (int64_t i = 0; i < num_blocks; ++i) {
            blocks_.emplace_back(i == 0 ? in_channels : out_channels, out_channels);
            block->push_back(blocks_.back());
            if (with_attn) {
                attns_.emplace_back(out_channels);
                attn->push_back(attns_.back());
            }
        }
        if (resample_name)
            resample_ = register_module(resample_name, vqvae::Resample(out_channels, down));
    }

    at::Tensor forward(at::Tensor h) {
        for (size_t i = 0; i < blocks_.size(); ++i) {
            h = blocks_[i](h);
            if (!attns_.empty()) h = attns_[i](h);
        }
        return resample_ ? resample_(h) : h;
    }

  private:
    std::vector<vqvae::ResnetBlock> blocks_;
    std::vector<AttnBlock> attns_;
    vqvae::Resample resample_{nullptr};
};
TORCH_MODULE(Level);

class MidImpl : public torch::nn::Module {
  public:
    explicit MidImpl(int64_t channels) {
        block_1_ = register_module("block_1", vqvae::ResnetBlock(channels, channels));
        attn_1_ = register_module("attn_1", AttnBlock(channels));
        block_2_ = register_module("block_2", vqvae::ResnetBlock(channels, channels));
    }
    at::Tensor forward(const at::Tensor& x) { return block_2_(attn_1_(block_1_(x))); }

  private:
    vqvae::ResnetBlock block_1_{nullptr}, block_2_{nullptr};
    AttnBlock attn_1_{nullptr};
};
TORCH_MODULE(Mid);

class EncoderImpl : public torch::nn::Module {
  public:
    explicit EncoderImpl(const KlVaeConfig& cfg) {
        const int64_t levels = static_cast<int64_t>(cfg.ch_mult.size());
        conv_in_ = register_module("conv_in", vqvae::conv2d(3, cfg.ch, 3));
        auto down = register_module("down", torch::nn::ModuleList());
        int64_t width = cfg.ch;
        for (int64_t i = 0; i < levels; ++i) {
            const bool last = i == levels - 1;
            const int64_t out = cfg.ch * cfg.ch_mult[i];
            levels_.emplace_back(width, out, cfg.num_res_blocks, cfg.encoder_attn_at(i),
                                 last ? nullptr : "downsample", /*down=*/true);
            down->push_back(levels_.back());
            width = out;
        }
        mid_ = register_module("mid", Mid(width));
        norm_out_ = register_module("norm_out", vqvae::group_norm(width));
        const int64_t out = cfg.double_z ? 2 * cfg.z_channels : cfg.z_channels;
        conv_out_ = register_module("conv_out", vqvae::conv2d(width, out, 3));
    }

    at::Tensor forward(const at::Tensor& img) {
        at::Tensor h = conv_in_(img);
        for (auto& level : levels_) h = level(h);
        return conv_out_(at::silu(norm_out_(mid_(h))));
    }

  private:
    torch::nn::Conv2d conv_in_{nullptr}, conv_out_{nullptr};
    std::vector<Level> levels_;
    Mid mid_{nullptr};
    torch::nn::GroupNorm norm_out_{nullptr};
};

class DecoderImpl : public torch::nn::Module {
  public:
    explicit DecoderImpl(const KlVaeConfig& cfg) {
        const int64_t levels = static_cast<int64_t>(cfg.ch_mult.size());
        const int64_t top = cfg.ch * cfg.ch_mult.back();
        conv_in_ = register_module("conv_in", vqvae::conv2d(cfg.z_channels, top, 3));
        mid_ = register_module("mid", Mid(top));
        // Built coarse-to-fine officially but stored by resolution index (up.0 = finest), so
        // level i reads the width of level i + 1.
        auto up = register_module("up", torch::nn::ModuleList());
        for (int64_t i = 0; i < levels; ++i) {
            const bool last = i == levels - 1;
            const int64_t in = cfg.ch * cfg.ch_mult[last ? i : i + 1];
            levels_.emplace_back(in, cfg.ch * cfg.ch_mult[i], cfg.num_res_blocks + 1,
                                 cfg.decoder_attn_at(i), i == 0 ? nullptr : "upsample",
                                 /*down=*/false);
            up->push_back(levels_.back());
        }
        const int64_t finest = cfg.ch * cfg.ch_mult.front();
        norm_out_ = register_module("norm_out", vqvae::group_norm(finest));
        conv_out_ = register_module("conv_out", vqvae::conv2d(finest, 3, 3));
    }

    at::Tensor forward(const at::Tensor& z) {
        at::Tensor h = mid_(conv_in_(z));
        for (auto it = levels_.rbegin(); it != levels_.rend(); ++it) h = (*it)(h);
        return conv_out_(at::silu(norm_out_(h)));
    }

  private:
    torch::nn::Conv2d conv_in_{nullptr}, conv_out_{nullptr};
    Mid mid_{nullptr};
    std::vector<Level> levels_;
    torch::nn::GroupNorm norm_out_{nullptr};
};

}  // namespace kl_vae

// ---------------------------------------------------------------------------------------------
// Configuration

namespace {

bool contains(const std::vector<int64_t>& list, int64_t v) {
    return std::find(list.begin(), list.end(), v) != list.end();
}

bool has(const StateDict& dict, const std::string& name) {
    return dict.count(name) > 0;
}

const at::Tensor& need(const StateDict& dict, const std::string& name, const char* purpose) {
    auto it = dict.find(name);
    if (it == dict.end())
        throw CheckpointError("KL VAE checkpoint lacks tensor '" + name + "' (needed to infer " +
                              purpose + ")");
    return it->second;
}

int64_t count_indexed(const StateDict& dict, const std::string& prefix, const std::string& suffix) {
    int64_t n = 0;
    while (has(dict, prefix + std::to_string(n) + suffix)) ++n;
    return n;
}

bool is_zip(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    char magic[4] = {};
    f.read(magic, 4);
    return f.gcount() == 4 && magic[0] == 'P' && magic[1] == 'K';
}

}  // namespace

int64_t KlVaeConfig::downsample() const {
    return ch_mult.empty() ? 1 : int64_t{1} << (ch_mult.size() - 1);
}

bool KlVaeConfig::encoder_attn_at(int64_t level) const {
    return contains(attn_resolutions, resolution >> level);
}

bool KlVaeConfig::decoder_attn_at(int64_t level) const {
    return contains(decoder_attn_resolutions, resolution >> level);
}

void KlVaeConfig::validate() const {
    auto fail = [](const std::string& what) {
        throw std::invalid_argument("KlVaeConfig: " + what);
    };
    if (ch <= 0 || ch_mult.empty()) fail("ch must be positive and ch_mult non-empty");
    if (ch % 32 != 0) fail("ch must be a multiple of 32 (GroupNorm(32, C))");
    for (int64_t m : ch_mult)
        if (m <= 0) fail("ch_mult entries must be positive");
    if (num_res_blocks <= 0) fail("num_res_blocks must be positive");
    if (embed_dim <= 0 || z_channels <= 0) fail("embed_dim and z_channels must be positive");
    if (resolution <= 0 || resolution % downsample() != 0)
        fail("resolution must be a positive multiple of the downsampling factor " +
             std::to_string(downsample()));
    if (!(scale_factor > 0) || !std::isfinite(scale_factor)) fail("scale_factor must be > 0");
}

KlVaeConfig KlVaeConfig::kl16() {
    return KlVaeConfig{};
}

KlVaeConfig KlVaeConfig::emoji() {
    KlVaeConfig c;
    c.ch = 64;
    c.ch_mult = {1, 2, 2, 4};
    c.num_res_blocks = 1;
    c.resolution = 64;
    c.attn_resolutions = {8};  // the lowest level, as kl16 has at 16 of 256
    c.decoder_attn_resolutions = {};
    c.scale_factor = 1.0;  // replaced by the trained model's measured value
    return c;
}

KlVaeConfig KlVaeConfig::infer_from(const StateDict& dict, int64_t resolution,
                                    double scale_factor) {
    KlVaeConfig c;
    c.resolution = resolution;
    c.scale_factor = scale_factor;
    c.ch = need(dict, "encoder.conv_in.weight", "ch").size(0);
    need(dict, "encoder.down.0.block.0.conv1.weight", "ch_mult");
    const int64_t levels = count_indexed(dict, "encoder.down.", ".block.0.conv1.weight");
    c.num_res_blocks = count_indexed(dict, "encoder.down.0.block.", ".conv1.weight");
    c.ch_mult.clear();
    c.attn_resolutions.clear();
    c.decoder_attn_resolutions.clear();
    for (int64_t i = 0; i < levels; ++i) {
        const std::string level = std::to_string(i);
        const std::string name = "encoder.down." + level + ".block.0.conv2.weight";
        const int64_t out = need(dict, name, "ch_mult").size(0);
        if (out % c.ch != 0)
            throw CheckpointError("KL VAE checkpoint: '" + name + "' has " + std::to_string(out) +
                                  " output channels, not a multiple of ch=" + std::to_string(c.ch));
        c.ch_mult.push_back(out / c.ch);
        if (has(dict, "encoder.down." + level + ".attn.0.q.weight"))
            c.attn_resolutions.push_back(resolution >> i);
        if (has(dict, "decoder.up." + level + ".attn.0.q.weight"))
            c.decoder_attn_resolutions.push_back(resolution >> i);
    }
    // post_quant_conv maps embed_dim -> z_channels; quant_conv emits 2 * embed_dim when
    // variational; the encoder emits 2 * z_channels when double_z.
    // A handle, not a reference: GCC 13 warns about references returned through temporaries.
    const at::Tensor post = need(dict, "post_quant_conv.weight", "embed_dim and z_channels");
    c.embed_dim = post.size(1);
    c.z_channels = post.size(0);
    c.double_z = need(dict, "encoder.conv_out.weight", "double_z").size(0) == 2 * c.z_channels;
    c.use_variational =
        need(dict, "quant_conv.weight", "use_variational").size(0) == 2 * c.embed_dim;
    return c;
}

nlohmann::json KlVaeConfig::to_json() const {
    return nlohmann::json{{"ch", ch},
                          {"ch_mult", ch_mult},
                          {"num_res_blocks", num_res_blocks},
                          {"embed_dim", embed_dim},
                          {"z_channels", z_channels},
                          {"double_z", double_z},
                          {"use_variational", use_variational},
                          {"resolution", resolution},
                          {"attn_resolutions", attn_resolutions},
                          {"decoder_attn_resolutions", decoder_attn_resolutions},
                          {"scale_factor", scale_factor}};
}

KlVaeConfig KlVaeConfig::from_json(const nlohmann::json& j) {
    KlVaeConfig c;
    if (!j.is_object()) throw std::invalid_argument("KlVaeConfig: expected a JSON object");
    require_known_fields(j, KlVaeConfig{}.to_json(), "KlVaeConfig");
    auto get = [&](const char* k, auto& v) { read_json_field(j, k, v, "KlVaeConfig: "); };
    get("ch", c.ch);
    get("ch_mult", c.ch_mult);
    get("num_res_blocks", c.num_res_blocks);
    get("embed_dim", c.embed_dim);
    get("z_channels", c.z_channels);
    get("double_z", c.double_z);
    get("use_variational", c.use_variational);
    get("resolution", c.resolution);
    get("attn_resolutions", c.attn_resolutions);
    get("decoder_attn_resolutions", c.decoder_attn_resolutions);
    get("scale_factor", c.scale_factor);
    return c;
}

bool KlVaeConfig::operator==(const KlVaeConfig& o) const {
    return ch == o.ch && ch_mult == o.ch_mult && num_res_blocks == o.num_res_blocks &&
           embed_dim == o.embed_dim && z_channels == o.z_channels && double_z == o.double_z &&
           use_variational == o.use_variational && resolution == o.resolution &&
           attn_resolutions == o.attn_resolutions &&
           decoder_attn_resolutions == o.decoder_attn_resolutions && scale_factor == o.scale_factor;
}

// ---------------------------------------------------------------------------------------------
// Posterior

at::Tensor DiagonalGaussian::sample(std::optional<at::Generator> generator) const {
    at::Tensor noise;
    if (generator && generator->device() != mean.device())
        noise = at::randn(mean.sizes(), *generator, mean.options().device(generator->device()))
                    .to(mean.device());
    else
        noise = at::randn(mean.sizes(), generator, mean.options());
    return mean + std() * noise;
}

at::Tensor DiagonalGaussian::kl() const {
    return 0.5 * (mean.pow(2) + at::exp(logvar) - 1.0 - logvar).sum({1, 2, 3});
}

at::Tensor DiagonalGaussian::parameters() const {
    return at::cat({mean, logvar}, 1);
}

// ---------------------------------------------------------------------------------------------
// Module

KlVaeImpl::KlVaeImpl(KlVaeConfig cfg) : cfg_(std::move(cfg)) {
    cfg_.validate();
    encoder_ = register_module("encoder", std::make_shared<kl_vae::EncoderImpl>(cfg_));
    decoder_ = register_module("decoder", std::make_shared<kl_vae::DecoderImpl>(cfg_));
    const int64_t moments_in = cfg_.double_z ? 2 * cfg_.z_channels : cfg_.z_channels;
    const int64_t moments_out = cfg_.use_variational ? 2 * cfg_.embed_dim : cfg_.embed_dim;
    quant_conv_ = register_module("quant_conv", vqvae::conv2d(moments_in, moments_out, 1));
    post_quant_conv_ =
        register_module("post_quant_conv", vqvae::conv2d(cfg_.embed_dim, cfg_.z_channels, 1));
}

torch::nn::Module& KlVaeImpl::encoder() {
    return *encoder_;
}
torch::nn::Module& KlVaeImpl::decoder() {
    return *decoder_;
}

void KlVaeImpl::load(const StateDict& dict, const std::string& what) {
    StateDict model;
    for (const auto& [name, t] : dict)
        if (name.rfind("loss.", 0) != 0) model.emplace(name, t);
    BindOptions options;
    options.what = what;
    bind_state_dict(*this, model, options);
}

DiagonalGaussian KlVaeImpl::encode(const at::Tensor& img) {
    const at::Tensor moments = quant_conv_(encoder_->forward(img));
    DiagonalGaussian posterior;
    if (cfg_.use_variational) {
        auto halves = moments.chunk(2, 1);
        posterior.mean = halves[0];
        posterior.logvar = halves[1].clamp(-30.0, 20.0);
    } else {
        // Official: the moments are concatenated with ones, i.e. logvar = 1.
        posterior.mean = moments;
        posterior.logvar = at::ones_like(moments);
    }
    return posterior;
}

at::Tensor KlVaeImpl::decode_unclamped(const at::Tensor& z) {
    return decoder_->forward(post_quant_conv_(z));
}

at::Tensor KlVaeImpl::decode(const at::Tensor& z) {
    return decode_unclamped(z).clamp_(-1, 1);
}

at::Tensor KlVaeImpl::encode_tokens(const at::Tensor& img, bool sample,
                                    std::optional<at::Generator> generator) {
    const DiagonalGaussian posterior = encode(img);
    return (sample ? posterior.sample(generator) : posterior.mode()) * cfg_.scale_factor;
}

// ---------------------------------------------------------------------------------------------
// Files

StateDict kl_vae_state_dict(const StateDict& contents, const std::string& what) {
    auto is_kl = [](const StateDict& d) { return detect_family(d) == ModelFamily::KlVae; };
    if (is_kl(contents)) return contents;
    for (const char* prefix : {"model", "state_dict"}) {
        StateDict inner = select_prefix(contents, prefix);
        if (!inner.empty() && is_kl(inner)) return inner;
    }
    std::string found = "no tensors";
    if (!contents.empty()) {
        found = "e.g. '" + contents.begin()->first + "'";
        const ModelFamily family = detect_family(contents);
        if (family != ModelFamily::Unknown) found += " (a " + family_name(family) + " checkpoint)";
    }
    throw CheckpointError(what +
                          ": not a KL VAE checkpoint: expected 'encoder.conv_in.weight', "
                          "'quant_conv.weight' and 'decoder.conv_out.weight' at the top level or "
                          "under 'model.' / 'state_dict.'; found " +
                          found);
}

KlVae load_kl_vae(const std::string& path, int64_t resolution, double scale_factor) {
    const StateDict dict = kl_vae_state_dict(load_checkpoint(path), path);
    KlVaeConfig inferred = KlVaeConfig::infer_from(dict, resolution, scale_factor);
    KlVaeConfig cfg = inferred;
    if (!is_zip(path)) {
        const auto metadata = read_safetensors_metadata(path);
        auto it = metadata.find("varscope.config");
        if (it != metadata.end()) {
            nlohmann::json j;
            try {
                j = parse_json(it->second, "metadata 'varscope.config'");
            } catch (const JsonReadError& e) {
                throw CheckpointError(path + ": " + e.what());
            }
            if (!j.is_object())
                throw CheckpointError(path + ": metadata 'varscope.config' is not a JSON object");
            try {
                cfg = KlVaeConfig::from_json(j);
            } catch (const std::invalid_argument& e) {
                throw CheckpointError(path + ": metadata 'varscope.config': " + e.what());
            }
            // The stored resolution names the attention levels; the weights must agree.
            KlVaeConfig check = KlVaeConfig::infer_from(dict, cfg.resolution, cfg.scale_factor);
            if (check != cfg)
                throw CheckpointError(
                    path + ": metadata 'varscope.config' " + cfg.to_json().dump() +
                    " disagrees with the tensors, which say " + check.to_json().dump());
        }
    }
    try {
        cfg.validate();
    } catch (const std::invalid_argument& e) {
        throw CheckpointError(path + ": " + e.what());
    }
    KlVae vae(cfg);
    vae->load(dict, path);
    vae->eval();
    return vae;
}

}  // namespace varscope
