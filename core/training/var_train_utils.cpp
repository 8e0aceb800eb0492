#include "core/training/var_train_utils.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <c10/core/InferenceMode.h>

#include <stdexcept>

#include "core/io/module_binding.h"
#include "core/training/grow_depth.h"

namespace varscope {

at::Tensor foreground_token_mask(const at::Tensor& images_u8,
                                 const std::vector<int64_t>& patch_nums, int white) {
    if (images_u8.dim() != 4 || images_u8.size(1) != 3)
        throw std::invalid_argument("foreground_token_mask: images must be (N, 3, H, W)");
    c10::InferenceMode g;
    auto figure = images_u8.lt(white).any(1, /*keepdim=*/true).to(at::kFloat);  // (N, 1, H, W)
    std::vector<at::Tensor> per_scale;
    for (int64_t pn : patch_nums)
        per_scale.push_back(std::get<0>(at::adaptive_max_pool2d(figure, {pn, pn})).flatten(1));
    return at::cat(per_scale, 1).gt(0.5);
}

nlohmann::json evaluate_var_teacher(const VarTransformerImpl& var, const at::Tensor& labels,
                                    const at::Tensor& inputs, const at::Tensor& targets,
                                    const at::Tensor& fg, int64_t last_scale_tokens,
                                    int64_t batch) {
    c10::InferenceMode g;
    const int64_t n = targets.size(0), V = var.config().vocab_size, L = targets.size(1);
    double correct = 0, loss_sum = 0, fg_correct = 0, fg_count = 0, last_correct = 0,
           last_count = 0;
    for (int64_t b = 0; b < n; b += batch) {
        auto rows = at::arange(b, std::min(b + batch, n),
                               at::TensorOptions().dtype(at::kLong).device(targets.device()));
        auto logits =
            var.forward_teacher(labels.index_select(0, rows), inputs.index_select(0, rows));
        auto tgt = targets.index_select(0, rows);
        auto m = fg.index_select(0, rows);
        auto hit = logits.argmax(-1).eq(tgt);
        correct += hit.sum().item<double>();
        fg_correct += hit.logical_and(m).sum().item<double>();
        fg_count += m.sum().item<double>();
        auto last = hit.narrow(1, L - last_scale_tokens, last_scale_tokens),
             lm = m.narrow(1, L - last_scale_tokens, last_scale_tokens);
        last_correct += last.logical_and(lm).sum().item<double>();
        last_count += lm.sum().item<double>();
        loss_sum +=
            at::cross_entropy_loss(logits.reshape({-1, V}), tgt.reshape({-1})).item<double>() *
            rows.size(0);
    }
    return {{"loss", loss_sum / n},
            {"token_acc", correct / targets.numel()},
            {"fg_token_acc", fg_count > 0 ? fg_correct / fg_count : 0.0},
            {"fg_fraction", fg_count / targets.numel()},
            {"last_scale_fg_acc", last_count > 0 ? last_correct / last_count : 0.0}};
}

int64_t grow_var_from(VarTransformerImpl& model, const StateDict& small, const std::string& what) {
    const int64_t D = model.config().depth;
    int64_t d = 0;
    const StateDict merged =
        grown_state_dict(module_state_dict(model), D, small, var_grow_spec(), what, &d);
    BindOptions o;
    o.what = what;
    o.optional_buffers = {"attn_bias_for_masking", "lvl_1L"};
    for (int64_t i = 0; i < D; ++i)
        o.optional_buffers.push_back("blocks." + std::to_string(i) + ".attn.zero_k_bias");
    bind_state_dict(model, merged, o);
    return d;
}

void ema_update(const std::vector<at::Tensor>& ema, const std::vector<at::Tensor>& params,
                double rate) {
    if (ema.size() != params.size())
        throw std::invalid_argument("ema_update: parameter lists differ");
    at::NoGradGuard g;
    std::vector<at::Tensor> src;
    src.reserve(params.size());
    for (const auto& p : params) src.push_back(p.detach());
    at::_foreach_lerp_(ema, src, 1.0 - rate);
}

AutocastBf16::AutocastBf16(const at::Device& device, bool enabled) {
    if (!enabled || device.is_cpu()) return;
    type_ = device.type();
    prev_enabled_ = at::autocast::is_autocast_enabled(type_);
    prev_dtype_ = at::autocast::get_autocast_dtype(type_);
    prev_cache_ = at::autocast::is_autocast_cache_enabled();
    at::autocast::set_autocast_cache_enabled(false);
    at::autocast::set_autocast_dtype(type_, at::kBFloat16);
    at::autocast::set_autocast_enabled(type_, true);
    active_ = true;
}

AutocastBf16::~AutocastBf16() {
    if (!active_) return;
    at::autocast::set_autocast_enabled(type_, prev_enabled_);
    at::autocast::set_autocast_dtype(type_, prev_dtype_);
    at::autocast::set_autocast_cache_enabled(prev_cache_);
}

}  // namespace varscope
