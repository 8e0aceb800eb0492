#include "core/accel/resample.h"

#include <ATen/ATen.h>

namespace varscope {
// The rows of torch's own upsample_linear1d applied to the identity, so the weights are exactly
// torch's.
at::Tensor bilinear_weights(int64_t in, int64_t out, const at::TensorOptions& options) {
    const auto eye =
        at::eye(in, options.dtype(at::kFloat)).unsqueeze(0);  // (1, in, in): channels x length
    const auto w = at::upsample_linear1d(eye, {out}, /*align_corners=*/false);  // (1, in, out)
    return w[0].t().contiguous().to(options.dtype());                           // (out, in)
}

at::Tensor upsample_bilinear_planes(const at::Tensor& x, int64_t out, const at::Tensor& weights) {
    TORCH_CHECK(x.dim() == 4 && x.size(2) == x.size(3),
                "upsample_bilinear_planes needs (N, C, h, h)");
    const int64_t in = x.size(2);
    if (in == out) return x;
    TORCH_CHECK(
        !weights.defined() || (weights.dim() == 2 && weights.size(0) == out &&
                               weights.size(1) == in && weights.scalar_type() == x.scalar_type()),
        "upsample_bilinear_planes: weights must be (", out, ", ", in, ") ", x.scalar_type());
    const auto w = weights.defined() ? weights : bilinear_weights(in, out, x.options());
    return at::matmul(at::matmul(w, x), w.t());  // rows, then columns
}

}  // namespace varscope
