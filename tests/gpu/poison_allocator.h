// Fills the CUDA caching allocator's free blocks with NaN, so that a kernel output the kernel
// never wrote shows in a bitwise comparison instead of holding an earlier tensor's values.
#pragma once

#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <limits>
#include <vector>

namespace varscope::testing {

// `copies` NaN tensors of `elements` values of `dtype`, freed again at once (their blocks stay
// cached for the next allocations).
inline void poison_cuda_allocator(int64_t elements, int copies = 4,
                                  at::ScalarType dtype = at::kFloat) {
    std::vector<at::Tensor> held;
    for (int i = 0; i < copies; ++i)
        held.push_back(at::full({elements}, std::numeric_limits<float>::quiet_NaN(),
                                at::TensorOptions(at::kCUDA).dtype(dtype)));
    torch::cuda::synchronize();
}

}  // namespace varscope::testing
