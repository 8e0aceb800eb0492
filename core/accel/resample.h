// Resampling of many small feature maps (keys or attention outputs seen as (N, C, h, w) grids
// with thousands of channels and a few hundred pixels). torch's CUDA bilinear upsampling
// parallelises over output pixels and loops over N*C inside each thread, which made AMS-KV's
// similarity check ~90 ms per layer at batch 64; the separable matrix form below runs as two
// batched GEMMs and gives the same values (within float rounding) on every device.
#pragma once

#include <ATen/core/Tensor.h>

namespace varscope {

// Same as at::upsample_bilinear2d(x, {out, out}, align_corners=false) for square maps.
at::Tensor upsample_bilinear_planes(const at::Tensor& x, int64_t out);

// The same 1-D interpolation as two taps per output index (kernels/upsample_add.h): ids int64
// (out, 2) and weights float32 (out, 2), the non-zero entries of torch's weights in id order
// (one tap: the second repeats its id with weight 0). On the CPU.
struct BilinearTaps {
    at::Tensor ids, weights;
};
BilinearTaps bilinear_taps(int64_t in, int64_t out);

}  // namespace varscope
