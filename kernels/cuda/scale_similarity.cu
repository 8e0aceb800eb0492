// AMS-KV's scale similarity: D = sum (k_cur - up(k_prev))^2 with up() bilinear, align_corners
// false, no antialiasing (math in kernels/scale_similarity.h). Memory-bound: each key is read
// from device memory once.
//
// One thread block per (row r, head h, band of current-map rows). The block stages the rows of
// the previous map its band interpolates from (the whole map when it fits: 13x13x64 fp16 is
// 21 KB) in shared memory, then walks the band's current tokens: a group of G lanes per token
// (G = channel chunks rounded up to a power of two, at most 32), each lane one chunk of `V`
// channels (16-byte loads where aligned). The four neighbours' weights are computed per token
// exactly as at::upsample_bilinear2d does (src = scale * (dst + 0.5) - 0.5, clamped at 0;
// i1 = i0 + 1 inside the map; lambda = src - i0). Each thread accumulates squared differences in
// float32; the block reduces in a fixed order and writes one partial; a second one-block kernel
// sums the partials in float64 in a fixed order (deterministic: no atomics).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/scale_similarity_params.h"

namespace varscope::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kFinalThreads = 256;
constexpr int kTargetSharedBytes = 32 * 1024;  // per block, for several blocks per SM

__device__ __forceinline__ float to_float(float v) {
    return v;
}
__device__ __forceinline__ float to_float(__half v) {
    return __half2float(v);
}
__device__ __forceinline__ float to_float(__nv_bfloat16 v) {
    return __bfloat162float(v);
}

// Source index of a destination row/column, as ATen's area_pixel_compute_source_index (linear
// modes, align_corners false): the same float operations on host and device (no contraction).
struct Src {
    int i0, i1;
    float l1;  // weight of i1; i0 gets 1 - l1
};

__host__ __device__ __forceinline__ Src source_index(int dst, int in_size, float scale) {
#ifdef __CUDA_ARCH__
    float src = __fadd_rn(__fmul_rn(scale, __fadd_rn(static_cast<float>(dst), 0.5f)), -0.5f);
#else
    volatile float prod = scale * (static_cast<float>(dst) + 0.5f);  // no host FMA either
    float src = prod - 0.5f;
#endif
    if (src < 0.f) src = 0.f;
    Src s;
    s.i0 = static_cast<int>(src);
    s.i1 = s.i0 + (s.i0 < in_size - 1 ? 1 : 0);
#ifdef __CUDA_ARCH__
    s.l1 = __fsub_rn(src, static_cast<float>(s.i0));
#else
    s.l1 = src - static_cast<float>(s.i0);
#endif
    return s;
}

// V elements of T as one aligned load.
template <typename T, int V>
struct alignas(sizeof(T) * V) Chunk {
    T v[V];
};

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
// Sum over an aligned group of `g` lanes (a power of two <= 32); every lane of the warp calls.
__device__ __forceinline__ float group_sum(float v, int g) {
    for (int o = g >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__host__ __device__ __forceinline__ int stage_bytes(int stage_rows, int pp, int c, int elem_bytes) {
    return (stage_rows * pp * c * elem_bytes + 15) / 16 * 16;
}

template <typename T, int V, bool kNorm>
__global__ void __launch_bounds__(kThreads)
    scale_similarity_kernel(SimilarityKeys prev, SimilarityKeys cur, int heads, int pp, int pc,
                            int c, float scale, int band_rows, int bands, int stage_rows,
                            float* __restrict__ partials) {
    extern __shared__ __align__(16) unsigned char smem[];
    using C = Chunk<T, V>;
    const long long b = blockIdx.x;
    const int band = static_cast<int>(b % bands);
    const long long rh = b / bands;
    const int h = static_cast<int>(rh % heads);
    const long long r = rh / heads;
    const int y_lo = band * band_rows, y_hi = min(pc, y_lo + band_rows) - 1;
    const int py_lo = source_index(y_lo, pp, scale).i0, py_hi = source_index(y_hi, pp, scale).i1;
    const int rows = py_hi - py_lo + 1;
    __shared__ float warp_part[kThreads / 32];
    if (rows > stage_rows) {  // the plan's bound is wrong: say so with a NaN, never overrun
        if (threadIdx.x == 0) partials[b] = __int_as_float(0x7fc00000);
        return;
    }
    const int chunks = c / V;
    int g = 1;
    while (g < chunks && g < 32) g <<= 1;
    const int lane = threadIdx.x & (g - 1), group = threadIdx.x / g, groups = kThreads / g;

    T* stage = reinterpret_cast<T*>(smem);
    float* inv_prev = reinterpret_cast<float*>(smem + stage_bytes(stage_rows, pp, c, sizeof(T)));
    const T* pbase = static_cast<const T*>(prev.data) + r * prev.stride_r + h * prev.stride_h;
    // The second piece of a wrapped map (never read when there is none: split is past the end).
    const T* pbase2 =
        prev.data2 ? static_cast<const T*>(prev.data2) + r * prev.stride_r + h * prev.stride_h
                   : pbase;
    const int split = static_cast<int>(min(prev.split, static_cast<int64_t>(pp) * pp));
    const T* cbase = static_cast<const T*>(cur.data) + r * cur.stride_r + h * cur.stride_h;

    // Stage the previous map's rows [py_lo, py_hi] (consecutive tokens), dense (tokens, c).
    const int staged = rows * pp, first = py_lo * pp;
#pragma unroll 4
    for (int i = threadIdx.x; i < staged * chunks; i += kThreads) {
        const int t = i / chunks, ch = i - t * chunks;
        const int tok = first + t;
        const T* src = tok < split ? pbase + tok * prev.stride_t
                                   : pbase2 + static_cast<long long>(tok - split) * prev.stride_t;
        const C v = *reinterpret_cast<const C*>(src + ch * V);
        *reinterpret_cast<C*>(stage + t * c + ch * V) = v;
    }
    __syncthreads();
    if (kNorm) {  // 1 / max(||k||, 1e-12) of every staged token
        for (int base = 0; base < staged; base += groups) {
            const int t = base + group;
            float ss = 0.f;
            if (t < staged)
                for (int ch = lane; ch < chunks; ch += g) {
                    const C v = *reinterpret_cast<const C*>(stage + t * c + ch * V);
#pragma unroll
                    for (int e = 0; e < V; ++e) ss += to_float(v.v[e]) * to_float(v.v[e]);
                }
            ss = group_sum(ss, g);
            if (t < staged && lane == 0) inv_prev[t] = 1.f / fmaxf(sqrtf(ss), 1e-12f);
        }
        __syncthreads();
    }

    float acc = 0.f;
    const int ntok = (y_hi - y_lo + 1) * pc;
#pragma unroll 2  // two tokens' loads in flight per lane
    for (int base = 0; base < ntok; base += groups) {
        const int t = base + group;
        const bool active = t < ntok;
        const int tt = active ? t : 0;
        const int y = y_lo + tt / pc, x = tt - (tt / pc) * pc;
        const Src sy = source_index(y, pp, scale), sx = source_index(x, pp, scale);
        const float ly1 = sy.l1, ly0 = 1.f - ly1, lx1 = sx.l1, lx0 = 1.f - lx1;
        const int s00 = (sy.i0 - py_lo) * pp + sx.i0, s01 = (sy.i0 - py_lo) * pp + sx.i1;
        const int s10 = (sy.i1 - py_lo) * pp + sx.i0, s11 = (sy.i1 - py_lo) * pp + sx.i1;
        float w00 = ly0 * lx0, w01 = ly0 * lx1, w10 = ly1 * lx0, w11 = ly1 * lx1;
        if (kNorm) {
            w00 *= inv_prev[s00];
            w01 *= inv_prev[s01];
            w10 *= inv_prev[s10];
            w11 *= inv_prev[s11];
        }
        const T* cp = cbase + (static_cast<long long>(y) * pc + x) * cur.stride_t;
        float inv_cur = 1.f;
        if (kNorm) {
            float ss = 0.f;
            if (active)
                for (int ch = lane; ch < chunks; ch += g) {
                    const C v = *reinterpret_cast<const C*>(cp + ch * V);
#pragma unroll
                    for (int e = 0; e < V; ++e) ss += to_float(v.v[e]) * to_float(v.v[e]);
                }
            ss = group_sum(ss, g);
            inv_cur = 1.f / fmaxf(sqrtf(ss), 1e-12f);
        }
        if (!active) continue;
        for (int ch = lane; ch < chunks; ch += g) {
            const C k = *reinterpret_cast<const C*>(cp + ch * V);
            const C a = *reinterpret_cast<const C*>(stage + s00 * c + ch * V);
            const C bb = *reinterpret_cast<const C*>(stage + s01 * c + ch * V);
            const C cc = *reinterpret_cast<const C*>(stage + s10 * c + ch * V);
            const C d = *reinterpret_cast<const C*>(stage + s11 * c + ch * V);
#pragma unroll
            for (int e = 0; e < V; ++e) {
                const float up = w00 * to_float(a.v[e]) + w01 * to_float(bb.v[e]) +
                                 w10 * to_float(cc.v[e]) + w11 * to_float(d.v[e]);
                const float diff = to_float(k.v[e]) * inv_cur - up;
                acc += diff * diff;
            }
        }
    }

    acc = warp_sum(acc);
    if ((threadIdx.x & 31) == 0) warp_part[threadIdx.x / 32] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.f;
#pragma unroll
        for (int w = 0; w < kThreads / 32; ++w) s += warp_part[w];
        partials[b] = s;
    }
}

__global__ void __launch_bounds__(kFinalThreads)
    sum_partials_kernel(const float* __restrict__ partials, long long n, double* __restrict__ out) {
    __shared__ double warp_part[kFinalThreads / 32];
    double s = 0.0;
    for (long long i = threadIdx.x; i < n; i += kFinalThreads) s += partials[i];
    s = warp_sum(s);
    if ((threadIdx.x & 31) == 0) warp_part[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0.0;
        for (int w = 0; w < kFinalThreads / 32; ++w) t += warp_part[w];
        out[0] = t;
    }
}

int elem_bytes(TokenElem e) {
    return e == TokenElem::Float32 ? 4 : 2;
}

template <typename T, int V, bool kNorm>
cudaError_t run(const SimilarityKeys& prev, const SimilarityKeys& cur, int heads, int pp, int pc,
                int c, float scale, const SimilarityPlan& plan, float* partials,
                cudaStream_t stream) {
    auto kernel = scale_similarity_kernel<T, V, kNorm>;
    if (plan.shared_bytes > 48 * 1024) {
        const cudaError_t err = cudaFuncSetAttribute(
            kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, plan.shared_bytes);
        if (err != cudaSuccess) return err;
    }
    kernel<<<static_cast<unsigned>(plan.blocks), kThreads, plan.shared_bytes, stream>>>(
        prev, cur, heads, pp, pc, c, scale, plan.band_rows, plan.bands, plan.stage_rows, partials);
    return cudaGetLastError();
}

template <typename T, bool kNorm>
cudaError_t run_vec(const SimilarityKeys& prev, const SimilarityKeys& cur, int heads, int pp,
                    int pc, int c, float scale, const SimilarityPlan& plan, float* partials,
                    cudaStream_t stream) {
    switch (plan.vec) {
        case 1:
            return run<T, 1, kNorm>(prev, cur, heads, pp, pc, c, scale, plan, partials, stream);
        case 2:
            return run<T, 2, kNorm>(prev, cur, heads, pp, pc, c, scale, plan, partials, stream);
        case 4:
            return run<T, 4, kNorm>(prev, cur, heads, pp, pc, c, scale, plan, partials, stream);
        case 8:
            if constexpr (sizeof(T) == 2)
                return run<T, 8, kNorm>(prev, cur, heads, pp, pc, c, scale, plan, partials, stream);
            break;
        default:
            break;
    }
    return cudaErrorInvalidValue;
}

template <typename T>
cudaError_t run_type(const SimilarityKeys& prev, const SimilarityKeys& cur, int heads, int pp,
                     int pc, int c, bool normalize, float scale, const SimilarityPlan& plan,
                     float* partials, cudaStream_t stream) {
    return normalize
               ? run_vec<T, true>(prev, cur, heads, pp, pc, c, scale, plan, partials, stream)
               : run_vec<T, false>(prev, cur, heads, pp, pc, c, scale, plan, partials, stream);
}

}  // namespace

SimilarityPlan plan_scale_similarity(int rows, int heads, int pn_prev, int pn_cur, int channels,
                                     TokenElem elem, bool normalize, int aligned_elems,
                                     int max_shared_bytes) {
    SimilarityPlan p;
    const int eb = elem_bytes(elem);
    p.vec = std::max(1, std::min(aligned_elems, 16 / eb));
    while (channels % p.vec != 0) p.vec /= 2;
    const float scale = static_cast<float>(pn_prev) / static_cast<float>(pn_cur);
    // Previous-map rows a band of `br` current rows may need (the most over its bands), plus one
    // row of margin, at most the whole map.
    auto need_rows = [&](int br) {
        int most = 0;
        for (int lo = 0; lo < pn_cur; lo += br) {
            const int hi = std::min(pn_cur, lo + br) - 1;
            most = std::max(most, source_index(hi, pn_prev, scale).i1 -
                                      source_index(lo, pn_prev, scale).i0 + 1);
        }
        return std::min(pn_prev, most + 1);
    };
    auto bytes = [&](int stage_rows) {
        return stage_bytes(stage_rows, pn_prev, channels, eb) +
               (normalize ? stage_rows * pn_prev * 4 : 0);
    };
    int band = 0;
    for (int br = pn_cur; br >= 1; --br)
        if (bytes(need_rows(br)) <= kTargetSharedBytes) {
            band = br;
            break;
        }
    if (band == 0 && bytes(need_rows(1)) <= max_shared_bytes) band = 1;
    if (band == 0) return p;  // band_rows == 0: does not fit
    p.band_rows = band;
    p.bands = (pn_cur + band - 1) / band;
    p.stage_rows = need_rows(band);
    p.shared_bytes = bytes(p.stage_rows);
    p.blocks = static_cast<long long>(rows) * heads * p.bands;
    return p;
}

cudaError_t launch_scale_similarity(const SimilarityKeys& prev, const SimilarityKeys& cur,
                                    TokenElem elem, int rows, int heads, int pn_prev, int pn_cur,
                                    int channels, bool normalize, const SimilarityPlan& plan,
                                    float* partials, double* out, cudaStream_t stream) {
    if (plan.band_rows <= 0 || plan.blocks <= 0 || plan.blocks > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    const float scale = static_cast<float>(pn_prev) / static_cast<float>(pn_cur);
    cudaError_t err = cudaErrorNotSupported;
    switch (elem) {
        case TokenElem::Float32:
            err = run_type<float>(prev, cur, heads, pn_prev, pn_cur, channels, normalize, scale,
                                  plan, partials, stream);
            break;
        case TokenElem::Float16:
            err = run_type<__half>(prev, cur, heads, pn_prev, pn_cur, channels, normalize, scale,
                                   plan, partials, stream);
            break;
        case TokenElem::BFloat16:
            err = run_type<__nv_bfloat16>(prev, cur, heads, pn_prev, pn_cur, channels, normalize,
                                          scale, plan, partials, stream);
            break;
    }
    if (err != cudaSuccess) return err;
    sum_partials_kernel<<<1, kFinalThreads, 0, stream>>>(partials, plan.blocks, out);
    return cudaGetLastError();
}

}  // namespace varscope::kernels::cuda
