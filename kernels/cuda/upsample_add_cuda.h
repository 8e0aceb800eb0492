// LibTorch-facing wrapper of the upsample-and-add kernel (only built with CUDA). The dispatch
// (kernels/upsample_add.cpp) validates the inputs and decides when it runs.
#pragma once

#include <ATen/core/Tensor.h>

namespace varscope::kernels::cuda {

at::Tensor upsample_add(const at::Tensor& o, const at::Tensor& cache, const at::Tensor& tap_ids,
                        const at::Tensor& tap_weights);

}  // namespace varscope::kernels::cuda
