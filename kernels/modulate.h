// AdaLN's modulation of a normalised fp32 stream, LN(x) * scale + shift, with the bf16 cast of
// the matrix product that consumes it fused in: one CUDA kernel (kernels/cuda/modulate.cu)
// instead of three passes over the stream; or with the LayerNorm too (norm_modulate.cu). Bitwise
// what the ATen composition gives (x.mul(scale).add_(shift).to(bf16)), which stays the CPU path and
// the reference; this file only has the CUDA path and the check that picks it
// (KernelPolicy::reference).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "kernels/exec_policy.h"

namespace varscope::kernels {

// Whether the kernel runs for x (B, L, C) and scale, shift (B or 1, 1, C), all float32 on one
// CUDA device, none needing a gradient (the kernel has no backward): the build, the device, the
// policy, the dtypes and the shapes (other shapes take the ATen path).
bool fused_modulate_supported(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& shift,
                              const KernelPolicy& policy = {}, std::string* why_not = nullptr);

// bf16(x * scale + shift) as a contiguous (B, L, C) tensor. Throws (naming the argument) for a
// shape that does not fit and where fused_modulate_supported is false.
at::Tensor fused_modulate_bf16(const at::Tensor& x, const at::Tensor& scale,
                               const at::Tensor& shift, const KernelPolicy& policy = {});

// The LayerNorm before it in the same kernel (kernels/cuda/norm_modulate.cu):
// bf16(layer_norm(x, {C}, no affine, eps) * scale + shift), bitwise at::layer_norm followed by the
// composition above. Only where ATen runs its vectorized LayerNorm kernel, whose statistics the
// kernel forms in the same order: x contiguous float32 with 16-byte aligned rows of a multiple of
// 4 values (up to 2^24); scale and shift rows 16-byte aligned too; otherwise false (the caller
// takes at::layer_norm and fused_modulate_bf16).
bool fused_norm_modulate_supported(const at::Tensor& x, const at::Tensor& scale,
                                   const at::Tensor& shift, const KernelPolicy& policy = {},
                                   std::string* why_not = nullptr);
at::Tensor fused_norm_modulate_bf16(const at::Tensor& x, const at::Tensor& scale,
                                    const at::Tensor& shift, double eps,
                                    const KernelPolicy& policy = {});

}  // namespace varscope::kernels
