// LibTorch-facing wrappers of the CUDA token kernels (only built with CUDA). The dispatch
// (kernels/token_ops.cpp) validates the inputs and decides when these run.
#pragma once

#include "kernels/token_ops.h"

namespace varscope::kernels::cuda {

bool device_has_kernel_image(int device, std::string* why_not);  // attention_cuda.cpp

at::Tensor pivotal_scores(const at::Tensor& x);
at::Tensor top_rows(const at::Tensor& scores, int64_t keep);  // float32 (R, N), 1 <= keep <= N
at::Tensor update_index(const at::Tensor& f_prev, const at::Tensor& f_next);

}  // namespace varscope::kernels::cuda
