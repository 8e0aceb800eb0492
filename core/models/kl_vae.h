// The KL-regularised autoencoder MAR uses as its tokenizer (LTH14/mar models/vae.py, LDM's
// AutoencoderKL). Parameter names equal the official state-dict names, so the released
// kl16.ckpt ({"model": {...}}) and our own safetensors exports bind unchanged.
//
//   img [B,3,H,W] in [-1,1] --encode--> posterior N(mean, exp(logvar)), each [B,E,H/d,W/d]
//   MAR tokens = scale_factor * posterior.sample()   (official: .mul_(0.2325))
//   decode(tokens / scale_factor) --> img in [-1,1]
//
// The backbone is VAR's VQVAE backbone (same ResnetBlock / resampling, reused from
// vqvae_blocks.h) except that the LDM attention block has separate q, k, v convolutions and
// attention sits where `resolution >> level` is listed in the attention resolutions (official
// kl16: encoder at 16 of 256, decoder nowhere but in the middle).
//
// Nothing here disables autograd so that training can reuse it; inference callers add
// at::NoGradGuard / c10::InferenceMode themselves.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/io/state_dict.h"

namespace varscope {

struct KlVaeConfig {
    int64_t ch = 128;
    std::vector<int64_t> ch_mult{1, 1, 2, 2, 4};
    int64_t num_res_blocks = 2;
    int64_t embed_dim = 16;       // channels of a latent token (MAR's vae_embed_dim)
    int64_t z_channels = 16;      // encoder output / decoder input width (official: = embed_dim)
    bool double_z = true;         // the encoder emits mean and logvar (2 * z_channels)
    bool use_variational = true;  // false: logvar is fixed to 1 (official use_variational)
    // Image side the attention resolutions refer to; only the ratio matters for the weights.
    int64_t resolution = 256;
    std::vector<int64_t> attn_resolutions{16};      // encoder levels with attention
    std::vector<int64_t> decoder_attn_resolutions;  // decoder levels with it (official: none)
    // MAR multiplies posterior samples by this before the transformer sees them and divides
    // before decoding, so that tokens have roughly unit standard deviation.
    double scale_factor = 0.2325;

    int64_t downsample() const;  // 2^(levels - 1): 16 for kl16
    int64_t latent_size(int64_t image_size) const { return image_size / downsample(); }
    bool encoder_attn_at(int64_t level) const;  // level 0 is the finest
    bool decoder_attn_at(int64_t level) const;
    void validate() const;  // std::invalid_argument naming the bad field

    // The official MAR tokenizer: kl16 (embed_dim 16, ch_mult (1,1,2,2,4), stride 16).
    static KlVaeConfig kl16();
    // The embedded emoji tokenizer: 64x64 images -> 8x8x16 latents (stride 8).
    static KlVaeConfig emoji();

    // Architecture from tensor names and shapes. Resolution and scale factor are not in the
    // weights: the given values are used, and attention resolutions are expressed against
    // `resolution`. Throws CheckpointError naming a tensor that is needed but absent.
    static KlVaeConfig infer_from(const StateDict& dict, int64_t resolution = 256,
                                  double scale_factor = 0.2325);

    nlohmann::json to_json() const;
    // Missing keys keep the kl16 defaults.
    static KlVaeConfig from_json(const nlohmann::json& j);

    bool operator==(const KlVaeConfig& o) const;
    bool operator!=(const KlVaeConfig& o) const { return !(*this == o); }
};

// The encoder's posterior: mean and logvar (clamped to [-30, 20] as officially), each [B,E,h,w].
struct DiagonalGaussian {
    at::Tensor mean;
    at::Tensor logvar;

    at::Tensor std() const { return at::exp(0.5 * logvar); }
    at::Tensor mode() const { return mean; }
    at::Tensor sample(std::optional<at::Generator> generator = std::nullopt) const;
    at::Tensor kl() const;          // KL to N(0, I) summed over C,H,W: [B]
    at::Tensor parameters() const;  // cat(mean, logvar) on dim 1: the official "moments"
};

namespace kl_vae {
class EncoderImpl;
class DecoderImpl;
}  // namespace kl_vae

class KlVaeImpl : public torch::nn::Module {
  public:
    explicit KlVaeImpl(KlVaeConfig cfg = KlVaeConfig::kl16());

    const KlVaeConfig& config() const { return cfg_; }

    // Copies a state dict in (official names), reporting every missing/unexpected/mis-shaped
    // tensor at once (CheckpointError mentioning `what`). Tensors of the training loss
    // ("loss.*", LPIPS/discriminator) are ignored like the official strict=False load does.
    void load(const StateDict& dict, const std::string& what);
    using torch::nn::Module::load;  // keeps the archive overload visible

    DiagonalGaussian encode(const at::Tensor& img);    // img in [-1,1]
    at::Tensor decode(const at::Tensor& z);            // unscaled z -> img clamped to [-1,1]
    at::Tensor decode_unclamped(const at::Tensor& z);  // what training and parity compare

    // MAR's view: tokens = scale_factor * (posterior sample, or mean when generator-less
    // sampling is not wanted) and back.
    at::Tensor encode_tokens(const at::Tensor& img, bool sample = true,
                             std::optional<at::Generator> generator = std::nullopt);
    at::Tensor decode_tokens(const at::Tensor& tokens) {
        return decode(tokens / cfg_.scale_factor);
    }

    torch::nn::Module& encoder();
    torch::nn::Module& decoder();

  private:
    KlVaeConfig cfg_;
    std::shared_ptr<kl_vae::EncoderImpl> encoder_;
    std::shared_ptr<kl_vae::DecoderImpl> decoder_;
    torch::nn::Conv2d quant_conv_{nullptr}, post_quant_conv_{nullptr};
};
TORCH_MODULE(KlVae);

// The state dict a KL-VAE file holds: the official kl16.ckpt nests it under "model" (the
// loader flattens that to "model.<name>"), "state_dict" (Lightning) is accepted too, a raw
// dict or our safetensors export as is. Throws CheckpointError when no KL-VAE tensors are found.
StateDict kl_vae_state_dict(const StateDict& file_contents, const std::string& what);

// Loads a .ckpt/.pth/.safetensors KL VAE: config from the safetensors "varscope.config" metadata
// when present, otherwise inferred from the shapes (resolution and scale factor as given).
KlVae load_kl_vae(const std::string& path, int64_t resolution = 256, double scale_factor = 0.2325);

}  // namespace varscope
