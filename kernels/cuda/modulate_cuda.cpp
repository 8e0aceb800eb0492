#include "kernels/cuda/modulate_cuda.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/cuda/modulate_params.h"
#include "kernels/cuda/torch_glue.h"

namespace varscope::kernels::cuda {

namespace {

ModulateParams params_of(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& shift,
                         const at::Tensor& out) {
    ModulateParams p;
    p.x = x.data_ptr<float>();
    p.scale = scale.data_ptr<float>();
    p.shift = shift.data_ptr<float>();
    // A batch of one broadcasts over x's batch.
    p.scale_stride_batch = scale.size(0) == 1 ? 0 : scale.stride(0);
    p.shift_stride_batch = shift.size(0) == 1 ? 0 : shift.stride(0);
    p.out = out.data_ptr();
    p.batch = x.size(0);
    p.tokens = x.size(1);
    p.channels = x.size(2);
    return p;
}

}  // namespace

at::Tensor modulate_bf16(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& shift) {
    const c10::cuda::CUDAGuard guard(x.device());
    auto out = at::empty(x.sizes(), x.options().dtype(at::kBFloat16));
    check_cuda(launch_modulate_bf16(params_of(x, scale, shift, out), stream_of(x)),
               "fused modulation kernel");
    return out;
}

at::Tensor norm_modulate_bf16(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& shift,
                              double eps) {
    const c10::cuda::CUDAGuard guard(x.device());
    auto out = at::empty(x.sizes(), x.options().dtype(at::kBFloat16));
    // ATen hands the LayerNorm kernel its eps as the accumulation type (float).
    check_cuda(launch_norm_modulate_bf16(params_of(x, scale, shift, out), static_cast<float>(eps),
                                         stream_of(x)),
               "fused LayerNorm and modulation kernel");
    return out;
}

}  // namespace varscope::kernels::cuda
