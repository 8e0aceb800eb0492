#include "kernels/token_ops.h"

#include <utility>

#include "kernels/cuda_path.h"

#ifdef VARSCOPE_KERNELS_CUDA
#include "kernels/cuda/token_ops_cuda.h"
#endif

namespace varscope::kernels {
namespace {

void check_pivotal(const at::Tensor& x) {
    TORCH_CHECK(x.dim() == 3, "pivotal scores expect (R, N, C) tokens, got ", x.sizes());
}

void check_update(const at::Tensor& a, const at::Tensor& b) {
    TORCH_CHECK(a.dim() >= 2 && a.sizes() == b.sizes(),
                "update index expects two (B, C, ...) maps of one shape, got ", a.sizes(), " and ",
                b.sizes());
    TORCH_CHECK(a.device() == b.device(), "update index: both maps must be on one device");
}

bool use_cuda(const at::Tensor& x, KernelPath path, const KernelPolicy& policy) {
    if (path == KernelPath::Reference) return false;
    std::string why;
    const bool ok = cuda_token_ops_supported(x, policy, &why);
    TORCH_CHECK(ok || path != KernelPath::Cuda, "CUDA token kernel requested but ", why);
    return ok;
}

void check_top(const at::Tensor& scores, int64_t keep) {
    TORCH_CHECK(scores.dim() == 2, "top rows expect (R, N) scores, got ", scores.sizes());
    TORCH_CHECK(keep >= 1 && keep <= scores.size(1), "keep must be in [1, ", scores.size(1),
                "], got ", keep);
}

}  // namespace

namespace reference {

at::Tensor pivotal_scores(const at::Tensor& x) {
    check_pivotal(x);
    const auto xf = x.to(at::kFloat);
    return (xf - xf.mean(1, /*keepdim=*/true)).pow(2).sum(-1);
}

at::Tensor top_rows(const at::Tensor& scores, int64_t keep) {
    check_top(scores, keep);
    // A stable descending sort: the lower ids first among equal scores, NaN first.
    const auto order = std::get<1>(at::sort(scores, /*stable=*/true, 1, /*descending=*/true));
    return std::get<0>(at::sort(order.narrow(1, 0, keep), 1));
}

PivotalSelection pivotal_token_selection(const at::Tensor& x, int64_t keep) {
    PivotalSelection s;
    s.scores = pivotal_scores(x);
    s.kept = top_rows(s.scores, keep);
    return s;
}

at::Tensor update_index(const at::Tensor& f_prev, const at::Tensor& f_next) {
    check_update(f_prev, f_next);
    const auto a = f_prev.to(at::kFloat), b = f_next.to(at::kFloat);
    const auto dot = (a * b).sum(1);
    const auto norms = a.norm(2, {1}) * b.norm(2, {1});
    return 1.0 - dot / norms.clamp_min(1e-12);
}

}  // namespace reference

bool cuda_token_ops_supported(const at::Tensor& x, const KernelPolicy& policy,
                              std::string* why_not) {
    if (auto why = cuda_path_blocker(policy, {x}); !why.empty())
        return unsupported(why_not, std::move(why));
    const auto t = x.scalar_type();
    if (t != at::kFloat && t != at::kHalf && t != at::kBFloat16)
        return unsupported(why_not, "the token kernels take float32, float16 or bfloat16 only");
    if (x.numel() > INT32_MAX) return unsupported(why_not, "too many elements for 32-bit indexing");
    return true;
}

at::Tensor pivotal_scores(const at::Tensor& x, KernelPath path, const KernelPolicy& policy) {
    check_pivotal(x);
#ifdef VARSCOPE_KERNELS_CUDA
    if (use_cuda(x, path, policy)) return cuda::pivotal_scores(x);
#else
    use_cuda(x, path, policy);
#endif
    return reference::pivotal_scores(x);
}

at::Tensor top_rows(const at::Tensor& scores, int64_t keep, KernelPath path,
                    const KernelPolicy& policy) {
    check_top(scores, keep);
#ifdef VARSCOPE_KERNELS_CUDA
    if (use_cuda(scores, path, policy)) return cuda::top_rows(scores.to(at::kFloat), keep);
#else
    use_cuda(scores, path, policy);
#endif
    return reference::top_rows(scores, keep);
}

PivotalSelection pivotal_token_selection(const at::Tensor& x, int64_t keep, KernelPath path,
                                         const KernelPolicy& policy) {
    PivotalSelection s;
    s.scores = pivotal_scores(x, path, policy);
    s.kept = top_rows(s.scores, keep, path, policy);
    return s;
}

at::Tensor update_index(const at::Tensor& f_prev, const at::Tensor& f_next, KernelPath path,
                        const KernelPolicy& policy) {
    check_update(f_prev, f_next);
    TORCH_CHECK(f_prev.scalar_type() == f_next.scalar_type(),
                "update index: both maps must share a dtype");
#ifdef VARSCOPE_KERNELS_CUDA
    if (use_cuda(f_prev, path, policy)) return cuda::update_index(f_prev, f_next);
#else
    use_cuda(f_prev, path, policy);
#endif
    return reference::update_index(f_prev, f_next);
}

}  // namespace varscope::kernels
