// A residual branch's AdaLN gate and its sum into the fp32 stream, x + p(y * gamma), as one CUDA
// kernel (kernels/cuda/gated_residual.cu) instead of two or three passes; p rounds the product to
// bf16 where ATen's product would be bf16. Bitwise what the ATen composition gives
// (x + y.mul(gamma)[.to(bf16)]), which stays the CPU path and the reference; this file only has
// the CUDA path and the check that picks it (KernelPolicy::reference).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "kernels/exec_policy.h"

namespace varscope::kernels {

// Whether the kernel runs for x (B, L, C) float32, y (B, L, C) bfloat16 and gamma (B or 1, 1, C)
// float32 or bfloat16 on one CUDA device, none needing a gradient: the build, the device, the
// policy, the dtypes and the shapes (other inputs take the ATen path).
bool fused_gated_residual_supported(const at::Tensor& x, const at::Tensor& y,
                                    const at::Tensor& gamma, const KernelPolicy& policy = {},
                                    std::string* why_not = nullptr);

// x + p(y * gamma) as a contiguous (B, L, C) float32 tensor; p = the bf16 rounding when
// `round_product`. Throws (naming the argument) for inputs that do not fit and where
// fused_gated_residual_supported is false.
at::Tensor fused_gated_residual(const at::Tensor& x, const at::Tensor& y, const at::Tensor& gamma,
                                bool round_product, const KernelPolicy& policy = {});

}  // namespace varscope::kernels
