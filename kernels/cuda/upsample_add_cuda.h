// LibTorch-facing wrapper of the upsample-and-add kernel (only built with CUDA). The dispatch
// (kernels/upsample_add.cpp) validates the inputs and decides when it runs.
#pragma once

#include <ATen/core/Tensor.h>

namespace varscope::kernels::cuda {

at::Tensor upsample_add(const at::Tensor& o, const at::Tensor& cache, const at::Tensor& tap_ids,
                        const at::Tensor& tap_weights);
// The residual as dense - sparse (o's dtype, channels contiguous, any row strides).
at::Tensor upsample_add_difference(const at::Tensor& o, const at::Tensor& dense,
                                   const at::Tensor& sparse, const at::Tensor& tap_ids,
                                   const at::Tensor& tap_weights);

}  // namespace varscope::kernels::cuda
