#include "core/accel/resample.h"

#include <ATen/ATen.h>

namespace varscope {
namespace {

// (out, in) weights of 1-D linear interpolation with align_corners = false: the rows of torch's
// own upsample_linear1d applied to the identity, so the weights are exactly torch's.
at::Tensor linear_weights(int64_t in, int64_t out, const at::TensorOptions& options) {
    const auto eye =
        at::eye(in, options.dtype(at::kFloat)).unsqueeze(0);  // (1, in, in): channels x length
    const auto w = at::upsample_linear1d(eye, {out}, /*align_corners=*/false);  // (1, in, out)
    return w[0].t().contiguous().to(options.dtype());                           // (out, in)
}

}  // namespace

at::Tensor upsample_bilinear_planes(const at::Tensor& x, int64_t out) {
    TORCH_CHECK(x.dim() == 4 && x.size(2) == x.size(3),
                "upsample_bilinear_planes needs (N, C, h, h)");
    const int64_t in = x.size(2);
    if (in == out) return x;
    const auto w = linear_weights(in, out, x.options());
    return at::matmul(at::matmul(w, x), w.t());  // rows, then columns
}

BilinearTaps bilinear_taps(int64_t in, int64_t out) {
    TORCH_CHECK(in >= 1 && out >= 1, "bilinear_taps: sizes must be >= 1, got ", in, " and ", out);
    const auto w = linear_weights(in, out, at::TensorOptions(at::kFloat));  // (out, in), CPU
    BilinearTaps t{at::zeros({out, 2}, at::kLong), at::zeros({out, 2}, at::kFloat)};
    const auto wa = w.accessor<float, 2>();
    auto ia = t.ids.accessor<int64_t, 2>();
    auto ta = t.weights.accessor<float, 2>();
    for (int64_t o = 0; o < out; ++o) {
        int n = 0;
        for (int64_t i = 0; i < in; ++i) {
            if (wa[o][i] == 0.f) continue;
            TORCH_CHECK(n < 2, "bilinear_taps: row ", o, " of the ", in, " -> ", out,
                        " weights has more than two taps");
            ia[o][n] = i;
            ta[o][n] = wa[o][i];
            ++n;
        }
        if (n == 1) ia[o][1] = ia[o][0];  // one tap: the second adds weight 0 at the same id
    }
    return t;
}

}  // namespace varscope
