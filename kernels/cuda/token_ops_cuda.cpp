#include "kernels/cuda/token_ops_cuda.h"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "kernels/cuda/token_ops_params.h"
#include "kernels/cuda/torch_glue.h"

namespace varscope::kernels::cuda {
namespace {

TokenElem elem_of(const at::Tensor& t) {
    return token_elem_of(t, "token kernels");
}

}  // namespace

at::Tensor pivotal_scores(const at::Tensor& x_in) {
    const c10::cuda::CUDAGuard guard(x_in.device());
    const auto x = x_in.contiguous();
    const int64_t R = x.size(0), N = x.size(1), C = x.size(2);
    const auto f32 = x.options().dtype(at::kFloat);
    if (C == 0) return at::zeros({R, N}, f32);
    auto mean = at::empty({R, C}, f32);
    auto scores = at::empty({R, N}, f32);
    check_cuda(
        launch_pivotal_scores(x.data_ptr(), elem_of(x), static_cast<int>(R), static_cast<int>(N),
                              static_cast<int>(C), mean.data_ptr<float>(), scores.data_ptr<float>(),
                              stream_of(x)),
        "pivotal score kernels");
    return scores;
}

at::Tensor top_rows(const at::Tensor& scores_in, int64_t keep) {
    const c10::cuda::CUDAGuard guard(scores_in.device());
    const auto s = scores_in.contiguous();
    const int64_t R = s.size(0), N = s.size(1);
    auto out = at::empty({R, keep}, s.options().dtype(at::kLong));
    check_cuda(launch_top_rows(s.data_ptr<float>(), static_cast<int>(R), static_cast<int>(N),
                               static_cast<int>(keep), out.data_ptr<int64_t>(), stream_of(s)),
               "top rows kernel");
    return out;
}

at::Tensor update_index(const at::Tensor& a_in, const at::Tensor& b_in) {
    const c10::cuda::CUDAGuard guard(a_in.device());
    const auto a = a_in.contiguous(), b = b_in.contiguous();
    const int64_t B = a.size(0), C = a.size(1), P = a.numel() / std::max<int64_t>(B * C, 1);
    auto sizes = a.sizes().vec();
    sizes.erase(sizes.begin() + 1);
    auto out = at::empty(sizes, a.options().dtype(at::kFloat));
    if (B * C == 0) return out.fill_(1.0);  // no channels: cos = 0 by the clamp, as the reference
    check_cuda(launch_update_index(a.data_ptr(), b.data_ptr(), elem_of(a), static_cast<int>(B),
                                   static_cast<int>(C), static_cast<int>(P), out.data_ptr<float>(),
                                   stream_of(a)),
               "update index kernel");
    return out;
}

}  // namespace varscope::kernels::cuda
