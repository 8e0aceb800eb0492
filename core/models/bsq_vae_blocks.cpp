#include "core/models/bsq_vae_blocks.h"

#include <torch/nn/modules/container/modulelist.h>

#include <string>

namespace varscope::bsq_vae {

ConvImpl::ConvImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding) {
    conv_ = register_module(
        "conv", torch::nn::Conv2d(
                    torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(padding)));
}

NormImpl::NormImpl(int64_t channels) {
    norm_ = register_module("norm", torch::nn::GroupNorm(torch::nn::GroupNormOptions(
                                                             bsq_norm_groups(channels), channels)
                                                             .eps(1e-6)
                                                             .affine(true)));
}

at::Tensor swish(const at::Tensor& x) {
    // In place when no gradient is recorded (a 1024² decoder's maps are large); out of place
    // otherwise, since sigmoid's backward reads its output. Same product either way.
    if (at::GradMode::is_enabled() && x.requires_grad()) return at::sigmoid(x).mul(x);
    return at::sigmoid(x).mul_(x);
}

// ---------------------------------------------------------------------------------------------

ResnetBlockImpl::ResnetBlockImpl(int64_t in_channels, int64_t out_channels) {
    norm1_ = register_module("norm1", Norm(in_channels));
    conv1_ = register_module("conv1", Conv(in_channels, out_channels, 3, 1, 1));
    norm2_ = register_module("norm2", Norm(out_channels));
    conv2_ = register_module("conv2", Conv(out_channels, out_channels, 3, 1, 1));
    if (in_channels != out_channels)
        nin_shortcut_ = register_module("nin_shortcut", Conv(in_channels, out_channels, 1, 1, 0));
}

at::Tensor ResnetBlockImpl::forward(const at::Tensor& x) {
    at::Tensor h = conv1_(swish(norm1_(x)));
    h = conv2_(swish(norm2_(h)));
    // Official order: x + h (addition is commutative in IEEE, so add_ into h is identical).
    return h.add_(nin_shortcut_ ? nin_shortcut_(x) : x);
}

// ---------------------------------------------------------------------------------------------

ResampleImpl::ResampleImpl(int64_t channels, bool down) : down_(down) {
    conv_ = register_module(
        "conv", down ? Conv(channels, channels, 3, 2, 0) : Conv(channels, channels, 3, 1, 1));
}

at::Tensor ResampleImpl::forward(const at::Tensor& x) {
    if (down_) return conv_(at::constant_pad_nd(x, {0, 1, 0, 1}, 0.0));
    // F.interpolate(scale_factor=2, mode="nearest") passes the scale on: same source indices.
    return conv_(at::upsample_nearest2d(x, {2 * x.size(2), 2 * x.size(3)}, 2.0, 2.0));
}

// ---------------------------------------------------------------------------------------------

LevelImpl::LevelImpl(int64_t in_channels, int64_t out_channels, int64_t num_blocks,
                     const char* resample_name, bool down) {
    auto block = register_module("block", torch::nn::ModuleList());
    register_module("attn", torch::nn::ModuleList());  // official: always empty
    for (int64_t i = 0; i < num_blocks; ++i) {
        blocks_.emplace_back(i == 0 ? in_channels : out_channels, out_channels);
        block->push_back(blocks_.back());
    }
    if (resample_name) resample_ = register_module(resample_name, Resample(out_channels, down));
}

at::Tensor LevelImpl::forward(at::Tensor h) {
    for (auto& b : blocks_) h = b(h);
    return resample_ ? resample_(h) : h;
}

MidImpl::MidImpl(int64_t channels) {
    block_1_ = register_module("block_1", ResnetBlock(channels, channels));
    block_2_ = register_module("block_2", ResnetBlock(channels, channels));
}

// ---------------------------------------------------------------------------------------------

EncoderImpl::EncoderImpl(const BsqVaeConfig& cfg) {
    const auto& mult = cfg.encoder_ch_mult;
    const int64_t ch = cfg.base_ch;
    conv_in_ = register_module("conv_in", Conv(3, ch, 3, 1, 1));
    auto down = register_module("down", torch::nn::ModuleList());
    int64_t block_in = ch;
    for (size_t i = 0; i < mult.size(); ++i) {
        block_in = ch * (i == 0 ? 1 : mult[i - 1]);  // official in_ch_mult = (1,) + ch_mult
        const int64_t block_out = ch * mult[i];
        const bool resample = cfg.encoder_downsamples_at(static_cast<int64_t>(i));
        levels_.emplace_back(block_in, block_out, cfg.num_res_blocks,
                             resample ? "downsample" : nullptr, /*down=*/true);
        down->push_back(levels_.back());
        block_in = block_out;
    }
    mid_ = register_module("mid", Mid(block_in));
    norm_out_ = register_module("norm_out", Norm(block_in));
    conv_out_ = register_module("conv_out", Conv(block_in, cfg.codebook_dim, 3, 1, 1));
}

at::Tensor EncoderImpl::forward(const at::Tensor& img) {
    at::Tensor h = conv_in_(img);
    for (auto& level : levels_) h = level(h);
    h = mid_(h);
    return conv_out_(swish(norm_out_(h)));
}

DecoderImpl::DecoderImpl(const BsqVaeConfig& cfg) {
    const auto& mult = cfg.decoder_ch_mult;
    const int64_t ch = cfg.base_ch, L = static_cast<int64_t>(mult.size());
    int64_t block_in = ch * mult.back();
    conv_in_ = register_module("conv_in", Conv(cfg.codebook_dim, block_in, 3, 1, 1));
    mid_ = register_module("mid", Mid(block_in));
    // Built coarsest first (the channel flow), stored finest first like the official insert(0).
    std::vector<Level> built;
    for (int64_t i = L - 1; i >= 0; --i) {
        const int64_t block_out = ch * mult[i];
        const bool resample = cfg.decoder_upsamples_at(i);
        built.emplace_back(block_in, block_out, cfg.num_res_blocks + 1,
                           resample ? "upsample" : nullptr, /*down=*/false);
        block_in = block_out;
    }
    auto up = register_module("up", torch::nn::ModuleList());
    for (int64_t i = 0; i < L; ++i) {
        levels_.push_back(built[L - 1 - i]);
        up->push_back(levels_.back());
    }
    norm_out_ = register_module("norm_out", Norm(block_in));
    conv_out_ = register_module("conv_out", Conv(block_in, 3, 3, 1, 1));
}

at::Tensor DecoderImpl::forward(const at::Tensor& z) {
    at::Tensor h = mid_(conv_in_(z));
    for (auto it = levels_.rbegin(); it != levels_.rend(); ++it) h = (*it)(h);
    return conv_out_(swish(norm_out_(h)));
}

}  // namespace varscope::bsq_vae
