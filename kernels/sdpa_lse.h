// Dense attention through the backend at::scaled_dot_product_attention would pick, together with
// that backend's per-row log-sum-exp. SparVAR's decision scale needs both the output and the
// softmax normaliser of every query row (for the column sums, block_column_sum's lse): taking the
// normaliser from the fused kernel saves the dense QK^T pass that would recompute it.
#pragma once

#include <ATen/ATen.h>

#include <optional>

#include "kernels/attention_dispatch.h"  // AttentionResult

namespace varscope::kernels {

// q (B, H, Lq, D), k and v (B, H, Lk, D); no mask, no dropout, not causal. `out` is bitwise what
// at::scaled_dot_product_attention(q, k, v, {}, 0.0, false, scale) returns: the same backend
// (at::_fused_sdp_choice) is called with the same arguments. `lse` (B, H, Lq), contiguous, on q's
// device: log(sum_j exp(scale * q.k_j)) in natural log (scale defaults to 1/sqrt(D)), float32
// (float64 for float64 inputs on the CPU), the convention block_column_sum's lse expects.
// Undefined where the chosen backend gives none: math, a device other than CPU/CUDA, a head dim
// the flash kernels would pad (D % 8 != 0), or with autocast on (SDPA would cast the inputs).
AttentionResult sdpa_with_lse(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              std::optional<double> scale = std::nullopt);

}  // namespace varscope::kernels
