#include "core/models/vqvae_blocks.h"

#include <cmath>
#include <string>

namespace varscope::vqvae {

torch::nn::GroupNorm group_norm(int64_t channels) {
    return torch::nn::GroupNorm(torch::nn::GroupNormOptions(32, channels).eps(1e-6).affine(true));
}

torch::nn::Conv2d conv2d(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding) {
    return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, kernel)
                                 .stride(stride)
                                 .padding(padding < 0 ? kernel / 2 : padding));
}

// ---------------------------------------------------------------------------------------------

ResnetBlockImpl::ResnetBlockImpl(int64_t in_channels, int64_t out_channels) {
    norm1_ = register_module("norm1", group_norm(in_channels));
    conv1_ = register_module("conv1", conv2d(in_channels, out_channels, 3));
    norm2_ = register_module("norm2", group_norm(out_channels));
    conv2_ = register_module("conv2", conv2d(out_channels, out_channels, 3));
    if (in_channels != out_channels)
        nin_shortcut_ = register_module("nin_shortcut", conv2d(in_channels, out_channels, 1));
}

at::Tensor ResnetBlockImpl::forward(const at::Tensor& x) {
    at::Tensor h = conv1_(at::silu(norm1_(x)));
    h = conv2_(at::silu(norm2_(h)));
    return (nin_shortcut_ ? nin_shortcut_(x) : x) + h;
}

// ---------------------------------------------------------------------------------------------

AttnBlockImpl::AttnBlockImpl(int64_t channels) : channels_(channels) {
    norm_ = register_module("norm", group_norm(channels));
    qkv_ = register_module("qkv", conv2d(channels, 3 * channels, 1));
    proj_out_ = register_module("proj_out", conv2d(channels, channels, 1));
}

at::Tensor AttnBlockImpl::forward(const at::Tensor& x) {
    const int64_t B = x.size(0), C = channels_, H = x.size(2), W = x.size(3);
    // qkv channels are laid out [q | k | v], each C wide.
    auto qkv = qkv_(norm_(x)).reshape({B, 3, C, H * W}).unbind(1);
    const at::Tensor q = qkv[0].transpose(1, 2);  // B, HW, C
    // pow rather than 1/sqrt: bit-identical to the official int(C) ** -0.5.
    at::Tensor w = at::bmm(q, qkv[1]).mul_(std::pow(static_cast<double>(C), -0.5));
    w = at::softmax(w, /*dim=*/2);                      // B, HW(query), HW(key)
    at::Tensor h = at::bmm(qkv[2], w.transpose(1, 2));  // B, C, HW(query)
    return x + proj_out_(h.reshape({B, C, H, W}));
}

// ---------------------------------------------------------------------------------------------

ResampleImpl::ResampleImpl(int64_t channels, bool down) : down_(down) {
    // Downsampling pads right/bottom by one and uses an unpadded stride-2 conv (LDM convention),
    // upsampling is nearest x2 followed by a same-size conv.
    conv_ = register_module(
        "conv", down ? conv2d(channels, channels, 3, 2, 0) : conv2d(channels, channels, 3, 1, 1));
}

at::Tensor ResampleImpl::forward(const at::Tensor& x) {
    if (down_) return conv_(at::constant_pad_nd(x, {0, 1, 0, 1}, 0.0));
    return conv_(at::upsample_nearest2d(x, {2 * x.size(2), 2 * x.size(3)}));
}

// ---------------------------------------------------------------------------------------------

LevelImpl::LevelImpl(int64_t in_channels, int64_t out_channels, int64_t num_blocks, bool with_attn,
                     const char* resample_name, bool down) {
    auto block = register_module("block", torch::nn::ModuleList());
    auto attn = register_module("attn", torch::nn::ModuleList());  // registered even when empty
    for (int64_t i = 0; i < num_blocks; ++i) {
        blocks_.emplace_back(i == 0 ? in_channels : out_channels, out_channels);
        block->push_back(blocks_.back());
        if (with_attn) {
            attns_.emplace_back(out_channels);
            attn->push_back(attns_.back());
        }
    }
    if (resample_name) resample_ = register_module(resample_name, Resample(out_channels, down));
}

at::Tensor LevelImpl::forward(at::Tensor h) {
    for (size_t i = 0; i < blocks_.size(); ++i) {
        h = blocks_[i](h);
        if (!attns_.empty()) h = attns_[i](h);
    }
    return resample_ ? resample_(h) : h;
}

// ---------------------------------------------------------------------------------------------

MidImpl::MidImpl(int64_t channels, bool with_attn) {
    block_1_ = register_module("block_1", ResnetBlock(channels, channels));
    if (with_attn) attn_1_ = register_module("attn_1", AttnBlock(channels));
    block_2_ = register_module("block_2", ResnetBlock(channels, channels));
}

at::Tensor MidImpl::forward(const at::Tensor& x) {
    at::Tensor h = block_1_(x);
    if (attn_1_) h = attn_1_(h);
    return block_2_(h);
}

// ---------------------------------------------------------------------------------------------

EncoderImpl::EncoderImpl(const VqvaeConfig& cfg, int64_t in_channels) {
    const int64_t levels = static_cast<int64_t>(cfg.ch_mult.size());
    conv_in_ = register_module("conv_in", conv2d(in_channels, cfg.ch, 3));
    auto down = register_module("down", torch::nn::ModuleList());
    int64_t width = cfg.ch;
    for (int64_t i = 0; i < levels; ++i) {
        const bool last = i == levels - 1;
        const int64_t out = cfg.ch * cfg.ch_mult[i];
        levels_.emplace_back(width, out, cfg.num_res_blocks, last && cfg.using_sa,
                             last ? nullptr : "downsample", /*down=*/true);
        down->push_back(levels_.back());
        width = out;
    }
    mid_ = register_module("mid", Mid(width, cfg.using_mid_sa));
    norm_out_ = register_module("norm_out", group_norm(width));
    conv_out_ = register_module("conv_out", conv2d(width, cfg.z_channels, 3));
}

at::Tensor EncoderImpl::forward(const at::Tensor& img) {
    at::Tensor h = conv_in_(img);
    for (auto& level : levels_) h = level(h);
    h = mid_(h);
    return conv_out_(at::silu(norm_out_(h)));
}

// ---------------------------------------------------------------------------------------------

DecoderImpl::DecoderImpl(const VqvaeConfig& cfg, int64_t out_channels) {
    const int64_t levels = static_cast<int64_t>(cfg.ch_mult.size());
    const int64_t top = cfg.ch * cfg.ch_mult.back();
    conv_in_ = register_module("conv_in", conv2d(cfg.z_channels, top, 3));
    mid_ = register_module("mid", Mid(top, cfg.using_mid_sa));
    // The official code builds levels coarse-to-fine but stores them by resolution index
    // (up.0 = finest), so level i reads the width of level i + 1.
    auto up = register_module("up", torch::nn::ModuleList());
    for (int64_t i = 0; i < levels; ++i) {
        const bool last = i == levels - 1;
        const int64_t in = cfg.ch * cfg.ch_mult[last ? i : i + 1];
        levels_.emplace_back(in, cfg.ch * cfg.ch_mult[i], cfg.num_res_blocks + 1,
                             last && cfg.using_sa, i == 0 ? nullptr : "upsample", /*down=*/false);
        up->push_back(levels_.back());
    }
    const int64_t finest = cfg.ch * cfg.ch_mult.front();
    norm_out_ = register_module("norm_out", group_norm(finest));
    conv_out_ = register_module("conv_out", conv2d(finest, out_channels, 3));
}

at::Tensor DecoderImpl::forward(const at::Tensor& z) {
    at::Tensor h = mid_(conv_in_(z));
    for (auto it = levels_.rbegin(); it != levels_.rend(); ++it) h = (*it)(h);
    return conv_out_(at::silu(norm_out_(h)));
}

}  // namespace varscope::vqvae
