// LibTorch-facing wrapper of the scale-similarity kernel (only built with CUDA). The dispatch
// (kernels/scale_similarity.cpp) validates the inputs and decides when it runs.
#pragma once

#include <string>

#include "kernels/scale_similarity.h"

namespace varscope::kernels::cuda {

// Whether the plan fits the device's shared memory (two rows of the previous map per block).
bool scale_similarity_fits(const at::Tensor& k_prev, int64_t pn_prev, const at::Tensor& k_cur,
                           int64_t pn_cur, bool normalize, std::string* why_not);

// D = sum (k_cur - up(k_prev))^2 as a 0-dim float64 tensor on the keys' device. The previous
// keys come in one or more pieces along the tokens, in order; two pieces with the same strides
// (a ring buffer that wrapped) are read where they lie, more or unlike ones are joined first.
at::Tensor scale_sq_distance(at::TensorList k_prev, int64_t pn_prev, const at::Tensor& k_cur,
                             int64_t pn_cur, bool normalize);

}  // namespace varscope::kernels::cuda
