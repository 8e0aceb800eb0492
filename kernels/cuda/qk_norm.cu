// VAR's q/k L2 normalisation in the bf16-autocast mode, after the norms, in one pass:
// q_out = bf16((q / max(|q|, 1e-12)) * mul), k_out = bf16(k / max(|k|, 1e-12)). Bitwise what ATen
// does: the clamp keeps NaN (ATen's clamp_min propagates it), the division and the product are
// IEEE fp32 operations (the intrinsics keep nvcc from contracting or approximating them) and the
// casts round to nearest even, as c10::BFloat16 does on the device. Where the caller gives the
// KV cache's slots, k_out is that slot and v is copied beside it: the cache append costs no
// launches of its own (two per block and step otherwise).
#include <cuda_bf16.h>

#include "kernels/cuda/qk_norm_params.h"

namespace varscope::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float clamped(float n) {
    return n != n ? n : fmaxf(n, 1e-12f);
}

__device__ __forceinline__ int64_t at3(const int64_t* s, int64_t b, int64_t h, int64_t l) {
    return b * s[0] + h * s[1] + l * s[2];
}

// One thread per kVec adjacent channels of one (b, h, l) row of q and of k.
template <int kVec>
__global__ void __launch_bounds__(kThreads) qk_norm_kernel(QkNormParams p) {
    const int64_t groups = p.channels / kVec;
    const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
    if (i >= p.batch * p.heads * p.tokens * groups) return;
    const int64_t c = (i % groups) * kVec;
    int64_t row = i / groups;  // (b, l, h) order: neighbouring threads read neighbouring heads
    const int64_t h = row % p.heads;
    row /= p.heads;
    const int64_t l = row % p.tokens, b = row / p.tokens;
    const float nq = clamped(p.norm_q[at3(p.nq_stride, b, h, l)]);
    const float nk = clamped(p.norm_k[at3(p.nk_stride, b, h, l)]);
    const float m = p.mul[h * p.mul_stride_head];
    const auto* q = static_cast<const __nv_bfloat16*>(p.q) + at3(p.q_stride, b, h, l) + c;
    const auto* k = static_cast<const __nv_bfloat16*>(p.k) + at3(p.k_stride, b, h, l) + c;
    auto* qo = static_cast<__nv_bfloat16*>(p.q_out) + at3(p.qo_stride, b, h, l) + c;
    auto* ko = static_cast<__nv_bfloat16*>(p.k_out) + at3(p.ko_stride, b, h, l) + c;
    __nv_bfloat16 qv[kVec], kv[kVec];
    if constexpr (kVec == 4) {
        *reinterpret_cast<uint2*>(qv) = *reinterpret_cast<const uint2*>(q);
        *reinterpret_cast<uint2*>(kv) = *reinterpret_cast<const uint2*>(k);
    } else {
        qv[0] = q[0];
        kv[0] = k[0];
    }
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
        qv[j] = __float2bfloat16_rn(__fmul_rn(__fdiv_rn(__bfloat162float(qv[j]), nq), m));
        kv[j] = __float2bfloat16_rn(__fdiv_rn(__bfloat162float(kv[j]), nk));
    }
    if constexpr (kVec == 4) {
        *reinterpret_cast<uint2*>(qo) = *reinterpret_cast<const uint2*>(qv);
        *reinterpret_cast<uint2*>(ko) = *reinterpret_cast<const uint2*>(kv);
    } else {
        qo[0] = qv[0];
        ko[0] = kv[0];
    }
    if (p.v == nullptr) return;
    const auto* v = static_cast<const __nv_bfloat16*>(p.v) + at3(p.v_stride, b, h, l) + c;
    auto* vo = static_cast<__nv_bfloat16*>(p.v_out) + at3(p.vo_stride, b, h, l) + c;
    if constexpr (kVec == 4)
        *reinterpret_cast<uint2*>(vo) = *reinterpret_cast<const uint2*>(v);
    else
        vo[0] = v[0];
}

bool aligned8(const void* ptr, const int64_t* stride) {
    // 4 bf16 = 8 bytes at every row start: the base and the row strides in multiples of 4.
    return reinterpret_cast<uintptr_t>(ptr) % 8 == 0 && stride[0] % 4 == 0 && stride[1] % 4 == 0 &&
           stride[2] % 4 == 0;
}

template <int kVec>
cudaError_t launch(const QkNormParams& p, cudaStream_t stream) {
    const int64_t threads = p.batch * p.heads * p.tokens * (p.channels / kVec);
    const int64_t blocks = (threads + kThreads - 1) / kThreads;
    if (blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
    qk_norm_kernel<kVec><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
    return cudaGetLastError();
}

}  // namespace

cudaError_t launch_qk_norm_bf16(const QkNormParams& p, cudaStream_t stream) {
    if (p.batch * p.heads * p.tokens * p.channels == 0) return cudaSuccess;
    const bool vec4 =
        p.channels % 4 == 0 && aligned8(p.q, p.q_stride) && aligned8(p.k, p.k_stride) &&
        aligned8(p.q_out, p.qo_stride) && aligned8(p.k_out, p.ko_stride) &&
        (p.v == nullptr || (aligned8(p.v, p.v_stride) && aligned8(p.v_out, p.vo_stride)));
    return vec4 ? launch<4>(p, stream) : launch<1>(p, stream);
}

}  // namespace varscope::kernels::cuda
