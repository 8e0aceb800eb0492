// LibTorch-facing wrapper of the fused AdaLN modulation kernel (only built with CUDA). The
// dispatch (kernels/modulate.cpp) validates the inputs and decides when it runs.
#pragma once

#include <ATen/core/Tensor.h>

namespace varscope::kernels::cuda {

// x contiguous (B, L, C) float32; scale and shift float32 (B or 1, 1, C) with a contiguous last
// dimension. Returns a contiguous (B, L, C) bfloat16 tensor bf16(x * scale + shift).
at::Tensor modulate_bf16(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& shift);

}  // namespace varscope::kernels::cuda
