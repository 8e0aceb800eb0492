#include "kernels/cuda/scale_similarity_cuda.h"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <cstdint>
#include <vector>

#include "kernels/alignment.h"
#include "kernels/cuda/scale_similarity_params.h"
#include "kernels/cuda/torch_glue.h"

namespace varscope::kernels::cuda {
namespace {

TokenElem elem_of(const at::Tensor& t) {
    return token_elem_of(t, "scale similarity");
}

// The channel dim contiguous (a copy otherwise).
at::Tensor channels_contiguous(const at::Tensor& k) {
    return k.size(3) <= 1 || k.stride(3) == 1 ? k : k.contiguous();
}

SimilarityKeys keys_of(const at::Tensor& k) {
    SimilarityKeys s;
    s.data = k.data_ptr();
    s.stride_r = k.stride(0);
    s.stride_h = k.stride(1);
    s.stride_t = k.stride(2);
    return s;
}

// Two pieces the kernel reads in place: the second continues the first's tokens with the same
// strides (a one-token piece's token stride is free).
bool same_strides(const at::Tensor& a, const at::Tensor& b) {
    return a.stride(0) == b.stride(0) && a.stride(1) == b.stride(1) &&
           (a.stride(2) == b.stride(2) || a.size(2) <= 1 || b.size(2) <= 1);
}

// The previous keys as the kernel reads them: one tensor, or two pieces of equal strides.
std::vector<at::Tensor> prev_pieces(at::TensorList pieces) {
    std::vector<at::Tensor> out;
    for (const auto& p : pieces)
        if (p.size(2) > 0) out.push_back(channels_contiguous(p));
    if (out.size() <= 1 || (out.size() == 2 && same_strides(out[0], out[1]))) return out;
    return {at::cat(out, 2)};
}

SimilarityKeys keys_of(const std::vector<at::Tensor>& pieces) {
    // The token stride of a one-token first piece is taken from the second.
    SimilarityKeys s =
        keys_of(pieces.size() == 2 && pieces[0].size(2) <= 1 ? pieces[1] : pieces[0]);
    s.data = pieces[0].data_ptr();
    if (pieces.size() == 2) {
        s.data2 = pieces[1].data_ptr();
        s.split = pieces[0].size(2);
    }
    return s;
}

// The largest power of two of elements (at most 16 bytes) dividing c, the strides and the
// base addresses of all key tensors.
int aligned_elems(const std::vector<at::Tensor>& keys) {
    const int64_t eb = static_cast<int64_t>(keys.front().element_size());
    int v = static_cast<int>(16 / eb);
    auto ok = [&](int64_t n) { return n % v == 0; };
    while (v > 1) {
        bool all = ok(keys.front().size(3));
        for (const auto& t : keys) {
            all = all && ok(t.stride(0)) && ok(t.stride(1)) &&
                  (t.size(2) <= 1 || ok(t.stride(2))) &&
                  aligned(t.data_ptr(), static_cast<std::size_t>(v * eb));
        }
        if (all) break;
        v /= 2;
    }
    return v;
}

int max_shared_bytes(int device) {
    int v = 0;
    check_cuda(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
               "cudaDeviceGetAttribute");
    return v;
}

SimilarityPlan plan_for(std::vector<at::Tensor> keys, int64_t pn_prev, int64_t pn_cur,
                        bool normalize) {
    const at::Tensor cur = keys.back();  // the previous pieces first, the current keys last
    return plan_scale_similarity(static_cast<int>(cur.size(0)), static_cast<int>(cur.size(1)),
                                 static_cast<int>(pn_prev), static_cast<int>(pn_cur),
                                 static_cast<int>(cur.size(3)), elem_of(cur), normalize,
                                 aligned_elems(keys), max_shared_bytes(cur.get_device()));
}

}  // namespace

bool scale_similarity_fits(const at::Tensor& k_prev, int64_t pn_prev, const at::Tensor& k_cur,
                           int64_t pn_cur, bool normalize, std::string* why_not) {
    const c10::cuda::CUDAGuard guard(k_cur.device());
    const auto plan = plan_for({k_prev, k_cur}, pn_prev, pn_cur, normalize);
    if (plan.band_rows > 0) return true;
    if (why_not)
        *why_not = "two rows of the previous " + std::to_string(pn_prev) + "x" +
                   std::to_string(pn_prev) + " key map do not fit the device's shared memory";
    return false;
}

at::Tensor scale_sq_distance(at::TensorList prev_in, int64_t pn_prev, const at::Tensor& cur_in,
                             int64_t pn_cur, bool normalize) {
    const c10::cuda::CUDAGuard guard(cur_in.device());
    const auto prev = prev_pieces(prev_in);
    const auto cur = channels_contiguous(cur_in);
    if (cur.numel() == 0) return at::zeros({}, cur.options().dtype(at::kDouble));
    auto out = at::empty({}, cur.options().dtype(at::kDouble));  // written by the kernel
    auto keys = prev;
    keys.push_back(cur);
    const auto plan = plan_for(keys, pn_prev, pn_cur, normalize);
    TORCH_CHECK(plan.band_rows > 0, "scale similarity: the key maps do not fit shared memory");
    auto partials = at::empty({plan.blocks}, cur.options().dtype(at::kFloat));
    check_cuda(launch_scale_similarity(
                   keys_of(prev), keys_of(cur), elem_of(cur), static_cast<int>(cur.size(0)),
                   static_cast<int>(cur.size(1)), static_cast<int>(pn_prev),
                   static_cast<int>(pn_cur), static_cast<int>(cur.size(3)), normalize, plan,
                   partials.data_ptr<float>(), out.data_ptr<double>(), stream_of(cur)),
               "scale similarity kernel");
    return out;
}

}  // namespace varscope::kernels::cuda
