// AdaLN's LayerNorm (no affine) and modulation of the fp32 stream with the bf16 cast of the next
// product, in one kernel: bf16(layer_norm(x) * scale + shift). Bitwise the ATen composition
// because the statistics are formed exactly as ATen's vectorized LayerNorm kernel forms them
// (the one at::layer_norm runs for float32 rows of a multiple of 4 values at 16-byte aligned
// addresses, torch 2.x): one CTA of 32 x 4 threads per row, each thread folding its 4-value
// vectors i = thread, thread + 128, ... into a Welford triple value by value, then a shuffle-down
// merge within each warp and a two-step merge of the four warps through shared memory, with
// ATen's expressions (1 / count as a reciprocal times delta; nvcc contracts them into FMAs the
// same way in both builds, so they are written the same way here, not with intrinsics). Then
// rstd = rsqrt(var + eps), y = rstd * (x - mean) and the modulation's IEEE product and sum. Saves
// the LayerNorm's launch and its fp32 write and read of the whole stream, twice per block.
#include <cuda_bf16.h>

#include "kernels/alignment.h"
#include "kernels/cuda/modulate_params.h"

namespace varscope::kernels::cuda {
namespace {

constexpr int kWarp = 32, kWarps = 4;  // ATen's launch for its vectorized LayerNorm

struct Welford {
    float mean, m2, count;
};

__device__ __forceinline__ Welford welford_add(const Welford& w, float v) {
    const float delta = v - w.mean;
    const float count = w.count + 1.f;
    const float mean = w.mean + delta * (1.f / count);
    return {mean, w.m2 + delta * (v - mean), count};
}

// `mine` merged with `other` in ATen's operand order (its cuWelfordCombine(mine, other)).
__device__ __forceinline__ Welford welford_merge(const Welford& mine, const Welford& other) {
    const float delta = mine.mean - other.mean;
    const float count = other.count + mine.count;
    if (!(count > 0.f)) return {0.f, 0.f, count};
    const float coef = 1.f / count;
    const float n_other = other.count * coef;
    const float n_mine = mine.count * coef;
    return {n_other * other.mean + n_mine * mine.mean,
            other.m2 + mine.m2 + delta * delta * other.count * n_mine, count};
}

__device__ __forceinline__ unsigned bf16_pair(float lo, float hi) {
    const unsigned l = __bfloat16_as_ushort(__float2bfloat16_rn(lo));
    const unsigned h = __bfloat16_as_ushort(__float2bfloat16_rn(hi));
    return l | (h << 16);
}

__device__ __forceinline__ float norm_modulate(float x, float mean, float rstd, float s, float t) {
    return __fadd_rn(__fmul_rn(__fmul_rn(rstd, __fsub_rn(x, mean)), s), t);
}

__global__ void __launch_bounds__(kWarp* kWarps)
    norm_modulate_bf16_kernel(ModulateParams p, float eps) {
    __shared__ float merge_buf[kWarps * 3 / 2];  // ATen's shared buffer: means, m2s, counts
    __shared__ float stats[2];
    const int64_t row = blockIdx.x;
    const int64_t b = row / p.tokens;
    const int n_vec = static_cast<int>(p.channels / 4);
    const int thread = threadIdx.x + threadIdx.y * kWarp;
    const auto* x = reinterpret_cast<const float4*>(p.x + row * p.channels);
    Welford w{0.f, 0.f, 0.f};
    for (int i = thread; i < n_vec; i += kWarp * kWarps) {
        const float4 v = x[i];
        w = welford_add(w, v.x);
        w = welford_add(w, v.y);
        w = welford_add(w, v.z);
        w = welford_add(w, v.w);
    }
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
        const Welford other{__shfl_down_sync(0xffffffffu, w.mean, offset),
                            __shfl_down_sync(0xffffffffu, w.m2, offset),
                            __shfl_down_sync(0xffffffffu, w.count, offset)};
        w = welford_merge(w, other);
    }
    // The upper half of the warps hands its lane-0 triples to the lower half, twice.
    float* means_m2 = merge_buf;
    float* counts = merge_buf + kWarps;
    for (int offset = kWarps / 2; offset > 0; offset /= 2) {
        if (threadIdx.x == 0 && threadIdx.y >= offset && threadIdx.y < 2 * offset) {
            const int slot = threadIdx.y - offset;
            means_m2[2 * slot] = w.mean;
            means_m2[2 * slot + 1] = w.m2;
            counts[slot] = w.count;
        }
        __syncthreads();
        if (threadIdx.x == 0 && threadIdx.y < offset) {
            const Welford other{means_m2[2 * threadIdx.y], means_m2[2 * threadIdx.y + 1],
                                counts[threadIdx.y]};
            w = welford_merge(w, other);
        }
        __syncthreads();
    }
    if (thread == 0) {
        stats[0] = w.mean;
        stats[1] = w.m2 / static_cast<float>(p.channels);
    }
    __syncthreads();
    const float mean = stats[0];
    const float rstd = rsqrtf(stats[1] + eps);
    const auto* s = reinterpret_cast<const float4*>(p.scale + b * p.scale_stride_batch);
    const auto* t = reinterpret_cast<const float4*>(p.shift + b * p.shift_stride_batch);
    auto* out = reinterpret_cast<uint2*>(static_cast<__nv_bfloat16*>(p.out) + row * p.channels);
    for (int i = thread; i < n_vec; i += kWarp * kWarps) {
        const float4 v = x[i], sv = s[i], tv = t[i];
        out[i] = make_uint2(bf16_pair(norm_modulate(v.x, mean, rstd, sv.x, tv.x),
                                      norm_modulate(v.y, mean, rstd, sv.y, tv.y)),
                            bf16_pair(norm_modulate(v.z, mean, rstd, sv.z, tv.z),
                                      norm_modulate(v.w, mean, rstd, sv.w, tv.w)));
    }
}

}  // namespace

bool norm_modulate_fits(const ModulateParams& p) {
    return p.channels % 4 == 0 && p.channels <= (int64_t{1} << 24) && aligned(p.x, 16) &&
           aligned(p.scale, 16) && aligned(p.shift, 16) && aligned(p.out, 8) &&
           p.scale_stride_batch % 4 == 0 && p.shift_stride_batch % 4 == 0;
}

cudaError_t launch_norm_modulate_bf16(const ModulateParams& p, float eps, cudaStream_t stream) {
    if (!norm_modulate_fits(p)) return cudaErrorInvalidValue;
    const int64_t rows = p.batch * p.tokens;
    if (rows == 0 || p.channels == 0) return cudaSuccess;
    if (rows > 0x7fffffff) return cudaErrorInvalidConfiguration;
    norm_modulate_bf16_kernel<<<static_cast<unsigned>(rows), dim3(kWarp, kWarps), 0, stream>>>(p,
                                                                                               eps);
    return cudaGetLastError();
}

}  // namespace varscope::kernels::cuda
