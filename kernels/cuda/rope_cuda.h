// LibTorch-facing wrapper of the fused RoPE kernel (only built with CUDA). The dispatch
// (kernels/rope.cpp) validates the inputs and decides when it runs.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace varscope::kernels::cuda {

// Each x (B, H, L, c) float32 with a contiguous last dimension, all of one shape; rope float32
// (2, L, c/2) or (2, B, L, c/2), last dimension contiguous. Returns contiguous (B, H, L, c)
// tensors of `out_dtype` (float32 or bfloat16), one per x, from one launch.
std::vector<at::Tensor> rope2d(const std::vector<at::Tensor>& xs, const at::Tensor& rope,
                               at::ScalarType out_dtype);

}  // namespace varscope::kernels::cuda
