// The bf16-autocast mode's q/k L2 normalisation of VAR's attention (attn_l2_norm), after the norms:
// q_out = bf16((q / max(|q|, 1e-12)) * mul) and k_out = bf16(k / max(|k|, 1e-12)) in float32,
// one CUDA kernel (kernels/cuda/qk_norm.cu) instead of seven ATen passes (two clamps, two
// divisions, the head scale and two casts). Bitwise the ATen composition (F.normalize under
// autocast, then the cast SDPA makes), which stays the CPU path and the reference. The norms
// themselves stay ATen's linalg_vector_norm (their reduction order is ATen's).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>

#include "kernels/exec_policy.h"

namespace varscope::kernels {

// Where the kernel also writes the step's keys and values, e.g. a KV cache's slots for this step:
// `k_out` takes the normalised keys (instead of a new tensor) and `v` is copied into `v_out` in
// the same pass, so the cache append costs no launches of its own. All bfloat16 of k's shape with
// contiguous channels, on k's device; the slots must not overlap q, k or v.
struct QkCacheSlots {
    at::Tensor k_out, v, v_out;
};

// Whether the kernel runs: q, k (B, H, L, c) bfloat16 with a contiguous last dimension (any
// other strides: views of the QKV product), norm_q, norm_k (B, H, L, 1) float32, mul (1, H, 1, 1)
// float32, all on one CUDA device, no gradient, and `slots` (may be null) as described above; the
// build, the device and the policy (fused_elementwise, reference).
bool fused_qk_norm_supported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& norm_q,
                             const at::Tensor& norm_k, const at::Tensor& mul,
                             const KernelPolicy& policy = {}, std::string* why_not = nullptr,
                             const QkCacheSlots* slots = nullptr);

// (q_out, k_out), bfloat16 (B, H, L, c) laid out as ATen lays out an element-wise result of q
// (at::empty_like); with `slots`, k_out is slots->k_out and v is in slots->v_out. Throws (naming
// the argument) where fused_qk_norm_supported is false.
std::pair<at::Tensor, at::Tensor> fused_qk_norm_bf16(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& norm_q, const at::Tensor& norm_k,
    const at::Tensor& mul, const KernelPolicy& policy = {}, const QkCacheSlots* slots = nullptr);

}  // namespace varscope::kernels
