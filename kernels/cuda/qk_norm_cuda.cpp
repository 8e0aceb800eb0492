#include "kernels/cuda/qk_norm_cuda.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/cuda/qk_norm_params.h"
#include "kernels/cuda/torch_glue.h"

namespace varscope::kernels::cuda {
namespace {

void strides_of(const at::Tensor& t, int64_t* s) {
    for (int d = 0; d < 3; ++d) s[d] = t.size(d) == 1 ? 0 : t.stride(d);
}

}  // namespace

std::pair<at::Tensor, at::Tensor> qk_norm_bf16(const at::Tensor& q, const at::Tensor& k,
                                               const at::Tensor& norm_q, const at::Tensor& norm_k,
                                               const at::Tensor& mul, const at::Tensor& k_out_in,
                                               const at::Tensor& v, const at::Tensor& v_out) {
    const c10::cuda::CUDAGuard guard(q.device());
    // The layout ATen gives the element-wise result of a strided q (the same dense permutation).
    auto q_out = at::empty_like(q, q.options().dtype(at::kBFloat16));
    auto k_out =
        k_out_in.defined() ? k_out_in : at::empty_like(k, k.options().dtype(at::kBFloat16));
    QkNormParams p;
    p.q = q.data_ptr();
    p.k = k.data_ptr();
    p.norm_q = norm_q.data_ptr<float>();
    p.norm_k = norm_k.data_ptr<float>();
    p.mul = mul.data_ptr<float>();
    p.mul_stride_head = mul.size(1) == 1 ? 0 : mul.stride(1);
    p.q_out = q_out.data_ptr();
    p.k_out = k_out.data_ptr();
    strides_of(q, p.q_stride);
    strides_of(k, p.k_stride);
    strides_of(norm_q, p.nq_stride);
    strides_of(norm_k, p.nk_stride);
    strides_of(q_out, p.qo_stride);
    strides_of(k_out, p.ko_stride);
    if (v.defined()) {
        p.v = v.data_ptr();
        p.v_out = v_out.data_ptr();
        strides_of(v, p.v_stride);
        strides_of(v_out, p.vo_stride);
    }
    p.batch = q.size(0);
    p.heads = q.size(1);
    p.tokens = q.size(2);
    p.channels = q.size(3);
    check_cuda(launch_qk_norm_bf16(p, stream_of(q)), "fused q/k normalisation kernel");
    return {q_out, k_out};
}

}  // namespace varscope::kernels::cuda
