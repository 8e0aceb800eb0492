// LibTorch-facing wrapper of the fused q/k normalisation kernel (only built with CUDA). The
// dispatch (kernels/qk_norm.cpp) validates the inputs and decides when it runs.
#pragma once

#include <ATen/core/Tensor.h>

#include <utility>

namespace varscope::kernels::cuda {

// q, k bfloat16 (B, H, L, c) with a contiguous last dimension; norm_q, norm_k float32
// (B, H, L, 1); mul float32 (1, H, 1, 1). Returns bfloat16 tensors shaped and laid out as
// at::empty_like(q), except that a defined k_out (bfloat16, k's shape, contiguous channels) takes
// the keys; a defined v (the same) is copied into v_out in the same pass.
std::pair<at::Tensor, at::Tensor> qk_norm_bf16(const at::Tensor& q, const at::Tensor& k,
                                               const at::Tensor& norm_q, const at::Tensor& norm_k,
                                               const at::Tensor& mul, const at::Tensor& k_out = {},
                                               const at::Tensor& v = {},
                                               const at::Tensor& v_out = {});

}  // namespace varscope::kernels::cuda
