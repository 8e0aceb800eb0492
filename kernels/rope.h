// Infinity's 2-D RoPE of queries and keys as one CUDA kernel (kernels/cuda/rope.cu), with the
// cast to the attention's precision fused in. Bitwise what the ATen composition gives (core's
// apply_rope2d, then .to(out_dtype)), which stays the CPU path and the reference; this file
// only has the CUDA path and the checks that pick it (KernelPolicy::fused_rope, ::reference).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>

#include "kernels/exec_policy.h"

namespace varscope::kernels {

// Whether the fused kernel runs for x (B, H, L, c) float32 and rope (2, L, c/2) or
// (2, B, L, c/2) float32 with an output of `out_dtype`: the build, the device, the policy, the
// dtypes (float32 in, float32 or bfloat16 out). Shapes are checked by fused_rope2d itself.
bool fused_rope_supported(const at::Tensor& x, const at::Tensor& rope, at::ScalarType out_dtype,
                          const KernelPolicy& policy = {}, std::string* why_not = nullptr);

// x rotated pairwise, (x0, x1) -> (cos x0 - sin x1, sin x0 + cos x1), as a contiguous
// (B, H, L, c) tensor of out_dtype. Throws (naming the argument) for a shape that does not fit
// and where fused_rope_supported is false. Strided x and rope are read in place as long as
// their last dimension is contiguous (the permuted q/k of a QKV projection are).
at::Tensor fused_rope2d(const at::Tensor& x, const at::Tensor& rope, at::ScalarType out_dtype,
                        const KernelPolicy& policy = {});
// q and k of one shape in one launch.
std::pair<at::Tensor, at::Tensor> fused_rope2d(const at::Tensor& q, const at::Tensor& k,
                                               const at::Tensor& rope, at::ScalarType out_dtype,
                                               const KernelPolicy& policy = {});

}  // namespace varscope::kernels
