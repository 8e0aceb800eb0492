#include "kernels/attention_reference.h"

#include <cmath>
#include <limits>

namespace varscope::kernels::reference {
namespace {

at::ScalarType compute_type(const at::Tensor& q) {
    return q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

double default_scale(const at::Tensor& q, std::optional<double> scale) {
    return scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
}

int64_t ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

// (nqb, n_targets) bool: entry i of row u is active when i < counts[u] and 0 <= index < n_targets.
at::Tensor rows_from_lists(const at::Tensor& indices, const at::Tensor& counts, int64_t n_targets) {
    TORCH_CHECK(indices.dim() == 2 && counts.dim() == 1 && counts.size(0) == indices.size(0),
                "lists: indices must be (n, max) and counts (n), got ", indices.sizes(), " and ",
                counts.sizes());
    const auto idx = indices.to(at::kCPU, at::kLong);
    const auto cnt = counts.to(at::kCPU, at::kLong);
    const auto slot = at::arange(idx.size(1), idx.options()).unsqueeze(0);
    const auto used = (slot < cnt.unsqueeze(1)) & (idx >= 0) & (idx < n_targets);
    // Inactive entries go to an extra column that is dropped afterwards.
    const auto target = at::where(used, idx, at::full_like(idx, n_targets));
    auto rows = at::zeros({idx.size(0), n_targets + 1}, idx.options().dtype(at::kBool));
    rows.scatter_(1, target, true);
    return rows.narrow(1, 0, n_targets);
}

}  // namespace

at::Tensor token_mask_from_block_lists(const at::Tensor& block_indices,
                                       const at::Tensor& block_counts, int64_t block_q,
                                       int64_t block_k, int64_t len_q, int64_t len_k) {
    TORCH_CHECK(block_q > 0 && block_k > 0, "block sizes must be positive");
    TORCH_CHECK(block_indices.size(0) >= ceil_div(len_q, block_q), "block lists cover ",
                block_indices.size(0), " query blocks, need ", ceil_div(len_q, block_q));
    const auto blocks = rows_from_lists(block_indices, block_counts, ceil_div(len_k, block_k));
    return blocks.repeat_interleave(block_q, 0)
        .narrow(0, 0, len_q)
        .repeat_interleave(block_k, 1)
        .narrow(1, 0, len_k);
}

at::Tensor token_mask_from_key_lists(const at::Tensor& key_indices, const at::Tensor& key_counts,
                                     int64_t block_q, int64_t len_q, int64_t len_k) {
    TORCH_CHECK(block_q > 0, "block_q must be positive");
    TORCH_CHECK(key_indices.size(0) >= ceil_div(len_q, block_q), "key lists cover ",
                key_indices.size(0), " query blocks, need ", ceil_div(len_q, block_q));
    return rows_from_lists(key_indices, key_counts, len_k)
        .repeat_interleave(block_q, 0)
        .narrow(0, 0, len_q);
}

AttentionResult masked_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& mask, std::optional<double> scale,
                                 bool return_lse) {
    const auto ct = compute_type(q);
    const auto s = at::matmul(q.to(ct), k.to(ct).transpose(-2, -1)) * default_scale(q, scale);
    const auto masked =
        s.masked_fill(mask.to(q.device()).logical_not(), -std::numeric_limits<double>::infinity());
    const auto lse = at::logsumexp(masked, -1);  // -inf for rows without keys
    const auto has_keys = at::isfinite(lse).unsqueeze(-1);
    const auto p = at::where(has_keys, at::exp(masked - lse.unsqueeze(-1)), at::zeros_like(masked));
    AttentionResult r;
    r.out = at::matmul(p, v.to(ct)).to(q.scalar_type());
    if (return_lse) r.lse = lse.to(at::kFloat);
    return r;
}

AttentionResult block_sparse_attention(const at::Tensor& q, const at::Tensor& k,
                                       const at::Tensor& v, const at::Tensor& block_indices,
                                       const at::Tensor& block_counts, int64_t block_q,
                                       int64_t block_k, std::optional<double> scale,
                                       bool return_lse) {
    const auto mask = token_mask_from_block_lists(block_indices, block_counts, block_q, block_k,
                                                  q.size(-2), k.size(-2));
    return masked_attention(q, k, v, mask, scale, return_lse);
}

AttentionResult gathered_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const at::Tensor& key_indices, const at::Tensor& key_counts,
                                   int64_t block_q, std::optional<double> scale, bool return_lse) {
    const auto mask =
        token_mask_from_key_lists(key_indices, key_counts, block_q, q.size(-2), k.size(-2));
    return masked_attention(q, k, v, mask, scale, return_lse);
}

at::Tensor block_column_sum(const at::Tensor& q, const at::Tensor& k, int64_t block_q,
                            std::optional<double> scale, const at::Tensor& lse) {
    TORCH_CHECK(block_q > 0, "block_q must be positive");
    const auto ct = compute_type(q);
    const auto s = at::matmul(q.to(ct), k.to(ct).transpose(-2, -1)) * default_scale(q, scale);
    at::Tensor p;
    if (lse.defined()) {
        const auto l = lse.to(ct).unsqueeze(-1);
        p = (s - l).exp().masked_fill(l.isneginf(), 0.0);
    } else {
        p = at::softmax(s, -1);
    }
    const int64_t len_q = q.size(-2), len_k = k.size(-2);
    const int64_t nqb = ceil_div(len_q, block_q);
    const auto padded = at::constant_pad_nd(p, {0, 0, 0, nqb * block_q - len_q});
    const auto out = padded.view({q.size(0), q.size(1), nqb, block_q, len_k}).sum(3);
    return ct == at::kDouble ? out : out.to(at::kFloat);
}

}  // namespace varscope::kernels::reference
