// Convolutional encoder and decoder of VAR's VQVAE (the LDM "vq-f16" backbone). Child modules
// are registered under the official attribute names so that parameter names match checkpoints.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/normalization.h>

#include <vector>

#include "core/models/vqvae_config.h"

namespace varscope::vqvae {

// GroupNorm(32, C, eps=1e-6, affine), the only normalisation the backbone uses.
torch::nn::GroupNorm group_norm(int64_t channels);
torch::nn::Conv2d conv2d(int64_t in, int64_t out, int64_t kernel, int64_t stride = 1,
                         int64_t padding = -1 /* -1: kernel / 2 */);

// norm1 -> silu -> conv1 -> norm2 -> silu -> conv2, plus a 1x1 nin_shortcut when the width
// changes (the official Identity shortcut and Dropout(0) hold no tensors and are omitted).
class ResnetBlockImpl : public torch::nn::Module {
  public:
    ResnetBlockImpl(int64_t in_channels, int64_t out_channels);
    at::Tensor forward(const at::Tensor& x);

  private:
    torch::nn::GroupNorm norm1_{nullptr}, norm2_{nullptr};
    torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, nin_shortcut_{nullptr};
};
TORCH_MODULE(ResnetBlock);

// Single-head self-attention over all H*W positions with a fused 1x1 qkv projection.
class AttnBlockImpl : public torch::nn::Module {
  public:
    explicit AttnBlockImpl(int64_t channels);
    at::Tensor forward(const at::Tensor& x);

  private:
    int64_t channels_;
    torch::nn::GroupNorm norm_{nullptr};
    torch::nn::Conv2d qkv_{nullptr}, proj_out_{nullptr};
};
TORCH_MODULE(AttnBlock);

// Holder for the `conv` of Downsample2x / Upsample2x, whose resampling has no parameters.
class ResampleImpl : public torch::nn::Module {
  public:
    ResampleImpl(int64_t channels, bool down);
    at::Tensor forward(const at::Tensor& x);

  private:
    bool down_;
    torch::nn::Conv2d conv_{nullptr};
};
TORCH_MODULE(Resample);

// One resolution of the encoder ("down.<i>") or decoder ("up.<i>"): `block` res blocks, an
// `attn` list (empty except at the lowest resolution) and an optional resampler.
class LevelImpl : public torch::nn::Module {
  public:
    LevelImpl(int64_t in_channels, int64_t out_channels, int64_t num_blocks, bool with_attn,
              const char* resample_name /* nullptr: none */, bool down);
    at::Tensor forward(at::Tensor h);

  private:
    std::vector<ResnetBlock> blocks_;
    std::vector<AttnBlock> attns_;
    Resample resample_{nullptr};
};
TORCH_MODULE(Level);

// "mid": block_1 -> attn_1 (if using_mid_sa) -> block_2 at constant width.
class MidImpl : public torch::nn::Module {
  public:
    MidImpl(int64_t channels, bool with_attn);
    at::Tensor forward(const at::Tensor& x);

  private:
    ResnetBlock block_1_{nullptr}, block_2_{nullptr};
    AttnBlock attn_1_{nullptr};
};
TORCH_MODULE(Mid);

// Image [B,3,H,W] -> latent [B,z,H/d,W/d] with d = cfg.downsample().
class EncoderImpl : public torch::nn::Module {
  public:
    explicit EncoderImpl(const VqvaeConfig& cfg, int64_t in_channels = 3);
    at::Tensor forward(const at::Tensor& img);

  private:
    torch::nn::Conv2d conv_in_{nullptr}, conv_out_{nullptr};
    std::vector<Level> levels_;
    Mid mid_{nullptr};
    torch::nn::GroupNorm norm_out_{nullptr};
};
TORCH_MODULE(Encoder);

// Latent [B,z,h,w] -> image [B,3,h*d,w*d] (not clamped).
class DecoderImpl : public torch::nn::Module {
  public:
    explicit DecoderImpl(const VqvaeConfig& cfg, int64_t out_channels = 3);
    at::Tensor forward(const at::Tensor& z);

  private:
    torch::nn::Conv2d conv_in_{nullptr}, conv_out_{nullptr};
    Mid mid_{nullptr};
    std::vector<Level> levels_;  // by resolution index, as stored: levels_[0] is the finest
    torch::nn::GroupNorm norm_out_{nullptr};
};
TORCH_MODULE(Decoder);

}  // namespace varscope::vqvae
