#include "core/models/vqvae.h"

#include "core/io/module_binding.h"

namespace varscope {

namespace {
constexpr const char* kEmaName = "quantize.ema_vocab_hit_SV";
}

VqvaeImpl::VqvaeImpl(VqvaeConfig cfg) : cfg_(std::move(cfg)) {
    cfg_.validate();
    encoder_ = register_module("encoder", vqvae::Encoder(cfg_));
    decoder_ = register_module("decoder", vqvae::Decoder(cfg_));
    quantize_ = register_module("quantize", vqvae::VectorQuantizer(cfg_));
    const int64_t C = cfg_.z_channels, ks = cfg_.quant_conv_ks;
    quant_conv_ = register_module("quant_conv", vqvae::conv2d(C, C, ks));
    post_quant_conv_ = register_module("post_quant_conv", vqvae::conv2d(C, C, ks));
}

void VqvaeImpl::load(const StateDict& dict, const std::string& what) {
    const StateDict* source = &dict;
    StateDict trimmed;
    auto it = dict.find(kEmaName);
    const int64_t scales = static_cast<int64_t>(cfg_.patch_nums.size());
    if (it != dict.end() && it->second.dim() >= 1 && it->second.size(0) != scales) {
        // The hit statistics belong to the scale schedule used in training; a checkpoint
        // trained with other patch_nums keeps ours instead (official behaviour).
        trimmed = dict;
        trimmed.erase(kEmaName);
        source = &trimmed;
    }
    BindOptions options;
    options.optional_buffers = {kEmaName};
    options.what = what;
    bind_state_dict(*this, *source, options);
}

at::Tensor VqvaeImpl::encode(const at::Tensor& img) {
    return quant_conv_(encoder_(img));
}

at::Tensor VqvaeImpl::decode(const at::Tensor& f_hat) {
    return decoder_(post_quant_conv_(f_hat)).clamp_(-1, 1);
}

VqvaeTrainOutput VqvaeImpl::forward_train(const at::Tensor& img, bool with_usages) {
    vqvae::QuantizerTrainOutput q = quantize_->forward_train(encode(img), with_usages);
    return {decoder_(post_quant_conv_(q.f_hat)), q.vq_loss, std::move(q.usages)};
}

}  // namespace varscope
