// A sparse attention output plus a coarser grid's residual resampled onto its grid, in one pass
// (SparVAR's CS4A at a later scale: O = softmax-over(mapped)(Q K^T) V + upsample(O_cache),
// sparvar.txt App. A, Table 5):
//   out[b, h, u * t + v, c] = o[b, h, u * t + v, c]
//                           + sum_j wc_j(v) (sum_i wr_i(u) cache[b, h, r_i(u) * g + r_j(v), c])
// with two taps (id, weight) per output row and column, the same table for both (a square grid
// g x g resampled to t x t: bilinear upsampling is separable). Every product and sum is rounded
// on its own in float32 (rows first, then columns, then o), and the result once to o's dtype: the
// CUDA kernel and the LibTorch reference give the same bits. One kernel instead of a transpose,
// two GEMMs with their layout copies, and the add.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "kernels/attention_dispatch.h"

namespace varscope::kernels {

// o (B, H, t*t, d) float32/float16/bfloat16 with d contiguous; cache (B, H, g*g, d) float32;
// tap_ids int64 (t, 2) in [0, g); tap_weights float32 (t, 2). Returns a contiguous tensor of
// o's shape and dtype.
at::Tensor upsample_add(const at::Tensor& o, const at::Tensor& cache, const at::Tensor& tap_ids,
                        const at::Tensor& tap_weights, KernelPath path = KernelPath::Auto,
                        const KernelPolicy& policy = {});

// The same with the residual given as dense - sparse (both of o's dtype and shape (B, H, g*g, d),
// channels contiguous), formed per cell in float32 exactly as at::sub(dense.to(float), sparse):
// SparVAR keeps the decision scale's two outputs instead of writing their float32 difference.
at::Tensor upsample_add_difference(const at::Tensor& o, const at::Tensor& dense,
                                   const at::Tensor& sparse, const at::Tensor& tap_ids,
                                   const at::Tensor& tap_weights,
                                   KernelPath path = KernelPath::Auto,
                                   const KernelPolicy& policy = {});

bool cuda_upsample_add_supported(const at::Tensor& o, const at::Tensor& cache,
                                 const KernelPolicy& policy = {}, std::string* why_not = nullptr);

namespace reference {
at::Tensor upsample_add(const at::Tensor& o, const at::Tensor& cache, const at::Tensor& tap_ids,
                        const at::Tensor& tap_weights);
at::Tensor upsample_add_difference(const at::Tensor& o, const at::Tensor& dense,
                                   const at::Tensor& sparse, const at::Tensor& tap_ids,
                                   const at::Tensor& tap_weights);
}  // namespace reference

}  // namespace varscope::kernels
