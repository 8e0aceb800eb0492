// Resampling of many small feature maps (keys or attention outputs seen as (N, C, h, w) grids
// with thousands of channels and a few hundred pixels). torch's CUDA bilinear upsampling
// parallelises over output pixels and loops over N*C inside each thread, which made AMS-KV's
// similarity check ~90 ms per layer at batch 64; the separable matrix form below runs as two
// batched GEMMs and gives the same values (within float rounding) on every device.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/TensorOptions.h>

namespace varscope {

// Same as at::upsample_bilinear2d(x, {out, out}, align_corners=false) for square maps. `weights`:
// bilinear_weights(h, out) built once by a caller that resamples often (device ops only then).
at::Tensor upsample_bilinear_planes(const at::Tensor& x, int64_t out,
                                    const at::Tensor& weights = {});

// (out, in) weights of 1-D linear interpolation with align_corners = false.
at::Tensor bilinear_weights(int64_t in, int64_t out, const at::TensorOptions& options);

}  // namespace varscope
