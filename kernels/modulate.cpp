#include "kernels/modulate.h"

#include <ATen/ATen.h>

#include <cstdint>

#include "kernels/alignment.h"
#include "kernels/cuda_path.h"

#ifdef VARSCOPE_KERNELS_CUDA
#include "kernels/cuda/modulate_cuda.h"
#endif

namespace varscope::kernels {
namespace {

void check_shapes(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& shift) {
    TORCH_CHECK(x.defined() && scale.defined() && shift.defined(),
                "fused modulation: x, scale and shift must be defined");
    TORCH_CHECK(x.dim() == 3, "fused modulation: x must be (B, L, C), got ", x.sizes());
    for (const auto* t : {&scale, &shift}) {
        const char* name = t == &scale ? "scale" : "shift";
        TORCH_CHECK(per_channel_of(x, *t), "fused modulation: ", name,
                    " must be (B or 1, 1, C) for x ", x.sizes(), ", got ", t->sizes());
    }
}

}  // namespace

bool fused_modulate_supported(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& shift,
                              const KernelPolicy& policy, std::string* why_not) {
    if (!x.defined() || !scale.defined() || !shift.defined())
        return unsupported(why_not, "an undefined tensor");
    if (!policy.fused_elementwise)
        return unsupported(why_not, "the fused element-wise kernels are switched off");
    if (auto why = cuda_path_blocker(policy, {x, scale, shift}); !why.empty())
        return unsupported(why_not, std::move(why));
    if (x.scalar_type() != at::kFloat || scale.scalar_type() != at::kFloat ||
        shift.scalar_type() != at::kFloat)
        return unsupported(why_not, "the fused modulation takes float32 x, scale and shift only");
    if (!per_channel_of(x, scale) || !per_channel_of(x, shift))
        return unsupported(why_not,
                           "the fused modulation takes x (B, L, C) and scale, shift "
                           "(B or 1, 1, C) only");
    if (x.requires_grad() || scale.requires_grad() || shift.requires_grad())
        return unsupported(why_not, "the fused modulation has no backward");
    return true;
}

at::Tensor fused_modulate_bf16(const at::Tensor& x, const at::Tensor& scale,
                               const at::Tensor& shift, const KernelPolicy& policy) {
    check_shapes(x, scale, shift);
    std::string why;
    TORCH_CHECK(fused_modulate_supported(x, scale, shift, policy, &why),
                "fused modulation requested but ", why);
#ifdef VARSCOPE_KERNELS_CUDA
    // The kernel reads x densely and scale/shift rows with a contiguous last dimension.
    auto rows = [](const at::Tensor& t) { return t.stride(-1) == 1 ? t : t.contiguous(); };
    return cuda::modulate_bf16(x.contiguous(), rows(scale), rows(shift));
#else
    TORCH_CHECK(false, "fused modulation: built without CUDA kernels");
    return {};
#endif
}

namespace {

// scale / shift rows the kernel reads as float4: aligned, contiguous, batch stride of whole
// vectors.
bool vector_rows(const at::Tensor& t) {
    return aligned(t.data_ptr(), 16) && t.stride(2) == 1 &&
           (t.size(0) == 1 || t.stride(0) % 4 == 0);
}

}  // namespace

bool fused_norm_modulate_supported(const at::Tensor& x, const at::Tensor& scale,
                                   const at::Tensor& shift, const KernelPolicy& policy,
                                   std::string* why_not) {
    if (!fused_modulate_supported(x, scale, shift, policy, why_not)) return false;
    const int64_t C = x.size(2);
    if (!x.is_contiguous() || C % 4 != 0 || C > (int64_t{1} << 24) || !aligned(x.data_ptr(), 16))
        return unsupported(why_not,
                           "the fused LayerNorm takes a contiguous x of 16-byte aligned rows of a "
                           "multiple of 4 values (where ATen runs its vectorized LayerNorm)");
    if (!vector_rows(scale) || !vector_rows(shift))
        return unsupported(why_not,
                           "the fused LayerNorm reads scale and shift as 16-byte aligned rows");
    return true;
}

at::Tensor fused_norm_modulate_bf16(const at::Tensor& x, const at::Tensor& scale,
                                    const at::Tensor& shift, double eps,
                                    const KernelPolicy& policy) {
    check_shapes(x, scale, shift);
    std::string why;
    TORCH_CHECK(fused_norm_modulate_supported(x, scale, shift, policy, &why),
                "fused LayerNorm and modulation requested but ", why);
#ifdef VARSCOPE_KERNELS_CUDA
    return cuda::norm_modulate_bf16(x, scale, shift, eps);
#else
    (void)eps;
    TORCH_CHECK(false, "fused LayerNorm and modulation: built without CUDA kernels");
    return {};
#endif
}

}  // namespace varscope::kernels
