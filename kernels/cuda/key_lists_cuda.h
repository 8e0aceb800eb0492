// LibTorch-facing wrapper of the key-list kernel (only built with CUDA). The dispatch
// (kernels/key_lists.cpp) validates the inputs and decides when it runs.
#pragma once

#include <ATen/core/Tensor.h>

#include "kernels/key_lists.h"

namespace varscope::kernels::cuda {

GatheredKeyLists key_lists(const at::Tensor& source, const at::Tensor& source_counts,
                           const at::Tensor& blocks, const at::Tensor& point_map,
                           const KeyListsSpec& spec, const at::Tensor& pairs, double pair_scale);

}  // namespace varscope::kernels::cuda
