// AdaLN's modulation of a normalised fp32 stream, LN(x) * scale + shift, with the bf16 cast of
// the matrix product that consumes it fused in: one CUDA kernel (kernels/cuda/modulate.cu)
// instead of three passes over the stream. Bitwise what the ATen composition gives
// (x.mul(scale).add_(shift).to(bf16)), which stays the CPU path and the reference; this file
// only has the CUDA path and the check that picks it (KernelPolicy::reference).
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

}  // namespace varscope::kernels
