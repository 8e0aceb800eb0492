// LibTorch-facing wrapper of the fused gated-residual kernel (only built with CUDA). The dispatch
// (kernels/gated_residual.cpp) validates the inputs and decides when it runs.
#pragma once

#include <ATen/core/Tensor.h>

namespace varscope::kernels::cuda {

// x contiguous (B, L, C) float32, y contiguous (B, L, C) bfloat16, gamma (B or 1, 1, C) float32
// or bfloat16 with a contiguous last dimension. Returns a contiguous (B, L, C) float32 tensor
// x + p(y * gamma), p rounding to bf16 when `round_product`.
at::Tensor gated_residual(const at::Tensor& x, const at::Tensor& y, const at::Tensor& gamma,
                          bool round_product);

}  // namespace varscope::kernels::cuda
