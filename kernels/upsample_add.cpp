#include "kernels/upsample_add.h"

#include <ATen/ATen.h>

#include <climits>
#include <cmath>
#include <utility>

#include "kernels/cuda_path.h"

#ifdef VARSCOPE_KERNELS_CUDA
#include "kernels/cuda/upsample_add_cuda.h"
#endif

namespace varscope::kernels {
namespace {

// The side of a square grid of n cells, or -1.
int64_t side_of(int64_t n) {
    const auto s = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(n))));
    return s * s == n ? s : -1;
}

// `float_cache`: the residual must be float32 (upsample_add); else any dtype (the difference's
// halves, checked by their caller).
void check_inputs(const at::Tensor& o, const at::Tensor& cache, const at::Tensor& ids,
                  const at::Tensor& w, bool float_cache = true) {
    TORCH_CHECK(o.defined() && cache.defined() && ids.defined() && w.defined(),
                "upsample_add: every input must be defined");
    TORCH_CHECK(o.dim() == 4 && cache.dim() == 4 && o.size(0) == cache.size(0) &&
                    o.size(1) == cache.size(1) && o.size(3) == cache.size(3),
                "upsample_add: o (B, H, t*t, d) and cache (B, H, g*g, d) must agree, got ",
                o.sizes(), " and ", cache.sizes());
    TORCH_CHECK(!float_cache || cache.scalar_type() == at::kFloat,
                "upsample_add: the cache must be float32");
    const auto t = o.scalar_type();
    TORCH_CHECK(t == at::kFloat || t == at::kHalf || t == at::kBFloat16,
                "upsample_add: o must be float32, float16 or bfloat16");
    const int64_t side = side_of(o.size(2)), g = side_of(cache.size(2));
    TORCH_CHECK(side > 0 && g > 0, "upsample_add: ", o.size(2), " and ", cache.size(2),
                " rows are not square grids");
    TORCH_CHECK(ids.dim() == 2 && ids.size(0) == side && ids.size(1) == 2 &&
                    ids.scalar_type() == at::kLong && w.sizes() == ids.sizes() &&
                    w.scalar_type() == at::kFloat,
                "upsample_add: taps must be int64 and float32 (", side, ", 2), got ", ids.sizes(),
                " and ", w.sizes());
    TORCH_CHECK(
        ids.device() == o.device() && w.device() == o.device() && cache.device() == o.device(),
        "upsample_add: every input must be on ", o.device());
    // The ids' range is checked where reading them costs no device sync (a captured step).
    if (!ids.is_cuda())
        TORCH_CHECK(
            ids.numel() == 0 || (ids.min().item<int64_t>() >= 0 && ids.max().item<int64_t>() < g),
            "upsample_add: tap ids must be in [0, ", g, ")");
}

}  // namespace

namespace reference {

at::Tensor upsample_add(const at::Tensor& o, const at::Tensor& cache, const at::Tensor& ids,
                        const at::Tensor& w) {
    check_inputs(o, cache, ids, w);
    const int64_t B = o.size(0), H = o.size(1), d = o.size(3);
    const int64_t t = ids.size(0), g = side_of(cache.size(2));
    const auto grid = cache.view({B, H, g, g, d});
    auto tap = [&](const at::Tensor& x, int64_t dim, int64_t i) {
        // x's rows (dim 2) or columns (dim 3) at tap i of every output index, times its weight.
        auto shape = std::vector<int64_t>{1, 1, 1, 1, 1};
        shape[dim] = t;
        return x.index_select(dim, ids.select(1, i)) * w.select(1, i).view(shape);
    };
    const auto rows = tap(grid, 2, 0) + tap(grid, 2, 1);  // (B, H, t, g, d)
    const auto up = tap(rows, 3, 0) + tap(rows, 3, 1);    // (B, H, t, t, d)
    return (o.to(at::kFloat) + up.view({B, H, t * t, d})).to(o.scalar_type());
}

at::Tensor upsample_add_difference(const at::Tensor& o, const at::Tensor& dense,
                                   const at::Tensor& sparse, const at::Tensor& ids,
                                   const at::Tensor& w) {
    TORCH_CHECK(dense.defined() && sparse.defined() && dense.sizes() == sparse.sizes(),
                "upsample_add_difference: dense and sparse must be defined and of one shape");
    return upsample_add(o, at::sub(dense.to(at::kFloat), sparse), ids, w);
}

}  // namespace reference

bool cuda_upsample_add_supported(const at::Tensor& o, const at::Tensor& cache,
                                 const KernelPolicy& policy, std::string* why_not) {
    if (!o.defined() || !cache.defined()) return unsupported(why_not, "an undefined tensor");
    if (auto why = cuda_path_blocker(policy, {o, cache}); !why.empty())
        return unsupported(why_not, std::move(why));
    if (o.stride(3) != 1) return unsupported(why_not, "o's channels are not contiguous");
    if (o.numel() > INT32_MAX || cache.numel() > INT32_MAX)
        return unsupported(why_not, "too many elements for 32-bit indexing");
    return true;
}

at::Tensor upsample_add_difference(const at::Tensor& o, const at::Tensor& dense,
                                   const at::Tensor& sparse, const at::Tensor& ids,
                                   const at::Tensor& w, KernelPath path,
                                   const KernelPolicy& policy) {
    TORCH_CHECK(dense.defined() && sparse.defined() && dense.sizes() == sparse.sizes(),
                "upsample_add_difference: dense and sparse must be defined and of one shape");
    if (path != KernelPath::Reference) {
        std::string why;
        // The kernel reads both in o's dtype with contiguous channels; the float32 cache's check
        // stands in for the rest (device, policy, sizes).
        bool ok = o.defined() && o.dim() == 4 && dense.dim() == 4 &&
                  cuda_upsample_add_supported(o, dense, policy, &why);
        if (ok &&
            (dense.scalar_type() != o.scalar_type() || sparse.scalar_type() != o.scalar_type() ||
             dense.stride(3) != 1 || sparse.stride(3) != 1 || sparse.device() != o.device()))
            ok = unsupported(&why,
                             "dense and sparse must have o's dtype, device and contiguous "
                             "channels");
        TORCH_CHECK(ok || path != KernelPath::Cuda, "CUDA upsample_add requested but ", why);
#ifdef VARSCOPE_KERNELS_CUDA
        if (ok) {
            check_inputs(o, dense, ids, w, /*float_cache=*/false);
            return cuda::upsample_add_difference(o, dense, sparse, ids.contiguous(),
                                                 w.contiguous());
        }
#endif
    }
    return reference::upsample_add_difference(o, dense, sparse, ids, w);
}

at::Tensor upsample_add(const at::Tensor& o, const at::Tensor& cache, const at::Tensor& ids,
                        const at::Tensor& w, KernelPath path, const KernelPolicy& policy) {
    if (path != KernelPath::Reference) {
        std::string why;
        const bool ok = o.defined() && cache.defined() && o.dim() == 4 &&
                        cuda_upsample_add_supported(o, cache, policy, &why);
        TORCH_CHECK(ok || path != KernelPath::Cuda, "CUDA upsample_add requested but ", why);
#ifdef VARSCOPE_KERNELS_CUDA
        if (ok) {
            check_inputs(o, cache, ids, w);
            return cuda::upsample_add(o, cache.contiguous(), ids.contiguous(), w.contiguous());
        }
#endif
    }
    return reference::upsample_add(o, cache, ids, w);
}

}  // namespace varscope::kernels
