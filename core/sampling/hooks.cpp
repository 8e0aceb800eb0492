#include "core/sampling/hooks.h"

namespace varscope {

void HookChain::on_scale_begin(ScaleContext& ctx) {
    for (auto& h : hooks_) h->on_scale_begin(ctx);
}

at::Tensor HookChain::select_tokens(const BlockContext& ctx, const at::Tensor& x) {
    for (auto& h : hooks_)
        if (auto idx = h->select_tokens(ctx, x); idx.defined()) return idx;
    return {};
}

void HookChain::on_kv_append(const BlockContext& ctx) {
    for (auto& h : hooks_) h->on_kv_append(ctx);
}

at::Tensor HookChain::attend(const BlockContext& ctx, const at::Tensor& q, const at::Tensor& k,
                             const at::Tensor& v, double s) {
    for (auto& h : hooks_)
        if (auto o = h->attend(ctx, q, k, v, s); o.defined()) return o;
    return {};
}

void HookChain::on_logits(const ScaleContext& ctx, at::Tensor& logits) {
    for (auto& h : hooks_) h->on_logits(ctx, logits);
}

void HookChain::on_scale_end(const ScaleContext& ctx, const at::Tensor& tokens,
                             const at::Tensor& f_hat) {
    for (auto& h : hooks_) h->on_scale_end(ctx, tokens, f_hat);
}

}  // namespace varscope
