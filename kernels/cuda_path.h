#pragma once
// The checks every CUDA dispatcher in kernels/ starts with, in one place.
#include <ATen/core/Tensor.h>

#include <functional>
#include <initializer_list>
#include <string>

namespace varscope::kernels {

// Empty when the CUDA kernels may run on `inputs` as far as the build, the debugging switch and
// the device go: kernels built, the reference not forced (force_reference_kernels /
// VARSCOPE_REFERENCE_KERNELS), every input on a CUDA device, a kernel image for that device's
// architecture. Otherwise the reason. Each dispatcher adds its own dtype and shape checks.
std::string cuda_path_blocker(
    std::initializer_list<std::reference_wrapper<const at::Tensor>> inputs);

// Stores `why` in *why_not (when given) and returns false: the exit of the `*_supported` checks.
bool unsupported(std::string* why_not, std::string why);

}  // namespace varscope::kernels
