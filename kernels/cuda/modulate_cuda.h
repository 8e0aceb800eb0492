// LibTorch-facing wrapper of the fused AdaLN modulation kernel (only built with CUDA). The
// dispatch (kernels/modulate.cpp) validates the inputs and decides when it runs.
#pragma once

#include <ATen/core/Tensor.h>

namespace varscope::kernels::cuda {

// x contiguous (B, L, C) float32; scale and shift float32 (B or 1, 1, C) with a contiguous last
// dimension. Returns a contiguous (B, L, C) bfloat16 tensor bf16(x * scale + shift).
at::Tensor modulate_bf16(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& shift);

// The same of layer_norm(x) (over C, no affine, eps) in one kernel; x's rows, scale and shift
// 16-byte aligned and C a multiple of 4 (the dispatch checks; throws otherwise).
at::Tensor norm_modulate_bf16(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& shift,
                              double eps);

}  // namespace varscope::kernels::cuda
