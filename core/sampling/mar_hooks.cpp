#include "core/sampling/mar_hooks.h"

#include <ATen/ATen.h>

#include "core/sampling/mar_cuda_graph.h"

namespace varscope {

at::Tensor MarHookState::get(const MarStepContext& ctx, const std::string& name,
                             at::IntArrayRef sizes, const at::TensorOptions& options) {
    auto fits = [&](const at::Tensor& t) {
        return t.defined() && t.sizes() == sizes && t.dtype() == options.dtype() &&
               t.device() == options.device();
    };
    if (ctx.graphs) {
        auto t = ctx.graphs->buffer(prefix_ + name, [&] { return at::empty(sizes, options); });
        TORCH_CHECK(fits(t), "MAR hook state '", prefix_, name, "': the graph set holds ",
                    t.sizes(), " ", t.dtype(), ", the step asks for ", sizes, " ", options.dtype());
        return t;
    }
    auto& t = own_[name];
    if (!fits(t)) t = at::empty(sizes, options);
    return t;
}

at::Tensor MarHookState::get(const MarStepContext& ctx, const std::string& name) {
    const at::Tensor t =
        ctx.graphs ? ctx.graphs->buffer(prefix_ + name, [] { return at::Tensor(); }) : own_[name];
    TORCH_CHECK(t.defined(), "MAR hook state '", prefix_, name,
                "' is read before a step wrote it (step ", ctx.step, ")");
    return t;
}

std::optional<std::string> MarHookChain::graph_signature() const {
    if (hooks_.empty()) return std::nullopt;
    std::string joined;
    for (const auto& h : hooks_) {
        const auto s = h->graph_signature();
        if (!s) return std::nullopt;
        joined += (joined.empty() ? "" : " | ") + *s;
    }
    return joined;
}

void MarHookChain::on_step_begin(MarStepContext& ctx) {
    for (auto& h : hooks_) h->on_step_begin(ctx);
}

bool MarHookChain::skip_unconditional(const MarStepContext& ctx) {
    bool any = false;
    for (auto& h : hooks_) any = h->skip_unconditional(ctx) || any;  // every policy is asked
    return any;
}

at::Tensor MarHookChain::unconditional_rows(const MarStepContext& ctx, const at::Tensor& x_cond) {
    for (auto& h : hooks_)
        if (auto x = h->unconditional_rows(ctx, x_cond); x.defined()) return x;
    return {};
}

void MarHookChain::on_cfg_branches(const MarStepContext& ctx, const at::Tensor& x) {
    for (auto& h : hooks_) h->on_cfg_branches(ctx, x);
}

at::Tensor MarHookChain::select_tokens(const MarBlockContext& ctx, const at::Tensor& x) {
    for (auto& h : hooks_)
        if (auto idx = h->select_tokens(ctx, x); idx.defined()) return idx;
    return {};
}

void MarHookChain::on_keys_values(const MarBlockContext& ctx, const at::Tensor& rows, at::Tensor& k,
                                  at::Tensor& v) {
    for (auto& h : hooks_) h->on_keys_values(ctx, rows, k, v);
}

at::Tensor MarHookChain::attend(const MarBlockContext& ctx, const at::Tensor& q,
                                const at::Tensor& k, const at::Tensor& v, double softmax_scale) {
    for (auto& h : hooks_)
        if (auto o = h->attend(ctx, q, k, v, softmax_scale); o.defined()) return o;
    return {};
}

at::Tensor MarHookChain::restore_tokens(const MarBlockContext& ctx, const at::Tensor& x,
                                        const at::Tensor& rows, const at::Tensor& h) {
    for (auto& p : hooks_)
        if (auto out = p->restore_tokens(ctx, x, rows, h); out.defined()) return out;
    return {};
}

void MarHookChain::on_block_output(const MarBlockContext& ctx, const at::Tensor& x) {
    for (auto& h : hooks_) h->on_block_output(ctx, x);
}

void MarHookChain::on_condition(const MarStepContext& ctx, at::Tensor& z) {
    for (auto& h : hooks_) h->on_condition(ctx, z);
}

void MarHookChain::on_step_end(const MarStepContext& ctx, const at::Tensor& sampled,
                               const at::Tensor& tokens) {
    for (auto& h : hooks_) h->on_step_end(ctx, sampled, tokens);
}

int64_t MarHookChain::head_cfg_cache_period() const {
    for (const auto& h : hooks_)
        if (const int64_t p = h->head_cfg_cache_period(); p != 0) return p;
    return 0;
}

int64_t MarHookChain::head_mlp_cache_period() const {
    for (const auto& h : hooks_)
        if (const int64_t p = h->head_mlp_cache_period(); p != 0) return p;
    return 0;
}

bool MarHookChain::wants_head_cache_stats() const {
    for (const auto& h : hooks_)
        if (h->wants_head_cache_stats()) return true;
    return false;
}

void MarHookChain::on_head_cache_stats(int64_t step, const HeadCacheStats& stats) {
    for (auto& h : hooks_) h->on_head_cache_stats(step, stats);
}

}  // namespace varscope
