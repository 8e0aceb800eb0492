#include "kernels/gated_residual.h"

#include <ATen/ATen.h>

#include "kernels/cuda_path.h"

#ifdef VARSCOPE_KERNELS_CUDA
#include "kernels/cuda/gated_residual_cuda.h"
#endif

namespace varscope::kernels {
namespace {

void check_shapes(const at::Tensor& x, const at::Tensor& y, const at::Tensor& gamma) {
    TORCH_CHECK(x.defined() && y.defined() && gamma.defined(),
                "fused gated residual: x, y and gamma must be defined");
    TORCH_CHECK(x.dim() == 3, "fused gated residual: x must be (B, L, C), got ", x.sizes());
    TORCH_CHECK(y.sizes() == x.sizes(), "fused gated residual: y ", y.sizes(),
                " must have x's shape ", x.sizes());
    TORCH_CHECK(per_channel_of(x, gamma),
                "fused gated residual: gamma must be (B or 1, 1, C) for x ", x.sizes(), ", got ",
                gamma.sizes());
}

}  // namespace

bool fused_gated_residual_supported(const at::Tensor& x, const at::Tensor& y,
                                    const at::Tensor& gamma, const KernelPolicy& policy,
                                    std::string* why_not) {
    if (!x.defined() || !y.defined() || !gamma.defined())
        return unsupported(why_not, "an undefined tensor");
    if (!policy.fused_elementwise)
        return unsupported(why_not, "the fused element-wise kernels are switched off");
    if (auto why = cuda_path_blocker(policy, {x, y, gamma}); !why.empty())
        return unsupported(why_not, std::move(why));
    if (x.scalar_type() != at::kFloat || y.scalar_type() != at::kBFloat16 ||
        (gamma.scalar_type() != at::kFloat && gamma.scalar_type() != at::kBFloat16))
        return unsupported(why_not,
                           "the fused gated residual takes float32 x, bfloat16 y and a float32 "
                           "or bfloat16 gamma only");
    if (y.sizes() != x.sizes() || !per_channel_of(x, gamma))
        return unsupported(why_not,
                           "the fused gated residual takes x and y (B, L, C) and gamma "
                           "(B or 1, 1, C) only");
    if (x.requires_grad() || y.requires_grad() || gamma.requires_grad())
        return unsupported(why_not, "the fused gated residual has no backward");
    return true;
}

at::Tensor fused_gated_residual(const at::Tensor& x, const at::Tensor& y, const at::Tensor& gamma,
                                bool round_product, const KernelPolicy& policy) {
    check_shapes(x, y, gamma);
    std::string why;
    TORCH_CHECK(fused_gated_residual_supported(x, y, gamma, policy, &why),
                "fused gated residual requested but ", why);
#ifdef VARSCOPE_KERNELS_CUDA
    const auto g = gamma.stride(-1) == 1 ? gamma : gamma.contiguous();
    return cuda::gated_residual(x.contiguous(), y.contiguous(), g, round_product);
#else
    TORCH_CHECK(false, "fused gated residual: built without CUDA kernels");
    return {};
#endif
}

}  // namespace varscope::kernels
