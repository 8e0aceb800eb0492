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

// Whether the kernel runs: q, k (B, H, L, c) bfloat16 with a contiguous last dimension (any
// other strides: views of the QKV product), norm_q, norm_k (B, H, L, 1) float32, mul (1, H, 1, 1)
// float32, all on one CUDA device, no gradient; the build, the device and the policy
// (fused_elementwise, reference).
bool fused_qk_norm_supported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& norm_q,
                             const at::Tensor& norm_k, const at::Tensor& mul,
                             const KernelPolicy& policy = {}, std::string* why_not = nullptr);

// (q_out, k_out), bfloat16 (B, H, L, c) laid out as ATen lays out an element-wise result of q
// (at::empty_like). Throws (naming the argument) where fused_qk_norm_supported is false.
std::pair<at::Tensor, at::Tensor> fused_qk_norm_bf16(const at::Tensor& q, const at::Tensor& k,
                                                     const at::Tensor& norm_q,
                                                     const at::Tensor& norm_k,
                                                     const at::Tensor& mul,
                                                     const KernelPolicy& policy = {});

}  // namespace varscope::kernels
