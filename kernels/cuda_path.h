#pragma once
// The checks every CUDA dispatcher in kernels/ starts with, in one place.
#include <ATen/core/Tensor.h>

#include <functional>
#include <initializer_list>
#include <string>

#include "kernels/exec_policy.h"

namespace varscope::kernels {

// Empty when the CUDA kernels may run on `inputs` as far as the build, the policy and the device
// go: kernels built, the reference not forced (KernelPolicy::reference), every input on a CUDA
// device, a kernel image for that device's architecture. Otherwise the reason. Each dispatcher
// adds its own dtype and shape checks.
std::string cuda_path_blocker(
    const KernelPolicy& policy,
    std::initializer_list<std::reference_wrapper<const at::Tensor>> inputs);

// Stores `why` in *why_not (when given) and returns false: the exit of the `*_supported` checks.
bool unsupported(std::string* why_not, std::string why);

// t is a per-channel vector that broadcasts over x's tokens: x (B, L, C), t (B or 1, 1, C) (the
// AdaLN modulations and gates of the element-wise kernels).
bool per_channel_of(const at::Tensor& x, const at::Tensor& t);

}  // namespace varscope::kernels
