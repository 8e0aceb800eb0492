#include "kernels/cuda_path.h"

#include <utility>

#include "kernels/attention_dispatch.h"
#ifdef VARSCOPE_KERNELS_CUDA
#include "kernels/cuda/token_ops_cuda.h"  // device_has_kernel_image
#endif

namespace varscope::kernels {

std::string cuda_path_blocker(
    const KernelPolicy& policy,
    std::initializer_list<std::reference_wrapper<const at::Tensor>> inputs) {
    if (!cuda_kernels_built()) return "this build has no CUDA kernels";
    if (policy.reference) return "the reference kernels are forced";
    for (const at::Tensor& t : inputs)
        if (!t.is_cuda()) return "the inputs are not on a CUDA device";
#ifdef VARSCOPE_KERNELS_CUDA
    std::string why;
    for (const at::Tensor& t : inputs)
        if (!cuda::device_has_kernel_image(t.get_device(), &why)) return why;
#endif
    return {};
}

bool unsupported(std::string* why_not, std::string why) {
    if (why_not) *why_not = std::move(why);
    return false;
}

bool per_channel_of(const at::Tensor& x, const at::Tensor& t) {
    return x.dim() == 3 && t.dim() == 3 && t.size(1) == 1 && t.size(2) == x.size(2) &&
           (t.size(0) == 1 || t.size(0) == x.size(0));
}

}  // namespace varscope::kernels
