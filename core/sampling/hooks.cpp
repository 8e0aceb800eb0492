#include "core/sampling/hooks.h"

#include <algorithm>
#include <atomic>

namespace varscope {

SamplingHooks::SamplingHooks() {
    static std::atomic<uint64_t> next{1};
    instance_id_ = next.fetch_add(1);
}

int64_t ScaleContext::packed_length() const {
    int64_t n = 0;
    for (const auto& s : segments) n += s.length();
    return n;
}

std::optional<std::string> HookChain::graph_signature(const VarConfig& config) {
    std::string joined;
    for (auto& h : hooks_) {
        const auto sig = h->graph_signature(config);
        if (!sig) return std::nullopt;
        joined += (joined.empty() ? "" : "+") + *sig;
    }
    return joined;
}

int64_t HookChain::scales_to_run(const VarConfig& config) {
    int64_t n = config.num_scales();
    for (auto& h : hooks_) n = std::min(n, h->scales_to_run(config));
    return n;
}

bool HookChain::compact_kv_cache(const VarConfig& config) {
    bool any = false;
    for (auto& h : hooks_) any = h->compact_kv_cache(config) || any;
    return any;
}

int64_t HookChain::kv_tokens_bound(const VarConfig& config) {
    int64_t n = config.total_tokens();
    for (auto& h : hooks_) n = std::min(n, h->kv_tokens_bound(config));
    return n;
}

int64_t HookChain::kv_tokens_least(const VarConfig& config) {
    int64_t n = config.total_tokens();
    for (auto& h : hooks_) n = std::min(n, h->kv_tokens_least(config));
    return n;
}

int64_t HookChain::group_size(const ScaleContext& ctx) {
    int64_t g = 1;
    for (auto& h : hooks_) g = std::max(g, h->group_size(ctx));
    return g;
}

void HookChain::on_scale_begin(ScaleContext& ctx) {
    for (auto& h : hooks_) h->on_scale_begin(ctx);
}

at::Tensor HookChain::select_tokens(const BlockContext& ctx, const at::Tensor& x) {
    for (auto& h : hooks_)
        if (auto idx = h->select_tokens(ctx, x); idx.defined()) return idx;
    return {};
}

at::Tensor HookChain::restore_tokens(const BlockContext& ctx, const at::Tensor& x,
                                     const at::Tensor& rows, const at::Tensor& hr) {
    for (auto& h : hooks_)
        if (auto out = h->restore_tokens(ctx, x, rows, hr); out.defined()) return out;
    return {};
}

void HookChain::on_block_output(const BlockContext& ctx, const at::Tensor& x) {
    for (auto& h : hooks_) h->on_block_output(ctx, x);
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

double HookChain::take_deferred_attention_flops(const ScaleContext& ctx) {
    double sum = 0.0;
    for (auto& h : hooks_) sum += h->take_deferred_attention_flops(ctx);
    return sum;
}

void HookChain::on_logits(const ScaleContext& ctx, at::Tensor& logits) {
    for (auto& h : hooks_) h->on_logits(ctx, logits);
}

void HookChain::on_scale_end(const ScaleContext& ctx, const ScaleSegment& seg,
                             const at::Tensor& tokens, const at::Tensor& f_hat) {
    for (auto& h : hooks_) h->on_scale_end(ctx, seg, tokens, f_hat);
}

}  // namespace varscope
