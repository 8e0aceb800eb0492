// Infinity's blocks, cross-attention, 2-D RoPE and causal mask (see infinity.h).
#include <ATen/ATen.h>
#include <torch/nn/modules/activation.h>

#include <cmath>
#include <tuple>

#include "core/models/block_elementwise.h"
#include "core/models/infinity.h"
#include "kernels/rope.h"

namespace varscope {
namespace {

// flash-attn's varlen kernel as the official code calls it: bf16 operands (fp32 ones are cast),
// fp32 arithmetic, a bf16-rounded output. Here: the operands' bf16 values in fp32, for SDPA.
at::Tensor bf16_values(const at::Tensor& t) {
    return t.scalar_type() == at::kBFloat16 ? t.to(at::kFloat) : t.to(at::kBFloat16).to(at::kFloat);
}

at::Tensor linear(const torch::nn::Linear& l, const at::Tensor& x) {
    const auto& w = l->weight;
    return at::linear(x.to(w.scalar_type()), w,
                      l->bias.defined() ? std::optional<at::Tensor>(l->bias) : std::nullopt);
}

// AdaLN: LN(x) * (1 + scale) + shift, the input of `consumer`'s product (block_elementwise.h).
// scale1p: 1 + scale, made by the caller (once per call where it can).
at::Tensor adaln_p(const at::Tensor& x, int64_t dim, double eps, const at::Tensor& scale1p,
                   const at::Tensor& shift, const torch::nn::Linear& consumer,
                   const kernels::KernelPolicy* fuse) {
    TORCH_CHECK(x.size(-1) == dim, "Infinity block: input width ", x.size(-1), ", expected ", dim);
    return modulated_norm_input(x.to(at::kFloat), eps, scale1p, shift, consumer, fuse);
}

at::Tensor adaln(const at::Tensor& x, int64_t dim, double eps, const at::Tensor& scale,
                 const at::Tensor& shift, const torch::nn::Linear& consumer,
                 const kernels::KernelPolicy* fuse) {
    return adaln_p(x, dim, eps, scale.add(1), shift, consumer, fuse);
}

}  // namespace

// ----------------------------------------------------------------------------- cross-attention

InfinityCrossAttentionImpl::InfinityCrossAttentionImpl(int64_t C, int64_t kv_dim, int64_t H,
                                                       bool pool)
    : heads_(H), head_dim_(C / H), pool_(pool) {
    if (pool)
        mat_q_pool = register_parameter("mat_q", at::zeros({1, H, C / H}));
    else
        mat_q_lin = register_module("mat_q", torch::nn::Linear(C, C));
    mat_kv = register_module(
        "mat_kv", torch::nn::Linear(torch::nn::LinearOptions(kv_dim, 2 * C).bias(false)));
    v_bias = register_parameter("v_bias", at::zeros({C}));
    zero_k_bias = register_buffer("zero_k_bias", at::zeros({C}));
    proj = register_module("proj", torch::nn::Linear(C, C));
}

CrossKv InfinityCrossAttentionImpl::keys_values(const at::Tensor& text) const {
    const int64_t B = text.size(0), Lt = text.size(1);
    const auto& w = mat_kv->weight;
    auto kv = at::linear(text.to(w.scalar_type()), w, at::cat({zero_k_bias, v_bias}))
                  .view({B, Lt, 2, heads_, head_dim_});
    return {kv.select(2, 0).transpose(1, 2), kv.select(2, 1).transpose(1, 2)};
}

at::Tensor InfinityCrossAttentionImpl::forward(const at::Tensor& q_BLC, const CrossKv& kv,
                                               const at::Tensor& mask) const {
    return output(attend(queries(q_BLC, kv), kv, mask));
}

at::Tensor InfinityCrossAttentionImpl::queries(const at::Tensor& q_BLC, const CrossKv& kv) const {
    const int64_t B = kv.k.size(0);
    if (pool_)
        return mat_q_pool.unsqueeze(2).expand({B, heads_, 1, head_dim_}).to(kv.k.scalar_type());
    return linear(mat_q_lin, q_BLC).view({B, q_BLC.size(1), heads_, head_dim_}).transpose(1, 2);
}

at::Tensor InfinityCrossAttentionImpl::attend(const at::Tensor& q, const CrossKv& kv,
                                              const at::Tensor& mask) const {
    return attend_values(q, values_of(kv), mask);
}

CrossKv InfinityCrossAttentionImpl::values_of(const CrossKv& kv) {
    return {bf16_values(kv.k), bf16_values(kv.v)};
}

at::Tensor InfinityCrossAttentionImpl::attend_values(const at::Tensor& q, const CrossKv& values,
                                                     const at::Tensor& mask) const {
    std::optional<at::Tensor> m;
    if (mask.defined()) m = mask.to(at::kFloat);
    return at::scaled_dot_product_attention(bf16_values(q), values.k, values.v, m, 0.0, false,
                                            1.0 / std::sqrt(double(head_dim_)));
}

at::Tensor InfinityCrossAttentionImpl::output(const at::Tensor& o_BHLc) const {
    const int64_t B = o_BHLc.size(0), Lq = o_BHLc.size(2);
    return linear(proj, bf16_values(o_BHLc).transpose(1, 2).reshape({B, Lq, heads_ * head_dim_}));
}

// ----------------------------------------------------------------------------- block

InfinityBlockImpl::InfinityBlockImpl(const InfinityConfig& cfg)
    : dim_(cfg.embed_dim), eps_(cfg.norm_eps) {
    const int64_t C = cfg.embed_dim;
    sa = register_module("sa", SelfAttention(C, cfg.num_heads, /*attn_l2_norm=*/true));
    ca = register_module("ca", InfinityCrossAttention(C, C, cfg.num_heads, /*pool=*/false));
    ffn = register_module("ffn", FeedForward(C, cfg.mlp_hidden));
    ca_norm = register_module(
        "ca_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({C}).eps(cfg.norm_eps)));
    ada_gss = register_parameter("ada_gss", at::zeros({1, 1, 6, C}));
}

Modulation InfinityBlockImpl::modulation(const at::Tensor& gss) const {
    auto p = (ada_gss + gss).unbind(2);
    return {p[0], p[1], p[2], p[3], p[4], p[5]};
}

InfinityBlockConstants InfinityBlockImpl::constants(Modulation m, CrossKv text) const {
    InfinityBlockConstants k;
    k.m = std::move(m);
    k.scale1p = k.m.scale1.add(1);  // adaln's own expression
    k.scale2p = k.m.scale2.add(1);
    k.qkv_bias = sa->qkv_bias();
    k.q_mul = q_mul();
    // Copies: the block may be a streaming slot whose weights change with the next layer.
    k.ca_weight = ca_norm->weight.to(at::kFloat, false, /*copy=*/true);
    k.ca_bias = ca_norm->bias.to(at::kFloat, false, /*copy=*/true);
    k.text_values = InfinityCrossAttentionImpl::values_of(text);
    k.text = std::move(text);
    return k;
}

std::vector<at::Tensor> InfinityBlockConstants::tensors() const {
    return {m.gamma1, m.gamma2, m.scale1,      m.scale2,     m.shift1,  m.shift2,
            scale1p,  scale2p,  qkv_bias,      q_mul,        ca_weight, ca_bias,
            text.k,   text.v,   text_values.k, text_values.v};
}

InfinityBlockConstants InfinityBlockConstants::from_tensors(const at::Tensor* t) {
    InfinityBlockConstants k;
    k.m = {t[0], t[1], t[2], t[3], t[4], t[5]};
    k.scale1p = t[6];
    k.scale2p = t[7];
    k.qkv_bias = t[8];
    k.q_mul = t[9];
    k.ca_weight = t[10];
    k.ca_bias = t[11];
    k.text = {t[12], t[13]};
    k.text_values = {t[14], t[15]};
    return k;
}

at::Tensor InfinityBlockImpl::sa_input(const at::Tensor& x, const Modulation& m) const {
    return adaln(x, dim_, eps_, m.scale1, m.shift1, sa->mat_qkv, nullptr);
}

Qkv InfinityBlockImpl::attention_inputs(const at::Tensor& x, const InfinityBlockConstants& k,
                                        const at::Tensor& rope,
                                        const kernels::KernelPolicy& policy) const {
    const auto in = adaln_p(x, dim_, eps_, k.scale1p, k.m.shift1, sa->mat_qkv, &policy);
    return rotated_qkv(in, k.qkv_bias, k.q_mul, rope, policy,
                       /*pre_cast=*/in.scalar_type() == at::kBFloat16);
}

at::Tensor InfinityBlockImpl::q_mul() const {
    // bf16-autocast: the head scale's exp runs in fp32 (autocast's fp32 list).
    return sa->scale_mul_1H11.clamp_max(std::log(100.0)).to(at::kFloat).exp();
}

Qkv InfinityBlockImpl::project_qkv(const at::Tensor& x_in, const at::Tensor& rope,
                                   const kernels::KernelPolicy& policy, bool pre_cast) const {
    return rotated_qkv(x_in, sa->qkv_bias(), q_mul(), rope, policy, pre_cast);
}

Qkv InfinityBlockImpl::rotated_qkv(const at::Tensor& x_in, const at::Tensor& qkv_bias,
                                   const at::Tensor& q_mul, const at::Tensor& rope,
                                   const kernels::KernelPolicy& policy, bool pre_cast) const {
    // bf16-autocast (bf16 weights, fp32 stream): q and k are normalised and rotated in fp32 and
    // rounded to bf16 afterwards, where the official SDPA call casts them.
    const auto wt = sa->mat_qkv->weight.scalar_type();
    const bool autocast = pre_cast || x_in.scalar_type() != wt;
    auto r = sa->project_qkv(x_in, qkv_bias, q_mul, /*keep_fp32_qk=*/autocast, pre_cast);
    // The fused kernel: one launch for q and k instead of ~9 elementwise kernels each and the
    // casts. Only for fp32 q/k: a bf16 q/k (no autocast) promotes to fp32 in the ATen path.
    const auto out = autocast ? wt : at::kFloat;
    if (kernels::fused_rope_supported(r.q, rope, out, policy) && r.k.scalar_type() == at::kFloat &&
        r.q.sizes() == r.k.sizes()) {
        std::tie(r.q, r.k) = kernels::fused_rope2d(r.q, r.k, rope, out, policy);
        return r;
    }
    r.q = apply_rope2d(r.q, rope);
    r.k = apply_rope2d(r.k, rope);
    if (autocast) {
        r.q = r.q.to(wt);
        r.k = r.k.to(wt);
    }
    return r;
}

at::Tensor InfinityBlockImpl::sa_output(const at::Tensor& o, const Modulation& m) const {
    // The official x_sa.mul_(gamma1) is in place: under autocast the product stays bf16.
    auto a = sa->project_out(o);
    return a.mul(m.gamma1).to(a.scalar_type());
}

at::Tensor InfinityBlockImpl::sa_residual(const at::Tensor& x, const at::Tensor& o,
                                          const Modulation& m,
                                          const kernels::KernelPolicy* fuse) const {
    // sa_output's product is rounded to the projection's dtype (the official in-place mul_).
    return gated_residual(x, sa->project_out(o), m.gamma1, GateProduct::AsBranch, fuse);
}

at::Tensor InfinityBlockImpl::ffn_residual(const at::Tensor& x, const InfinityBlockConstants& k,
                                           const kernels::KernelPolicy* fuse) const {
    const auto in = adaln_p(x, dim_, eps_, k.scale2p, k.m.shift2, ffn->fc1, fuse);
    return gated_residual(x, ffn->forward(in), k.m.gamma2, GateProduct::Promoted, fuse);
}

at::Tensor InfinityBlockImpl::cross_branch(const at::Tensor& x, const CrossKv& kv,
                                           const at::Tensor& mask) const {
    return ca->forward(cross_input(x), kv, mask).to(at::kFloat);
}

at::Tensor InfinityBlockImpl::cross_input(const at::Tensor& x) const {
    // layer_norm runs in fp32 under autocast (bf16 gains are cast up).
    return at::layer_norm(x.to(at::kFloat), {dim_}, ca_norm->weight.to(at::kFloat),
                          ca_norm->bias.to(at::kFloat), eps_);
}

at::Tensor InfinityBlockImpl::cross_input(const at::Tensor& x,
                                          const InfinityBlockConstants& k) const {
    return at::layer_norm(x.to(at::kFloat), {dim_}, k.ca_weight, k.ca_bias, eps_);
}

at::Tensor InfinityBlockImpl::ffn_branch(const at::Tensor& x, const Modulation& m) const {
    const auto in = adaln(x, dim_, eps_, m.scale2, m.shift2, ffn->fc1, nullptr);
    return ffn->forward(in).mul(m.gamma2);
}

at::Tensor InfinityBlockImpl::forward(const at::Tensor& x, const at::Tensor& gss, const CrossKv& kv,
                                      const at::Tensor& text_mask, const at::Tensor& rope,
                                      const AttendFn& attend) const {
    const auto m = modulation(gss);
    const auto qkv = project_qkv(sa_input(x, m), rope);
    auto h = x + sa_output(attend(qkv.q, qkv.k, qkv.v), m);
    h = h + cross_branch(h, kv, text_mask);
    return h + ffn_branch(h, m);
}

// ----------------------------------------------------------------------------- RoPE and mask

at::Tensor apply_rope2d(const at::Tensor& x, const at::Tensor& rope) {
    auto sizes = x.sizes().vec();
    sizes.back() /= 2;
    sizes.push_back(2);
    auto xr = x.reshape(sizes);
    auto x0 = xr.select(-1, 0), x1 = xr.select(-1, 1);
    // (L, c/2) broadcast over batch and heads, or (B, L, c/2) per batch row (per-row tokens).
    auto cos = rope.select(0, 0), sin = rope.select(0, 1);
    if (cos.dim() == 3) {
        cos = cos.unsqueeze(1);
        sin = sin.unsqueeze(1);
    }
    return at::stack({cos * x0 - sin * x1, sin * x0 + cos * x1}, -1).reshape(x.sizes());
}

at::Tensor infinity_rope(const InfinitySchedule& s, int64_t head_dim, const at::Device& device) {
    // The official precompute_rope2d_freqs_grid, mode 2: frequencies theta_i = 10000^(-i/half)
    // over half the head (rows) and half again (columns); a scale of (h, w) takes the grid
    // positions round(i * H / h), round(j * W / w) of the template's final grid (H, W).
    const int64_t half = head_dim / 2;
    auto inv =
        at::reciprocal(at::pow(10000.0, at::arange(0, half, 2, at::kLong).to(at::kFloat) / half));
    std::vector<at::Tensor> parts;
    for (const auto& hw : s.scales) {
        const int64_t ph = hw[0], pw = hw[1];
        auto rows =
            (at::arange(ph, at::kLong) * (double(s.rope_h) / double(ph))).round().to(at::kInt);
        auto cols =
            (at::arange(pw, at::kLong) * (double(s.rope_w) / double(pw))).round().to(at::kInt);
        auto fh = at::outer(rows.to(at::kFloat), inv);  // (ph, half/2)
        auto fw = at::outer(cols.to(at::kFloat), inv);  // (pw, half/2)
        auto grid = at::cat(
            {fh.unsqueeze(1).expand({ph, pw, -1}), fw.unsqueeze(0).expand({ph, pw, -1})}, -1);
        parts.push_back(at::stack({grid.cos(), grid.sin()}, 0).reshape({2, ph * pw, half}));
    }
    return at::cat(parts, 1).to(device);
}

at::Tensor infinity_causal_mask(const InfinitySchedule& s, const at::Device& device) {
    std::vector<int64_t> lvl;
    for (int64_t si = 0; si < s.num_scales(); ++si)
        for (int64_t t = 0; t < s.tokens(si); ++t) lvl.push_back(si);
    const int64_t L = static_cast<int64_t>(lvl.size());
    auto d = at::tensor(lvl, at::kLong);
    auto allowed = d.view({L, 1}).ge(d.view({1, L}));
    return at::zeros({L, L})
        .masked_fill_(allowed.logical_not(), -INFINITY)
        .view({1, 1, L, L})
        .to(device);
}

}  // namespace varscope
