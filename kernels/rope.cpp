#include "kernels/rope.h"

#include <ATen/ATen.h>

#include <vector>

#include "kernels/cuda_path.h"

#ifdef VARSCOPE_KERNELS_CUDA
#include "kernels/cuda/rope_cuda.h"
#endif

namespace varscope::kernels {
namespace {

void check_shapes(const at::Tensor& x, const at::Tensor& rope, const char* name) {
    TORCH_CHECK(x.defined() && rope.defined(), "fused RoPE: ", name, " and rope must be defined");
    TORCH_CHECK(x.dim() == 4, "fused RoPE: ", name, " must be (B, H, L, c), got ", x.sizes());
    const int64_t B = x.size(0), L = x.size(2), c = x.size(3);
    TORCH_CHECK(c % 2 == 0, "fused RoPE: the head dim of ", name, " must be even, got ", c);
    TORCH_CHECK((rope.dim() == 3 || rope.dim() == 4) && rope.size(0) == 2,
                "fused RoPE: rope must be (2, L, c/2) or (2, B, L, c/2), got ", rope.sizes());
    TORCH_CHECK(rope.size(-2) == L && rope.size(-1) == c / 2, "fused RoPE: rope ", rope.sizes(),
                " does not fit ", name, " ", x.sizes(), " (L = ", L, ", c/2 = ", c / 2, ")");
    TORCH_CHECK(rope.dim() == 3 || rope.size(1) == B, "fused RoPE: per-row rope ", rope.sizes(),
                " does not fit the batch of ", name, " (", B, ")");
    TORCH_CHECK(x.device() == rope.device(), "fused RoPE: ", name, " is on ", x.device(),
                ", rope on ", rope.device());
}

#ifdef VARSCOPE_KERNELS_CUDA
// The kernel reads strided rows whose innermost dimension is contiguous.
at::Tensor rows_contiguous(const at::Tensor& t) {
    return t.size(-1) <= 1 || t.stride(-1) == 1 ? t : t.contiguous();
}
#endif

std::vector<at::Tensor> run(const std::vector<at::Tensor>& xs, const at::Tensor& rope,
                            at::ScalarType out_dtype, const KernelPolicy& policy) {
    std::string why;
    for (const auto& x : xs)
        TORCH_CHECK(fused_rope_supported(x, rope, out_dtype, policy, &why),
                    "fused RoPE requested but ", why);
#ifdef VARSCOPE_KERNELS_CUDA
    std::vector<at::Tensor> in;
    for (const auto& x : xs) in.push_back(rows_contiguous(x));
    return cuda::rope2d(in, rows_contiguous(rope), out_dtype);
#else
    TORCH_CHECK(false, "fused RoPE: built without CUDA kernels");
    return {};
#endif
}

}  // namespace

bool fused_rope_supported(const at::Tensor& x, const at::Tensor& rope, at::ScalarType out_dtype,
                          const KernelPolicy& policy, std::string* why_not) {
    if (!policy.fused_rope) return unsupported(why_not, "the fused RoPE is switched off");
    if (!x.defined() || !rope.defined()) return unsupported(why_not, "an undefined tensor");
    if (auto why = cuda_path_blocker(policy, {x, rope}); !why.empty())
        return unsupported(why_not, std::move(why));
    if (x.scalar_type() != at::kFloat || rope.scalar_type() != at::kFloat)
        return unsupported(why_not, "the fused RoPE takes float32 x and rope only");
    if (out_dtype != at::kFloat && out_dtype != at::kBFloat16)
        return unsupported(why_not, "the fused RoPE writes float32 or bfloat16 only");
    return true;
}

at::Tensor fused_rope2d(const at::Tensor& x, const at::Tensor& rope, at::ScalarType out_dtype,
                        const KernelPolicy& policy) {
    check_shapes(x, rope, "x");
    return run({x}, rope, out_dtype, policy)[0];
}

std::pair<at::Tensor, at::Tensor> fused_rope2d(const at::Tensor& q, const at::Tensor& k,
                                               const at::Tensor& rope, at::ScalarType out_dtype,
                                               const KernelPolicy& policy) {
    check_shapes(q, rope, "q");
    check_shapes(k, rope, "k");
    TORCH_CHECK(q.sizes() == k.sizes(), "fused RoPE: q ", q.sizes(), " and k ", k.sizes(),
                " differ in shape");
    auto out = run({q, k}, rope, out_dtype, policy);
    return {out[0], out[1]};
}

}  // namespace varscope::kernels
