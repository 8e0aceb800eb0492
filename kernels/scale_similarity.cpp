#include "kernels/scale_similarity.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "kernels/cuda_path.h"

#ifdef VARSCOPE_KERNELS_CUDA
#include "kernels/cuda/scale_similarity_cuda.h"
#endif

namespace varscope::kernels {
namespace {

// The previous keys in pieces along the tokens (one piece: a whole map).
void check_keys(at::TensorList k_prev, int64_t pn_prev, const at::Tensor& k_cur, int64_t pn_cur) {
    TORCH_CHECK(!k_prev.empty(), "scale similarity: no previous keys");
    const at::Tensor& p0 = k_prev[0];
    int64_t tokens = 0;
    for (const auto& p : k_prev) {
        TORCH_CHECK(p.dim() == 4 && k_cur.dim() == 4,
                    "scale similarity expects (R, H, tokens, c) keys, got ", p.sizes(), " and ",
                    k_cur.sizes());
        TORCH_CHECK(p.size(0) == p0.size(0) && p.size(1) == p0.size(1) && p.size(3) == p0.size(3) &&
                        p.scalar_type() == p0.scalar_type() && p.device() == p0.device(),
                    "scale similarity: the pieces of the previous keys do not join: ", p.sizes(),
                    " after ", p0.sizes());
        tokens += p.size(2);
    }
    TORCH_CHECK(pn_prev >= 1 && pn_cur >= 1, "scale similarity: map sides must be positive");
    TORCH_CHECK(tokens == pn_prev * pn_prev && k_cur.size(2) == pn_cur * pn_cur &&
                    p0.size(0) == k_cur.size(0) && p0.size(1) == k_cur.size(1) &&
                    p0.size(3) == k_cur.size(3),
                "ams_kv::similarity: key maps do not match their scales");
    TORCH_CHECK(p0.device() == k_cur.device(), "scale similarity: keys on two devices");
}

// W and W^T W in float on `device`, built once per thread and scale pair (a handful of tiny
// kernels and a transfer otherwise, per layer and step).
const std::pair<at::Tensor, at::Tensor>& weights_for(int64_t pn_prev, int64_t pn_cur,
                                                     const at::Device& device) {
    thread_local std::map<std::tuple<int64_t, int64_t, std::string>,
                          std::pair<at::Tensor, at::Tensor>>
        cache;
    auto& entry = cache[{pn_prev, pn_cur, device.str()}];
    if (!entry.first.defined()) {
        const auto w = bilinear_upsample_weights(pn_prev, pn_cur, at::TensorOptions(device));
        entry = {w, w.t().mm(w)};
    }
    return entry;
}

}  // namespace

at::Tensor bilinear_upsample_weights(int64_t pn_prev, int64_t pn_cur,
                                     const at::TensorOptions& options) {
    // 1-D weights (pn_cur, pn_prev): torch's own linear interpolation of the identity, so they
    // are exactly torch's (align_corners false); the 2-D map is their Kronecker product.
    const auto eye = at::eye(pn_prev, options.dtype(at::kFloat)).unsqueeze(0);
    const auto w1 = at::upsample_linear1d(eye, {pn_cur}, /*align_corners=*/false)[0].t();
    return at::kron(w1, w1).to(options.dtype());
}

namespace reference {

double scale_sq_distance(const at::Tensor& k_prev, int64_t pn_prev, const at::Tensor& k_cur,
                         int64_t pn_cur, bool normalize) {
    check_keys(k_prev, pn_prev, k_cur, pn_cur);
    const int64_t R = k_cur.size(0), H = k_cur.size(1), c = k_cur.size(3);
    const int64_t tp = pn_prev * pn_prev, tc = pn_cur * pn_cur;
    // Unit keys are compared in float; keys that are unit already in the model's precision.
    const auto dtype = normalize ? at::kFloat : k_cur.scalar_type();
    // (R, H, t, c) -> (R, t, H*c): a view for the model's freshly projected keys and for the
    // compact cache's token-major buffers, so the upsampling is one batched GEMM per scale pair.
    auto rows = [&](const at::Tensor& k, int64_t t) {
        auto x = k.to(dtype).permute({0, 2, 1, 3});
        if (normalize) x = x / x.norm(2, {-1}, true).clamp_min(1e-12);
        return x.reshape({R, t, H * c});
    };
    const auto prev = rows(k_prev, tp), cur = rows(k_cur, tc);
    // sum_r ||cur_r - W prev_r||^2 = sum ||cur||^2 - 2 <W, sum_r cur_r prev_r^T>
    //                                + <W^T W, sum_r prev_r prev_r^T>:
    // two GEMMs with small outputs read each key once, instead of writing and re-reading the
    // upsampled map (the Gram matrices hold sums of H per-head cosines: no overflow in fp16).
    // Their rows are padded to a multiple of 8 elements: cuBLAS's tensor-core kernels need
    // aligned leading dimensions (169 or 100 tokens are not; measured ~10x slower).
    // Measured in isolation on an H100 (batch 128, 256 rows, fp16; ams_kv_v2.md): 0.30 / 0.48 /
    // 1.51 ms for the 8->10 / 10->13 / 13->16 checks; at 13->16 cuBLAS picks an sm75 CUTLASS
    // kernel (s1688gemm, ~57 TFLOP/s) for both GEMMs: 1.23 of the 1.51 ms. The fused kernel
    // (kernels/cuda/scale_similarity.cu) replaces this on CUDA.
    auto gram_sum = [&](const at::Tensor& a, const at::Tensor& b) {  // sum_r a_r b_r^T, float
        const int64_t m = a.size(1), n = b.size(1), ld = (n + 7) / 8 * 8;
        auto out = at::empty({R, m, ld}, a.options()).narrow(2, 0, n);
        at::bmm_out(out, a, b.transpose(1, 2));
        return out.sum(0, false, at::kFloat);
    };
    // A copy of the cached pair (two tensor handles): no reference into the cache.
    const auto [w, wtw] = weights_for(pn_prev, pn_cur, prev.device());  // (tc, tp), (tp, tp)
    const auto cross = gram_sum(cur, prev), gram = gram_sum(prev, prev);
    const auto cur_sq = at::linalg_vector_norm(cur, 2, c10::nullopt, false, at::kFloat).square();
    // One transfer (one device sync) for the three sums; combined in double on the host.
    const auto parts = at::stack({cur_sq, at::dot(w.flatten(), cross.flatten()),
                                  at::dot(wtw.flatten(), gram.flatten())})
                           .to(at::kCPU, at::kDouble);
    const auto* p = parts.data_ptr<double>();
    return std::max(p[0] - 2 * p[1] + p[2], 0.0);
}

}  // namespace reference

bool cuda_scale_similarity_supported(const at::Tensor& k_prev, int64_t pn_prev,
                                     const at::Tensor& k_cur, int64_t pn_cur, bool normalize,
                                     const KernelPolicy& policy, std::string* why_not) {
    if (auto why = cuda_path_blocker(policy, {k_prev, k_cur}); !why.empty())
        return unsupported(why_not, std::move(why));
    const auto t = k_cur.scalar_type();
    if (t != at::kFloat && t != at::kHalf && t != at::kBFloat16)
        return unsupported(why_not,
                           "the similarity kernel takes float32, float16 or bfloat16 only");
    if (k_prev.scalar_type() != t) return unsupported(why_not, "the two key maps differ in dtype");
    if (k_cur.size(0) * k_cur.size(1) * (pn_cur + 1) > INT32_MAX)
        return unsupported(why_not, "too many blocks for one launch");
#ifdef VARSCOPE_KERNELS_CUDA
    std::string why;
    if (!cuda::scale_similarity_fits(k_prev, pn_prev, k_cur, pn_cur, normalize, &why))
        return unsupported(why_not, why);
    return true;
#else
    return unsupported(why_not, "this build has no CUDA kernels");
#endif
}

double scale_sq_distance(const at::Tensor& k_prev, int64_t pn_prev, const at::Tensor& k_cur,
                         int64_t pn_cur, bool normalize, KernelPath path,
                         const KernelPolicy& policy) {
    return scale_sq_distance(at::TensorList(k_prev), pn_prev, k_cur, pn_cur, normalize, path,
                             policy);
}

double scale_sq_distance(at::TensorList k_prev, int64_t pn_prev, const at::Tensor& k_cur,
                         int64_t pn_cur, bool normalize, KernelPath path,
                         const KernelPolicy& policy) {
    check_keys(k_prev, pn_prev, k_cur, pn_cur);
    if (path != KernelPath::Reference) {
        std::string why;
        const bool ok = cuda_scale_similarity_supported(k_prev[0], pn_prev, k_cur, pn_cur,
                                                        normalize, policy, &why);
        TORCH_CHECK(ok || path != KernelPath::Cuda, "CUDA similarity kernel requested but ", why);
#ifdef VARSCOPE_KERNELS_CUDA
        if (ok)
            return cuda::scale_sq_distance(k_prev, pn_prev, k_cur, pn_cur, normalize)
                .item<double>();
#endif
    }
    const at::Tensor joined = k_prev.size() == 1 ? k_prev[0] : at::cat(k_prev, 2);
    return reference::scale_sq_distance(joined, pn_prev, k_cur, pn_cur, normalize);
}

}  // namespace varscope::kernels
