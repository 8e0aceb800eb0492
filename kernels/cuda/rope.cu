// The 2-D RoPE of Infinity's queries and keys in one pass: each pair (x0, x1) of a head row
// becomes (cos x0 - sin x1, sin x0 + cos x1), written in fp32 or rounded to bf16. Bitwise what
// the ATen composition does (apply_rope2d in core/models/infinity_blocks.cpp, then .to(bf16)):
// every product, the difference and the sum are separate IEEE fp32 operations, so the
// intrinsics below keep nvcc from contracting them into FMAs; bf16 is round-to-nearest-even, as
// c10::BFloat16 is on the device.
#include <cuda_bf16.h>

#include "kernels/alignment.h"
#include "kernels/cuda/rope_params.h"

namespace varscope::kernels::cuda {
namespace {

constexpr int kThreads = 256;

struct Pair {
    float a, b;
};

__device__ __forceinline__ Pair rotate(float x0, float x1, float c, float s) {
    // Operand order as in apply_rope2d: cos * x0 - sin * x1, sin * x0 + cos * x1.
    return {__fsub_rn(__fmul_rn(c, x0), __fmul_rn(s, x1)),
            __fadd_rn(__fmul_rn(s, x0), __fmul_rn(c, x1))};
}

__device__ __forceinline__ unsigned bf16_pair(float lo, float hi) {
    const unsigned l = __bfloat16_as_ushort(__float2bfloat16_rn(lo));
    const unsigned h = __bfloat16_as_ushort(__float2bfloat16_rn(hi));
    return l | (h << 16);
}

// One thread per `kPairs` adjacent pairs (kPairs = 2: 16-byte loads of x, 8-byte loads of cos
// and sin; the launcher checks the alignment). blockIdx.y picks q or k.
template <int kPairs, RopeOut kOut>
__global__ void __launch_bounds__(kThreads) rope2d_kernel(RopeParams p) {
    const int which = blockIdx.y;
    const int64_t groups_per_row = p.head_dim / (2 * kPairs);
    const int64_t total = p.batch * p.heads * p.tokens * groups_per_row;
    const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
    if (i >= total) return;
    const int64_t g = i % groups_per_row;
    int64_t row = i / groups_per_row;  // (b, h, l) row-major
    const int64_t l = row % p.tokens;
    row /= p.tokens;
    const int64_t h = row % p.heads, b = row / p.heads;
    const int64_t j = g * kPairs;  // first pair (frequency index)

    const float* x = p.x[which] + b * p.x_stride[which][0] + h * p.x_stride[which][1] +
                     l * p.x_stride[which][2] + 2 * j;
    const float* cs = p.rope + b * p.rope_stride_batch + l * p.rope_stride_token + j;
    const float* sn = cs + p.rope_stride_part;
    const int64_t o = ((b * p.heads + h) * p.tokens + l) * p.head_dim + 2 * j;

    float v[2 * kPairs], c[kPairs], s[kPairs];
    if constexpr (kPairs == 2) {
        const float4 xv = *reinterpret_cast<const float4*>(x);
        const float2 cv = *reinterpret_cast<const float2*>(cs);
        const float2 sv = *reinterpret_cast<const float2*>(sn);
        v[0] = xv.x, v[1] = xv.y, v[2] = xv.z, v[3] = xv.w;
        c[0] = cv.x, c[1] = cv.y, s[0] = sv.x, s[1] = sv.y;
    } else {
        v[0] = x[0], v[1] = x[1], c[0] = cs[0], s[0] = sn[0];
    }
    float r[2 * kPairs];
    for (int k = 0; k < kPairs; ++k) {
        const Pair y = rotate(v[2 * k], v[2 * k + 1], c[k], s[k]);
        r[2 * k] = y.a;
        r[2 * k + 1] = y.b;
    }
    if constexpr (kOut == RopeOut::Float32) {
        float* out = static_cast<float*>(p.out[which]) + o;
        if constexpr (kPairs == 2)
            *reinterpret_cast<float4*>(out) = make_float4(r[0], r[1], r[2], r[3]);
        else
            *reinterpret_cast<float2*>(out) = make_float2(r[0], r[1]);
    } else {
        auto* out = static_cast<__nv_bfloat16*>(p.out[which]) + o;
        if constexpr (kPairs == 2)
            *reinterpret_cast<uint2*>(out) =
                make_uint2(bf16_pair(r[0], r[1]), bf16_pair(r[2], r[3]));
        else
            *reinterpret_cast<unsigned*>(out) = bf16_pair(r[0], r[1]);
    }
}

// Two pairs a thread where every x row starts on 16 bytes and every cos/sin row on 8.
bool two_pairs(const RopeParams& p) {
    if (p.head_dim % 4 != 0 || !aligned(p.rope, 8) || p.rope_stride_part % 2 != 0 ||
        p.rope_stride_batch % 2 != 0 || p.rope_stride_token % 2 != 0)
        return false;
    for (int w = 0; w < p.inputs; ++w) {
        if (!aligned(p.x[w], 16) || !aligned(p.out[w], 16)) return false;
        for (int d = 0; d < 3; ++d)
            if (p.x_stride[w][d] % 4 != 0) return false;
    }
    return true;
}

template <int kPairs>
cudaError_t launch(const RopeParams& p, cudaStream_t stream) {
    const int64_t threads = p.batch * p.heads * p.tokens * (p.head_dim / (2 * kPairs));
    const dim3 grid(static_cast<unsigned>((threads + kThreads - 1) / kThreads),
                    static_cast<unsigned>(p.inputs));
    if (p.out_type == RopeOut::Float32)
        rope2d_kernel<kPairs, RopeOut::Float32><<<grid, kThreads, 0, stream>>>(p);
    else
        rope2d_kernel<kPairs, RopeOut::BFloat16><<<grid, kThreads, 0, stream>>>(p);
    return cudaGetLastError();
}

}  // namespace

cudaError_t launch_rope2d(const RopeParams& p, cudaStream_t stream) {
    if (p.batch * p.heads * p.tokens * p.head_dim == 0) return cudaSuccess;
    if (p.inputs < 1 || p.inputs > RopeParams::kMaxInputs || p.head_dim % 2 != 0)
        return cudaErrorInvalidValue;
    const int64_t pairs = p.batch * p.heads * p.tokens * (p.head_dim / 2);
    if ((pairs + kThreads - 1) / kThreads > 0x7fffffff) return cudaErrorInvalidConfiguration;
    return two_pairs(p) ? launch<2>(p, stream) : launch<1>(p, stream);
}

}  // namespace varscope::kernels::cuda
