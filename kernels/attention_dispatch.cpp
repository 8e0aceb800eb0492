#include "kernels/attention_dispatch.h"

#include "kernels/attention_reference.h"
#include "kernels/cuda_path.h"
#ifdef VARSCOPE_KERNELS_CUDA
#include "kernels/cuda/attention_cuda.h"
#include "kernels/cuda/attention_params.h"  // sm90_schedule_for
#endif

#include <cmath>
#include <utility>

namespace varscope::kernels {
namespace {

void check_qkv(const at::Tensor& q, const at::Tensor& k, const at::Tensor* v) {
    TORCH_CHECK(q.dim() == 4 && k.dim() == 4, "attention expects (B, H, L, D) tensors, got q ",
                q.sizes(), " and k ", k.sizes());
    TORCH_CHECK(k.size(0) == q.size(0) && k.size(1) == q.size(1) && k.size(3) == q.size(3), "k ",
                k.sizes(), " does not match q ", q.sizes());
    TORCH_CHECK(k.device() == q.device() && k.scalar_type() == q.scalar_type(),
                "q and k must share device and dtype");
    if (v != nullptr) {
        TORCH_CHECK(v->sizes() == k.sizes() && v->device() == q.device() &&
                        v->scalar_type() == q.scalar_type(),
                    "v ", v->sizes(), " must match k ", k.sizes(), " in shape, device and dtype");
    }
}

// Only the CUDA paths take it; builds without nvcc have none.
[[maybe_unused]] double scale_or_default(const at::Tensor& q, std::optional<double> scale) {
    return scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
}

// Reference or CUDA for these inputs; throws when the CUDA path was demanded but cannot run.
bool use_cuda(const at::Tensor& q, int64_t block_q, int64_t block_k, KernelPath path,
              const KernelPolicy& policy) {
    if (path == KernelPath::Reference) return false;
    std::string why;
    const bool ok = cuda_attention_supported(q, block_q, block_k, policy, &why);
    TORCH_CHECK(ok || path != KernelPath::Cuda, "CUDA attention kernel requested but ", why);
    return ok;
}

void copy_into_out(AttentionResult& r, const at::Tensor& out) {
    if (!out.defined()) return;
    out.copy_(r.out);
    r.out = out;
}

}  // namespace

bool cuda_kernels_built() {
#ifdef VARSCOPE_KERNELS_CUDA
    return true;
#else
    return false;
#endif
}

int sm90_ws_fallback_count() {
#ifdef VARSCOPE_KERNELS_CUDA
    return cuda::sm90_ws_fallback_count();
#else
    return 0;
#endif
}

int sm90_schedule(int head_dim, bool gathered) {
#ifdef VARSCOPE_KERNELS_CUDA
    return cuda::sm90_schedule_for(head_dim, gathered);
#else
    (void)head_dim;
    (void)gathered;
    return -1;
#endif
}

bool cuda_attention_supported(const at::Tensor& q, int64_t block_q, int64_t block_k,
                              const KernelPolicy& policy, std::string* why_not) {
    if (auto why = cuda_path_blocker(policy, {q}); !why.empty())
        return unsupported(why_not, std::move(why));
    if (q.scalar_type() != at::kBFloat16 && q.scalar_type() != at::kHalf)
        return unsupported(why_not, "the kernels take bfloat16 or float16 only");
    if (q.dim() != 4 || (q.size(3) != 64 && q.size(3) != 128))
        return unsupported(why_not, "the kernels take head dim 64 or 128 only");
    if (block_q % 64 != 0 || block_k % 64 != 0)
        return unsupported(why_not, "the kernels need block sizes that are multiples of 64");
    if (q.size(2) > INT32_MAX / 2)
        return unsupported(why_not, "sequence too long for 32-bit indexing");
    return true;
}

AttentionResult block_sparse_attention(const at::Tensor& q, const at::Tensor& k,
                                       const at::Tensor& v, const at::Tensor& block_indices,
                                       const at::Tensor& block_counts, int64_t block_q,
                                       int64_t block_k, const AttentionOptions& options) {
    check_qkv(q, k, &v);
    TORCH_CHECK(block_q > 0 && block_k > 0, "block sizes must be positive");
#ifdef VARSCOPE_KERNELS_CUDA
    if (use_cuda(q, block_q, block_k, options.path, options.policy)) {
        return cuda::block_sparse_attention(q, k, v, block_indices, block_counts, block_q, block_k,
                                            scale_or_default(q, options.scale), options.return_lse,
                                            options.out, options.policy.sm90_attention);
    }
#else
    use_cuda(q, block_q, block_k, options.path, options.policy);
#endif
    auto r = reference::block_sparse_attention(q, k, v, block_indices, block_counts, block_q,
                                               block_k, options.scale, options.return_lse);
    copy_into_out(r, options.out);
    return r;
}

AttentionResult gathered_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const at::Tensor& key_indices, const at::Tensor& key_counts,
                                   int64_t block_q, const AttentionOptions& options) {
    check_qkv(q, k, &v);
    TORCH_CHECK(block_q > 0, "block_q must be positive");
#ifdef VARSCOPE_KERNELS_CUDA
    if (use_cuda(q, block_q, 64, options.path, options.policy)) {
        return cuda::gathered_attention(q, k, v, key_indices, key_counts, block_q,
                                        scale_or_default(q, options.scale), options.return_lse,
                                        options.out, options.policy.sm90_attention);
    }
#else
    use_cuda(q, block_q, 64, options.path, options.policy);
#endif
    auto r = reference::gathered_attention(q, k, v, key_indices, key_counts, block_q, options.scale,
                                           options.return_lse);
    copy_into_out(r, options.out);
    return r;
}

at::Tensor block_column_sum(const at::Tensor& q, const at::Tensor& k, int64_t block_q,
                            std::optional<double> scale, KernelPath path,
                            const KernelPolicy& policy, const at::Tensor& lse) {
    check_qkv(q, k, nullptr);
    TORCH_CHECK(block_q > 0, "block_q must be positive");
    if (lse.defined()) {
        TORCH_CHECK(lse.dim() == 3 && lse.size(0) == q.size(0) && lse.size(1) == q.size(1) &&
                        lse.size(2) == q.size(2),
                    "block_column_sum: lse must be (B, H, Lq) = (", q.size(0), ", ", q.size(1),
                    ", ", q.size(2), "), got ", lse.sizes());
        TORCH_CHECK(lse.device() == q.device() && at::isFloatingType(lse.scalar_type()),
                    "block_column_sum: lse must be a floating tensor on ", q.device());
    }
#ifdef VARSCOPE_KERNELS_CUDA
    if (use_cuda(q, block_q, 64, path, policy)) {
        return cuda::block_column_sum(q, k, block_q, scale_or_default(q, scale), lse);
    }
#else
    use_cuda(q, block_q, 64, path, policy);
#endif
    return reference::block_column_sum(q, k, block_q, scale, lse);
}

}  // namespace varscope::kernels
