#include "kernels/qk_norm.h"

#include <ATen/ATen.h>

#include "kernels/cuda_path.h"

#ifdef VARSCOPE_KERNELS_CUDA
#include "kernels/cuda/qk_norm_cuda.h"
#endif

namespace varscope::kernels {
namespace {

bool rows_of(const at::Tensor& t, const at::Tensor& q) {  // (B, H, L, x) beside q
    return t.dim() == 4 && t.size(0) == q.size(0) && t.size(1) == q.size(1) &&
           t.size(2) == q.size(2);
}

void check_shapes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& norm_q,
                  const at::Tensor& norm_k, const at::Tensor& mul) {
    TORCH_CHECK(q.defined() && k.defined() && norm_q.defined() && norm_k.defined() && mul.defined(),
                "fused q/k norm: q, k, norm_q, norm_k and mul must be defined");
    TORCH_CHECK(q.dim() == 4, "fused q/k norm: q must be (B, H, L, c), got ", q.sizes());
    TORCH_CHECK(k.sizes() == q.sizes(), "fused q/k norm: k ", k.sizes(), " must have q's shape ",
                q.sizes());
    for (const auto* t : {&norm_q, &norm_k}) {
        const char* name = t == &norm_q ? "norm_q" : "norm_k";
        TORCH_CHECK(rows_of(*t, q) && t->size(3) == 1, "fused q/k norm: ", name,
                    " must be (B, H, L, 1) for q ", q.sizes(), ", got ", t->sizes());
    }
    TORCH_CHECK(mul.dim() == 4 && mul.size(0) == 1 && mul.size(2) == 1 && mul.size(3) == 1 &&
                    (mul.size(1) == 1 || mul.size(1) == q.size(1)),
                "fused q/k norm: mul must be (1, H or 1, 1, 1), got ", mul.sizes());
}

// Why `slots` cannot take k's keys and values, or "" where they can.
std::string slots_blocker(const at::Tensor& k, const QkCacheSlots& s) {
    for (const auto* t : {&s.k_out, &s.v, &s.v_out}) {
        if (!t->defined()) return "an undefined cache slot tensor";
        if (t->scalar_type() != at::kBFloat16 || t->sizes() != k.sizes() || t->stride(3) != 1 ||
            t->device() != k.device())
            return "the cache slots must be bfloat16 of k's shape with contiguous channels on k's "
                   "device";
        if (t->requires_grad()) return "the fused q/k norm has no backward";
    }
    return "";
}

}  // namespace

bool fused_qk_norm_supported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& norm_q,
                             const at::Tensor& norm_k, const at::Tensor& mul,
                             const KernelPolicy& policy, std::string* why_not,
                             const QkCacheSlots* slots) {
    if (!q.defined() || !k.defined() || !norm_q.defined() || !norm_k.defined() || !mul.defined())
        return unsupported(why_not, "an undefined tensor");
    if (!policy.fused_elementwise)
        return unsupported(why_not, "the fused element-wise kernels are switched off");
    if (auto why = cuda_path_blocker(policy, {q, k, norm_q, norm_k, mul}); !why.empty())
        return unsupported(why_not, std::move(why));
    if (q.scalar_type() != at::kBFloat16 || k.scalar_type() != at::kBFloat16 ||
        norm_q.scalar_type() != at::kFloat || norm_k.scalar_type() != at::kFloat ||
        mul.scalar_type() != at::kFloat)
        return unsupported(why_not,
                           "the fused q/k norm takes bfloat16 q, k and float32 norms and mul only");
    if (q.dim() != 4 || k.sizes() != q.sizes() || !rows_of(norm_q, q) || !rows_of(norm_k, q) ||
        norm_q.size(3) != 1 || norm_k.size(3) != 1 || mul.dim() != 4 || mul.size(0) != 1 ||
        mul.size(2) != 1 || mul.size(3) != 1 || (mul.size(1) != 1 && mul.size(1) != q.size(1)))
        return unsupported(why_not,
                           "the fused q/k norm takes q, k (B, H, L, c), norms (B, H, L, 1) and "
                           "mul (1, H, 1, 1) only");
    if (q.stride(3) != 1 || k.stride(3) != 1)
        return unsupported(why_not, "the fused q/k norm reads q and k with contiguous channels");
    if (q.requires_grad() || k.requires_grad() || norm_q.requires_grad() ||
        norm_k.requires_grad() || mul.requires_grad())
        return unsupported(why_not, "the fused q/k norm has no backward");
    if (slots)
        if (auto why = slots_blocker(k, *slots); !why.empty())
            return unsupported(why_not, std::move(why));
    return true;
}

std::pair<at::Tensor, at::Tensor> fused_qk_norm_bf16(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& norm_q, const at::Tensor& norm_k,
    const at::Tensor& mul, const KernelPolicy& policy, const QkCacheSlots* slots) {
    check_shapes(q, k, norm_q, norm_k, mul);
    std::string why;
    TORCH_CHECK(fused_qk_norm_supported(q, k, norm_q, norm_k, mul, policy, &why, slots),
                "fused q/k norm requested but ", why);
#ifdef VARSCOPE_KERNELS_CUDA
    if (slots)
        return cuda::qk_norm_bf16(q, k, norm_q, norm_k, mul, slots->k_out, slots->v, slots->v_out);
    return cuda::qk_norm_bf16(q, k, norm_q, norm_k, mul);
#else
    TORCH_CHECK(false, "fused q/k norm: built without CUDA kernels");
    return {};
#endif
}

}  // namespace varscope::kernels
