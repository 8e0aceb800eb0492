// Encoder and decoder of Infinity's BSQ VAE (official infinity/models/bsq_vae/flux_vqgan.py with
// the inference settings: 2-d convolutions, GroupNorm over space, no attention). Modules are
// registered under the official attribute names, including the Conv / Normalize wrappers'
// ".conv" / ".norm" level, so module_state_dict() equals the official model.state_dict()
// (less quantizer.lfq.mask, an index buffer inference does not use).
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/normalization.h>

#include <vector>

#include "core/models/bsq_vae_config.h"

namespace varscope::bsq_vae {

// Official Conv(cnn_type="2d"): a Conv2d registered as "conv".
class ConvImpl : public torch::nn::Module {
  public:
    ConvImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding);
    at::Tensor forward(const at::Tensor& x) { return conv_(x); }

  private:
    torch::nn::Conv2d conv_{nullptr};
};
TORCH_MODULE(Conv);

// Official Normalize('group'): GroupNorm(bsq_norm_groups(C), C, eps=1e-6) registered as "norm".
class NormImpl : public torch::nn::Module {
  public:
    explicit NormImpl(int64_t channels);
    at::Tensor forward(const at::Tensor& x) { return norm_(x); }

  private:
    torch::nn::GroupNorm norm_{nullptr};
};
TORCH_MODULE(Norm);

// x * sigmoid(x), computed like the official swish (not at::silu, whose rounding may differ).
at::Tensor swish(const at::Tensor& x);

// norm1 -> swish -> conv1 -> norm2 -> swish -> conv2, plus a 1x1 nin_shortcut when the width
// changes.
class ResnetBlockImpl : public torch::nn::Module {
  public:
    ResnetBlockImpl(int64_t in_channels, int64_t out_channels);
    at::Tensor forward(const at::Tensor& x);

  private:
    Norm norm1_{nullptr}, norm2_{nullptr};
    Conv conv1_{nullptr}, conv2_{nullptr}, nin_shortcut_{nullptr};
};
TORCH_MODULE(ResnetBlock);

// "downsample" (pad right/bottom by one, 3x3 stride-2 conv) or "upsample" (nearest x2, 3x3
// conv); both hold their Conv as "conv".
class ResampleImpl : public torch::nn::Module {
  public:
    ResampleImpl(int64_t channels, bool down);
    at::Tensor forward(const at::Tensor& x);

  private:
    bool down_;
    Conv conv_{nullptr};
};
TORCH_MODULE(Resample);

// One resolution: "block" (res blocks), an empty "attn" list, an optional resampler.
class LevelImpl : public torch::nn::Module {
  public:
    LevelImpl(int64_t in_channels, int64_t out_channels, int64_t num_blocks,
              const char* resample_name /* nullptr: none */, bool down);
    at::Tensor forward(at::Tensor h);

  private:
    std::vector<ResnetBlock> blocks_;
    Resample resample_{nullptr};
};
TORCH_MODULE(Level);

// "mid": block_1 -> block_2 at constant width (official cnn_attention 'no': no attn_1).
class MidImpl : public torch::nn::Module {
  public:
    explicit MidImpl(int64_t channels);
    at::Tensor forward(const at::Tensor& x) { return block_2_(block_1_(x)); }

  private:
    ResnetBlock block_1_{nullptr}, block_2_{nullptr};
};
TORCH_MODULE(Mid);

// Image [B,3,H,W] -> h [B,codebook_dim,H/p,W/p], p = patch_size.
class EncoderImpl : public torch::nn::Module {
  public:
    explicit EncoderImpl(const BsqVaeConfig& cfg);
    at::Tensor forward(const at::Tensor& img);

  private:
    Conv conv_in_{nullptr}, conv_out_{nullptr};
    std::vector<Level> levels_;
    Mid mid_{nullptr};
    Norm norm_out_{nullptr};
};
TORCH_MODULE(Encoder);

// z [B,codebook_dim,h,w] -> image [B,3,h*p,w*p], not clamped.
class DecoderImpl : public torch::nn::Module {
  public:
    explicit DecoderImpl(const BsqVaeConfig& cfg);
    at::Tensor forward(const at::Tensor& z);

  private:
    Conv conv_in_{nullptr}, conv_out_{nullptr};
    Mid mid_{nullptr};
    std::vector<Level> levels_;  // by level index as stored: levels_[0] is the finest
    Norm norm_out_{nullptr};
};
TORCH_MODULE(Decoder);

}  // namespace varscope::bsq_vae
