#include "core/models/block_elementwise.h"

#include <ATen/ATen.h>

#include "kernels/gated_residual.h"
#include "kernels/modulate.h"

namespace varscope {

namespace {

// The fused modulation kernels take an fp32 stream feeding bf16 weights (bf16-autocast); in any
// other mode the factors need no fp32 copies (the bf16 mode would cast them for nothing).
bool fusable(const at::Tensor& x, const torch::nn::Linear& consumer,
             const kernels::KernelPolicy* fuse) {
    return fuse && x.scalar_type() == at::kFloat && consumer->weight.scalar_type() == at::kBFloat16;
}

}  // namespace

at::Tensor modulated_input(const at::Tensor& normed, const at::Tensor& scale_plus_one,
                           const at::Tensor& shift, const torch::nn::Linear& consumer,
                           const kernels::KernelPolicy* fuse) {
    if (fusable(normed, consumer, fuse)) {
        // Exact: the factors are fp32 or bf16, and ATen's product promotes them to fp32 too.
        const auto s = scale_plus_one.to(at::kFloat), t = shift.to(at::kFloat);
        if (kernels::fused_modulate_supported(normed, s, t, *fuse))
            return kernels::fused_modulate_bf16(normed, s, t, *fuse);
    }
    return normed.mul(scale_plus_one).add_(shift);
}

at::Tensor modulated_norm_input(const at::Tensor& x, double eps, const at::Tensor& scale_plus_one,
                                const at::Tensor& shift, const torch::nn::Linear& consumer,
                                const kernels::KernelPolicy* fuse) {
    at::Tensor s = scale_plus_one, t = shift;
    if (fusable(x, consumer, fuse)) {
        // Cast once here, not again in modulated_input (the same values: see there).
        s = scale_plus_one.to(at::kFloat);
        t = shift.to(at::kFloat);
        if (kernels::fused_norm_modulate_supported(x, s, t, *fuse))
            return kernels::fused_norm_modulate_bf16(x, s, t, eps, *fuse);
    }
    return modulated_input(at::layer_norm(x, {x.size(-1)}, {}, {}, eps), s, t, consumer, fuse);
}

at::Tensor gated_residual(const at::Tensor& x, const at::Tensor& y, const at::Tensor& gamma,
                          GateProduct product, const kernels::KernelPolicy* fuse) {
    // The product is in y's dtype either when asked or when promotion keeps it there.
    const bool as_branch =
        product == GateProduct::AsBranch ||
        at::promote_types(y.scalar_type(), gamma.scalar_type()) == y.scalar_type();
    if (fuse && kernels::fused_gated_residual_supported(x, y, gamma, *fuse))
        return kernels::fused_gated_residual(x, y, gamma, /*round_product=*/as_branch, *fuse);
    const auto prod = y.mul(gamma);
    return x + (as_branch ? prod.to(y.scalar_type()) : prod);
}

}  // namespace varscope
