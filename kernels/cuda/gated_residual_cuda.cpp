#include "kernels/cuda/gated_residual_cuda.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/cuda/gated_residual_params.h"
#include "kernels/cuda/torch_glue.h"

namespace varscope::kernels::cuda {

at::Tensor gated_residual(const at::Tensor& x, const at::Tensor& y, const at::Tensor& gamma,
                          bool round_product) {
    const c10::cuda::CUDAGuard guard(x.device());
    auto out = at::empty(x.sizes(), x.options());
    GatedResidualParams p;
    p.x = x.data_ptr<float>();
    p.y = y.data_ptr();
    p.gamma = gamma.data_ptr();
    p.gamma_type = gamma.scalar_type() == at::kBFloat16 ? GammaType::BFloat16 : GammaType::Float32;
    p.gamma_stride_batch = gamma.size(0) == 1 ? 0 : gamma.stride(0);  // one row broadcasts
    p.round_product = round_product;
    p.out = out.data_ptr<float>();
    p.batch = x.size(0);
    p.tokens = x.size(1);
    p.channels = x.size(2);
    check_cuda(launch_gated_residual(p, stream_of(x)), "fused gated-residual kernel");
    return out;
}

}  // namespace varscope::kernels::cuda
