// Fused kernels of MAR's DiffLoss head at few rows (one reverse-diffusion step = one kernel per
// linear layer plus one for the final layer and the posterior update). At <= 32 rows every
// linear layer is a GEMV chain bound by weight bytes and launch latency, so each kernel:
//  * loads its warp's weight row into registers first (independent of earlier kernels), then
//    waits for the previous kernel (programmatic dependent launch: the launch and the weight
//    loads overlap the previous kernel's tail);
//  * builds the (few) input rows in shared memory: a copy, or LayerNorm + AdaLN modulation,
//    computed redundantly by every CTA (each needs all rows; they are a few KB from L2);
//  * one output feature per warp: dot products over 16-byte chunks in float32, then a
//    reduce-scatter across lanes (MT - 1 + log2(32 / MT) shuffles for MT rows) that leaves
//    row r's sum in lane r, which applies the epilogue and stores.
// Included by one .cu per element type (diffloss_bf16.cu, diffloss_fp16.cu).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "kernels/cuda/diffloss_params.h"

namespace varscope::kernels::cuda::diffloss {

constexpr int kWarps = kDiffThreads / 32;

template <typename T>
struct Elem;

template <>
struct Elem<__nv_bfloat16> {
    // Two packed bf16 -> floats: the bf16 bits are the high half of a float.
    __device__ static float lo(uint32_t u) { return __uint_as_float(u << 16); }
    __device__ static float hi(uint32_t u) { return __uint_as_float(u & 0xffff0000u); }
    __device__ static uint32_t pack(float a, float b) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
        uint32_t u;
        memcpy(&u, &h, 4);
        return u;
    }
    __device__ static float load(const void* p, long long i) {
        return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    }
    __device__ static void store(void* p, long long i, float v) {
        static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
    }
    __device__ static float rnd(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }
};

template <>
struct Elem<__half> {
    __device__ static float lo(uint32_t u) {
        return __half2float(__ushort_as_half(static_cast<unsigned short>(u & 0xffffu)));
    }
    __device__ static float hi(uint32_t u) {
        return __half2float(__ushort_as_half(static_cast<unsigned short>(u >> 16)));
    }
    __device__ static uint32_t pack(float a, float b) {
        const __half2 h = __floats2half2_rn(a, b);
        uint32_t u;
        memcpy(&u, &h, 4);
        return u;
    }
    __device__ static float load(const void* p, long long i) {
        return __half2float(static_cast<const __half*>(p)[i]);
    }
    __device__ static void store(void* p, long long i, float v) {
        static_cast<__half*>(p)[i] = __float2half_rn(v);
    }
    __device__ static float rnd(float v) { return __half2float(__float2half_rn(v)); }
};

// Programmatic dependent launch (sm_90): let the next kernel launch now, and wait until the
// previous one has finished and its writes are visible. Both are no-ops without PDL.
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ uint4 load_nc(const uint4* p) {
    return __ldg(p);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// 8 products of a weight chunk (as floats) and a packed input chunk.
template <typename T>
__device__ __forceinline__ float dot8(const float (&w)[8], const uint4& h) {
    using E = Elem<T>;
    float s = w[0] * E::lo(h.x);
    s = fmaf(w[1], E::hi(h.x), s);
    s = fmaf(w[2], E::lo(h.y), s);
    s = fmaf(w[3], E::hi(h.y), s);
    s = fmaf(w[4], E::lo(h.z), s);
    s = fmaf(w[5], E::hi(h.z), s);
    s = fmaf(w[6], E::lo(h.w), s);
    s = fmaf(w[7], E::hi(h.w), s);
    return s;
}

template <typename T>
__device__ __forceinline__ void unpack8(const uint4& u, float (&f)[8]) {
    using E = Elem<T>;
    f[0] = E::lo(u.x);
    f[1] = E::hi(u.x);
    f[2] = E::lo(u.y);
    f[3] = E::hi(u.y);
    f[4] = E::lo(u.z);
    f[5] = E::hi(u.z);
    f[6] = E::lo(u.w);
    f[7] = E::hi(u.w);
}

template <typename T>
__device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
    using E = Elem<T>;
    return make_uint4(E::pack(f[0], f[1]), E::pack(f[2], f[3]), E::pack(f[4], f[5]),
                      E::pack(f[6], f[7]));
}

// Chunk c (features 8c..8c+7) of row m after the kept blocks of the head MLP cache, in order,
// each as the module path's element-wise ops rounded to T (DiffKeptTerm). The kept tensors are
// read-only while a kernel runs (the read-only path, no aliasing with shared memory).
template <typename T>
__device__ __forceinline__ void apply_kept(const DiffKeptList& kept, int m, int c, int K,
                                           float (&f)[8]) {
    for (int b = 0; b < kept.count; ++b) {
        const DiffKeptTerm& k = kept.block[b];
        float t[8];
        unpack8<T>(
            __ldg(reinterpret_cast<const uint4*>(static_cast<const T*>(k.term) +
                                                 static_cast<long long>(m % k.term_rows) * K) +
                  c),
            t);
        if (k.gate) {
            float g[8];
            unpack8<T>(
                __ldg(reinterpret_cast<const uint4*>(static_cast<const T*>(k.gate) +
                                                     static_cast<long long>(m) * k.gate_stride) +
                      c),
                g);
#pragma unroll
            for (int e = 0; e < 8; ++e) f[e] = Elem<T>::rnd(f[e] + Elem<T>::rnd(g[e] * t[e]));
        } else {
#pragma unroll
            for (int e = 0; e < 8; ++e) f[e] = Elem<T>::rnd(f[e] + t[e]);
        }
    }
}

// Row r of the tile into shared memory (chunks = K / 8 uint4 per row), by one warp.
// NormModulate: LayerNorm over K in float32 (biased variance, like at::layer_norm), optional
// affine, then * scale1 + shift, rounded once to T.
template <typename T, int P>
__device__ __forceinline__ void build_row(uint4* dst, const void* in, long long src_row, bool valid,
                                          int chunks, int K, bool norm, const void* ln_w,
                                          const void* ln_b, float eps, const void* shift,
                                          long long shift_off, const void* scale1,
                                          long long scale1_off, int lane) {
    const uint4 zero = make_uint4(0, 0, 0, 0);
    if (!valid) {
        for (int i = lane; i < chunks; i += 32) dst[i] = zero;
        return;
    }
    const uint4* src = reinterpret_cast<const uint4*>(static_cast<const T*>(in) + src_row * K);
    if (!norm) {
        for (int i = lane; i < chunks; i += 32) dst[i] = src[i];
        return;
    }
    // Every load of the row first (x, scale1, shift are independent): one memory latency per
    // row instead of two in a row.
    const uint4* sh = reinterpret_cast<const uint4*>(static_cast<const T*>(shift) + shift_off);
    const uint4* sc = reinterpret_cast<const uint4*>(static_cast<const T*>(scale1) + scale1_off);
    uint4 xv[P], scv[P], shv[P];
#pragma unroll
    for (int c = 0; c < P; ++c) {
        const int i = lane + 32 * c;
        xv[c] = i < chunks ? src[i] : zero;
        scv[c] = i < chunks ? sc[i] : zero;
        shv[c] = i < chunks ? sh[i] : zero;
    }
    float sum = 0.f;
#pragma unroll
    for (int c = 0; c < P; ++c) {
        float f[8];
        unpack8<T>(xv[c], f);
#pragma unroll
        for (int e = 0; e < 8; ++e) sum += f[e];
    }
    const float mean = warp_sum(sum) / static_cast<float>(K);
    float sq = 0.f;
#pragma unroll
    for (int c = 0; c < P; ++c) {
        if (lane + 32 * c < chunks) {
            float f[8];
            unpack8<T>(xv[c], f);
#pragma unroll
            for (int e = 0; e < 8; ++e) sq += (f[e] - mean) * (f[e] - mean);
        }
    }
    const float rstd = rsqrtf(warp_sum(sq) / static_cast<float>(K) + eps);
#pragma unroll
    for (int c = 0; c < P; ++c) {
        const int i = lane + 32 * c;
        if (i >= chunks) continue;
        float f[8], s[8], b[8];
        unpack8<T>(xv[c], f);
        unpack8<T>(scv[c], s);
        unpack8<T>(shv[c], b);
        float g[8] = {1, 1, 1, 1, 1, 1, 1, 1}, be[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        // Generic loads: the affine is in shared memory on the lean path, global otherwise.
        if (ln_w) unpack8<T>(reinterpret_cast<const uint4*>(ln_w)[i], g);
        if (ln_b) unpack8<T>(reinterpret_cast<const uint4*>(ln_b)[i], be);
#pragma unroll
        for (int e = 0; e < 8; ++e)
            f[e] = fmaf(fmaf((f[e] - mean) * rstd, g[e], be[e]), s[e], b[e]);
        dst[i] = pack8<T>(f);
    }
}

// The input projection of a tile's `live` rows into the tile, rounded to T: latent rows
// in[source(r)] (pk 16-byte chunks each, staged in xs) times the staged weight wps (K, pk) plus
// bias(j): two 8-product chains, added, plus the bias, as the separate projection kernel sums.
// One feature per thread, so neighbouring threads read neighbouring weight rows; also(r, j, v)
// sees every value (the folded projection writes its own features out). The caller
// synchronises before reading the tile.
template <typename T, typename Source, typename Bias, typename Also>
__device__ __forceinline__ void project_tile(uint4* tile, uint4* xs, const uint4* wps,
                                             const void* in, Source source, int pk, int K, int live,
                                             Bias bias, Also also) {
    for (int i = threadIdx.x; i < live * pk; i += kDiffThreads) {
        xs[i] = reinterpret_cast<const uint4*>(
            static_cast<const T*>(in) + static_cast<long long>(source(i / pk)) * pk * 8)[i % pk];
    }
    __syncthreads();
    T* tile_t = reinterpret_cast<T*>(tile);
    for (int j = threadIdx.x; j < K; j += kDiffThreads) {
        float w0[8], w1[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        unpack8<T>(wps[j * pk], w0);
        if (pk > 1) unpack8<T>(wps[j * pk + 1], w1);
        const float b = bias(j);
        for (int r = 0; r < live; ++r) {
            float s = dot8<T>(w0, xs[r * pk]);
            if (pk > 1) s = s + dot8<T>(w1, xs[r * pk + 1]);
            const float v = s + b;
            Elem<T>::store(tile_t, static_cast<long long>(r) * K + j, v);
            also(r, j, v);
        }
    }
}

// One level of the reduce-scatter: lanes exchange the half of a[0, 2*O) they do not keep with
// the lane O apart; afterwards a[0, O) holds sums over both lanes. O is a template argument so
// every index is a constant (a run-time index would move the array to local memory).
template <int O, int MT>
__device__ __forceinline__ void reduce_level(float (&a)[MT], int lane) {
    const bool upper = (lane & O) != 0;
#pragma unroll
    for (int i = 0; i < O; ++i) {
        const float send = upper ? a[i] : a[i + O];
        const float keep = upper ? a[i + O] : a[i];
        a[i] = keep + __shfl_xor_sync(0xffffffffu, send, O);
    }
    if constexpr (O > 1) reduce_level<O / 2, MT>(a, lane);
}

// acc[r] summed over the warp, scattered: afterwards lane l holds row (l % MT)'s total
// (MT - 1 shuffles for the rows, then log2(32 / MT) for the lanes that share a row).
template <int MT>
__device__ __forceinline__ float reduce_scatter(float (&a)[MT], int lane) {
    static_assert(MT >= 2 && MT <= 32 && (MT & (MT - 1)) == 0, "MT: a power of two <= 32");
    reduce_level<MT / 2, MT>(a, lane);
    float v = a[0];
#pragma unroll
    for (int o = MT; o < 32; o *= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Two CTAs per SM (<= 128 registers): the next kernel's CTAs fit beside this one's, so its
// launch and weight loads overlap this kernel (programmatic dependent launch).
// Shared memory of a linear-layer CTA: the row tile, the staged LayerNorm affine, and with the
// folded projection (proj_k latent features) its input rows and weight.
inline size_t linear_smem(int mt, int K, size_t elem, int proj_k = 0) {
    return (static_cast<size_t>(mt) * K + 2 * static_cast<size_t>(K)) * elem +
           (proj_k > 0 ? static_cast<size_t>(mt) * 2 * sizeof(uint4) +
                             static_cast<size_t>(K) * proj_k * elem
                       : 0);
}

// PROJ: the input projection folded in (DiffLinearParams::proj_*; instantiated for MT = 8).
template <typename T, int MT, int P, bool PROJ>
__global__ void __launch_bounds__(kDiffThreads, 2) linear_kernel(const DiffLinearParams p) {
    extern __shared__ uint4 smem[];
    using E = Elem<T>;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int j = blockIdx.x * kWarps + warp;  // this warp's output feature
    const int chunks = p.K / 8;
    uint4* tile = smem;                              // MT rows x K/8 chunks
    uint4* ln_s = tile + MT * chunks;                // LayerNorm weight, then bias (lean)
    [[maybe_unused]] uint4* xs = ln_s + 2 * chunks;  // PROJ: MT rows x <= 2 latent chunks
    [[maybe_unused]] uint4* wps = xs + MT * 2;       // PROJ: the projection weight (K, proj_k)
    const bool has_j = j < p.N;
    // The weight row (constant across the chain) before waiting for the previous kernel.
    uint4 w[P];
    const uint4* wrow = reinterpret_cast<const uint4*>(static_cast<const T*>(p.weight) +
                                                       static_cast<long long>(has_j ? j : 0) * p.K);
#pragma unroll
    for (int c = 0; c < P; ++c) {
        const int i = lane + 32 * c;
        w[c] = has_j && i < chunks ? load_nc(wrow + i) : make_uint4(0, 0, 0, 0);
    }
    const float bias = has_j ? E::load(p.bias, j) : 0.f;
    const bool norm = PROJ || p.prologue == DiffPrologue::NormModulate;
    // Constants of the prologue before the wait as well: the LayerNorm affine into shared
    // memory (lean), the projection's weight rows of this thread's features into registers.
    const void* ln_w = p.ln_weight;
    const void* ln_b = p.ln_bias;
    const bool stage_ln = norm && p.lean && (ln_w || ln_b);
    if (stage_ln) {
        for (int i = threadIdx.x; i < chunks; i += kDiffThreads) {
            if (ln_w) ln_s[i] = __ldg(reinterpret_cast<const uint4*>(ln_w) + i);
            if (ln_b) ln_s[chunks + i] = __ldg(reinterpret_cast<const uint4*>(ln_b) + i);
        }
        if (ln_w) ln_w = ln_s;
        if (ln_b) ln_b = ln_s + chunks;
    }
    [[maybe_unused]] const int pk = PROJ ? p.proj_k / 8 : 0;  // latent row chunks (1 or 2)
    if constexpr (PROJ) {
        const uint4* src = static_cast<const uint4*>(p.proj_weight);
        for (int i = threadIdx.x; i < p.K * pk; i += kDiffThreads) wps[i] = __ldg(src + i);
    }
    if (PROJ || stage_ln) __syncthreads();
    // The gate rows of the first tile (the modulations were written before the first kernel of
    // the chain, which every kernel that starts early has already waited for: see below).
    const bool gated = p.epilogue == DiffEpilogue::BiasGateResid;
    // Row tiles are spread over blockIdx.y (then looped): a CTA normalises only its own rows.
    const int first = blockIdx.y * MT, step = MT * gridDim.y;
    float gate = 0.f;
    if (gated && has_j && lane < MT && first + lane < p.rows)
        gate = E::load(p.gate, static_cast<long long>(first + lane) * p.gate_stride + j);
    // Wait for the previous kernel, then let the next one start: it can only start once this
    // one is past its wait, so whatever it reads before its own wait was written before the
    // kernel before this one finished (weights, modulations, noise).
    pdl_wait();
    pdl_launch_dependents();

    for (int t0 = first; t0 < p.rows; t0 += step) {
        // Rows of this tile that exist (the dot products skip the others on the lean path).
        const int live = min(MT, p.rows - t0);
        if constexpr (PROJ) {
            // h = latents W_in^T + b_in for the tile's rows, into the tile (rounded to T as the
            // separate projection kernel stores it, with its sums: two 8-product chains, added,
            // plus the bias); the features this CTA owns also go to proj_out (the residual).
            project_tile<T>(
                tile, xs, wps, p.in, [&](int r) { return (t0 + r) % p.in_rows; }, pk, p.K, live,
                [&](int j) { return E::load(p.proj_bias, j); },
                [&](int r, int j, float v) {
                    if (j / kWarps == static_cast<int>(blockIdx.x))
                        E::store(p.proj_out, static_cast<long long>(t0 + r) * p.K + j, v);
                });
            __syncthreads();
        }
        for (int r = warp; r < MT; r += kWarps) {
            const int m = t0 + r;
            const bool valid = m < p.rows;
            // PROJ: the row is normalised in place in the tile.
            const void* in = PROJ ? static_cast<const void*>(tile) : p.in;
            const long long src = PROJ ? r : norm ? m : (valid ? m % p.in_rows : 0);
            build_row<T, P>(tile + r * chunks, in, src, valid, chunks, p.K, norm, ln_w, ln_b,
                            p.ln_eps, p.shift, static_cast<long long>(m) * p.shift_stride, p.scale1,
                            static_cast<long long>(m) * p.scale1_stride, lane);
        }
        // The residual (written by the previous kernel) and later tiles' gates, loaded before
        // the dot products so their latency hides behind them.
        const int me = t0 + lane;
        float resid = 0.f;
        if (gated && has_j && lane < MT && me < p.rows) {
            const long long o = static_cast<long long>(me) * p.N + j;
            resid = E::load(p.resid, o);
            if (t0 > first) gate = E::load(p.gate, static_cast<long long>(me) * p.gate_stride + j);
        }
        __syncthreads();
        float acc[MT];
#pragma unroll
        for (int r = 0; r < MT; ++r) acc[r] = 0.f;
        const int used = p.lean ? live : MT;  // rows past `live` only add zeros
#pragma unroll
        for (int c = 0; c < P; ++c) {
            const int i = lane + 32 * c;
            if (i < chunks) {
                float wf[8];
                unpack8<T>(w[c], wf);
#pragma unroll
                for (int r = 0; r < MT; ++r)
                    if (r < used) acc[r] += dot8<T>(wf, tile[r * chunks + i]);
            }
        }
        const float v = reduce_scatter<MT>(acc, lane) + bias;
        const int m = t0 + lane;
        if (has_j && lane < MT && m < p.rows) {
            const long long o = static_cast<long long>(m) * p.N + j;
            float y = v;
            if (p.epilogue == DiffEpilogue::BiasSilu) {
                y = v / (1.f + __expf(-v));
            } else if (gated) {
                y = fmaf(gate, v, resid);
                if (p.keep_mlp) E::store(p.keep_mlp, o, v);
                if (p.keep_change) E::store(p.keep_change, o, E::rnd(y) - resid);
            }
            E::store(p.out, o, y);
        }
        __syncthreads();  // the tile is rebuilt for the next rows
    }
}

// What final_kernel computes (a template argument).
enum FinalKind : int {
    kFinalPlain = 0,       // the final layer of rows read from DiffFinalParams::in
    kFinalCached = 1,      // CACHED: rows built from the latents (diff_cached_step)
    kFinalCachedRows = 2,  // CACHED, one CTA per group of rows computing every channel
};
// Rows of one CTA of kFinalCachedRows: its outputs (2C <= 32 features a row) share the
// final kernel's shared array of 2 * kDiffMaxRows floats.
constexpr int kFinalRowsPerCta = 2 * kDiffMaxRows / 32;

// Per channel: one CTA per latent channel c: outputs c (eps) and C + c (variance) of every row,
// then the posterior update of x[:, c].
// Only C CTAs: one per SM is plenty, so the register cap is the single-CTA one (no spills).
// CACHED (diff_cached_step): a step of the head MLP cache that replays every block, so each
// CTA builds the final layer's input rows itself from the latents (input projection, then the
// kept blocks; DiffFinalParams::proj_*): the whole reverse step in one kernel.
// kFinalCachedRows: each CTA builds its group's rows once and computes all 2C outputs of them
// (warp w: features w, w + 8, ...), so no row is built by C CTAs; the same sums in the same
// order per output, hence the same bits as per channel.
template <typename T, int MT, int P, int KIND>
__global__ void __launch_bounds__(kDiffThreads, 1) final_kernel(const DiffFinalParams p) {
    constexpr bool CACHED = KIND != kFinalPlain;
    constexpr bool ROWS = KIND == kFinalCachedRows;
    constexpr int FW = ROWS ? 32 / kWarps : 1;  // output features per warp
    extern __shared__ uint4 tile[];
    // Per channel: outs[f * kDiffMaxRows + row], f 0 eps / 1 variance; ROWS:
    // outs[feature * kFinalRowsPerCta + local row].
    __shared__ float outs[2 * kDiffMaxRows];
    using E = Elem<T>;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int c = ROWS ? 0 : static_cast<int>(blockIdx.x);
    const int f = warp & 1;  // per channel: 0 eps feature c, 1 variance feature C + c
    auto feature_of = [&](int u) { return ROWS ? warp + kWarps * u : (f == 0 ? c : p.C + c); };
    const int chunks = p.K / 8;
    // The warp's weight rows in registers before the wait, except for ROWS with rows wider than
    // 1024 (four rows of them would spill): those load each feature's row when it is used.
    constexpr bool PRELOAD = !ROWS || P <= 4;
    constexpr int FR = PRELOAD ? FW : 1;
    uint4 w[FR][P];
    float bias[FR];
    auto load_w = [&](int u, int slot) {
        const int feature = feature_of(u);
        const bool has = feature < 2 * p.C;
        const uint4* wrow = reinterpret_cast<const uint4*>(
            static_cast<const T*>(p.weight) + static_cast<long long>(has ? feature : 0) * p.K);
#pragma unroll
        for (int k = 0; k < P; ++k) {
            const int i = lane + 32 * k;
            w[slot][k] = has && i < chunks ? load_nc(wrow + i) : make_uint4(0, 0, 0, 0);
        }
        bias[slot] = has ? E::load(p.bias, feature) : 0.f;
    };
    if constexpr (PRELOAD) {
#pragma unroll
        for (int u = 0; u < FW; ++u) load_w(u, u);
    }
    [[maybe_unused]] const int pk = CACHED ? p.proj_k / 8 : 0;    // latent chunks (1 or 2)
    [[maybe_unused]] uint4* wps = tile + MT * chunks;             // the projection weight (K, pk)
    [[maybe_unused]] uint4* xs = wps + p.K * pk;                  // the tile's latent rows
    [[maybe_unused]] T* pbs = reinterpret_cast<T*>(xs + MT * 2);  // the projection bias (K)
    if constexpr (CACHED) {
        const uint4* src = static_cast<const uint4*>(p.proj_weight);
        for (int i = threadIdx.x; i < p.K * pk; i += kDiffThreads) wps[i] = __ldg(src + i);
        const T* pb = static_cast<const T*>(p.proj_bias);
        for (int i = threadIdx.x; i < p.K; i += kDiffThreads) pbs[i] = pb[i];
    }
    pdl_wait();
    pdl_launch_dependents();

    // The rows of this CTA (DiffFinalParams::latents_per_cta): latents [n0, n0 + nl) and, with
    // both CFG halves, their unconditional rows; local row q -> global row row_of(q).
    const int N = p.latents;
    const bool halves = p.rows > N;  // Full / FullKeep: 2N rows
    const int n0 = p.latents_per_cta > 0 ? static_cast<int>(blockIdx.y) * p.latents_per_cta : 0;
    const int nl = p.latents_per_cta > 0 ? min(p.latents_per_cta, N - n0) : N;
    const int rows = halves ? 2 * nl : nl;
    auto row_of = [&](int q) { return q < nl ? n0 + q : N + n0 + (q - nl); };

    for (int t0 = 0; t0 < rows; t0 += MT) {
        if constexpr (CACHED) {
            // h = x[m % N] W_in^T + b_in for the tile's rows, as the folded projection.
            const int live = min(MT, rows - t0);
            project_tile<T>(
                tile, xs, wps, p.x, [&](int r) { return row_of(t0 + r) % N; }, pk, p.K, live,
                [&](int j) { return static_cast<float>(pbs[j]); }, [](int, int, float) {});
            // The kept blocks: the same thread owns the same (row, chunk) items for every block
            // (no barrier between blocks); kBatch items at once, so each block costs one round
            // trip to L2 rather than one per item.
            __syncthreads();
            // Registers: wider rows hold more weights, ROWS the weights of four features.
            constexpr int kBatch = ROWS ? 2 : P <= 4 ? 8 : 4;
            const int items = live * chunks;
            for (int base = threadIdx.x; base < items; base += kBatch * kDiffThreads) {
                float h[kBatch][8];
#pragma unroll
                for (int q = 0; q < kBatch; ++q) {
                    const int it = base + q * kDiffThreads;
                    if (it < items) unpack8<T>(tile[it], h[q]);
                }
                for (int b = 0; b < p.kept.count; ++b) {
                    const DiffKeptTerm& k = p.kept.block[b];
                    uint4 tv[kBatch], gv[kBatch];
#pragma unroll
                    for (int q = 0; q < kBatch; ++q) {
                        const int it = base + q * kDiffThreads;
                        if (it >= items) continue;
                        const int m = row_of(t0 + it / chunks), c = it % chunks;
                        tv[q] = __ldg(reinterpret_cast<const uint4*>(
                                          static_cast<const T*>(k.term) +
                                          static_cast<long long>(m % k.term_rows) * p.K) +
                                      c);
                        if (k.gate)
                            gv[q] = __ldg(reinterpret_cast<const uint4*>(
                                              static_cast<const T*>(k.gate) +
                                              static_cast<long long>(m) * k.gate_stride) +
                                          c);
                    }
#pragma unroll
                    for (int q = 0; q < kBatch; ++q) {
                        if (base + q * kDiffThreads >= items) continue;
                        float t[8];
                        unpack8<T>(tv[q], t);
                        if (k.gate) {
                            float g[8];
                            unpack8<T>(gv[q], g);
#pragma unroll
                            for (int e = 0; e < 8; ++e)
                                h[q][e] = E::rnd(h[q][e] + E::rnd(g[e] * t[e]));
                        } else {
#pragma unroll
                            for (int e = 0; e < 8; ++e) h[q][e] = E::rnd(h[q][e] + t[e]);
                        }
                    }
                }
#pragma unroll
                for (int q = 0; q < kBatch; ++q) {
                    const int it = base + q * kDiffThreads;
                    if (it < items) tile[it] = pack8<T>(h[q]);
                }
            }
            __syncthreads();
        }
        for (int r = warp; r < MT; r += kWarps) {
            const bool valid = t0 + r < rows;
            const int m = valid ? row_of(t0 + r) : 0;
            // CACHED: the row is normalised in place in the tile.
            build_row<T, P>(tile + r * chunks, CACHED ? static_cast<const void*>(tile) : p.in,
                            CACHED ? r : m, valid, chunks, p.K, true, nullptr, nullptr, p.ln_eps,
                            p.shift, static_cast<long long>(m) * p.shift_stride, p.scale1,
                            static_cast<long long>(m) * p.scale1_stride, lane);
        }
        __syncthreads();
        auto dot_row = [&](int slot, int r) {
            float s = 0.f;
#pragma unroll
            for (int k = 0; k < P; ++k) {
                const int i = lane + 32 * k;
                if (i < chunks) {
                    float wf[8];
                    unpack8<T>(w[slot][k], wf);
                    s += dot8<T>(wf, tile[r * chunks + i]);
                }
            }
            return warp_sum(s) + bias[slot];
        };
        if constexpr (ROWS) {
#pragma unroll
            for (int u = 0; u < FW; ++u) {
                if (feature_of(u) >= 2 * p.C) continue;
                if constexpr (!PRELOAD) load_w(u, 0);
                const int slot = PRELOAD ? u : 0;
                for (int r = 0; r < MT && t0 + r < rows; ++r) {
                    const float v = dot_row(slot, r);
                    if (lane == 0) outs[feature_of(u) * kFinalRowsPerCta + t0 + r] = v;
                }
            }
        } else {
            for (int r = warp >> 1; r < MT && t0 + r < rows; r += kWarps / 2) {
                const float v = dot_row(0, r);
                if (lane == 0) outs[f * kDiffMaxRows + t0 + r] = v;
            }
        }
        __syncthreads();
    }

    void* x_out = p.x_out ? p.x_out : p.x;
    // Output f (0 eps, 1 variance) of channel ch for local row r.
    auto out_at = [&](int f_, int ch, int r) {
        return ROWS ? outs[(f_ * p.C + ch) * kFinalRowsPerCta + r] : outs[f_ * kDiffMaxRows + r];
    };
    for (int i = threadIdx.x; i < nl * (ROWS ? p.C : 1); i += kDiffThreads) {
        const int q = ROWS ? i / p.C : i, ch = ROWS ? i % p.C : c;
        const int n = n0 + q;  // outs are by local row: latent q, its unconditional row nl + q
        const float cond = out_at(0, ch, q);
        float eps = cond;
        if (p.mode != DiffCfg::None) {
            float uncond;
            if (p.mode == DiffCfg::Cached) {
                uncond = cond - E::load(p.delta, static_cast<long long>(n) * p.C + ch);
            } else {
                uncond = out_at(0, ch, nl + q);
                if (p.mode == DiffCfg::FullKeep)
                    E::store(p.delta, static_cast<long long>(n) * p.C + ch, cond - uncond);
            }
            eps = uncond + *p.cfg * (cond - uncond);
        }
        const float frac = (out_at(1, ch, q) + 1.f) * 0.5f;
        const float log_var = frac * p.log_beta + (1.f - frac) * p.log_var_clipped;
        const long long xi = static_cast<long long>(n) * p.C + ch;
        const float x = E::load(p.x, xi);
        const float x0 = p.sqrt_recip_ac * x - p.sqrt_recipm1_ac * eps;
        float next = p.coef1 * x0 + p.coef2 * x;
        if (!p.last) {
            const float z = E::load(p.noise, static_cast<long long>(n) * p.noise_stride + ch);
            next += __expf(0.5f * log_var) * z * p.temperature;
        }
        E::store(x_out, xi, next);
    }
}

// diff_apply_kept: one thread per 16-byte chunk of h.
template <typename T>
__global__ void __launch_bounds__(kDiffThreads) apply_kernel(const DiffApplyParams p) {
    const int chunks = p.K / 8;
    const long long i = static_cast<long long>(blockIdx.x) * kDiffThreads + threadIdx.x;
    pdl_wait();
    pdl_launch_dependents();
    if (i >= static_cast<long long>(p.rows) * chunks) return;
    uint4* hp = static_cast<uint4*>(p.h) + i;
    float f[8];
    unpack8<T>(*hp, f);
    apply_kept<T>(p.kept, static_cast<int>(i / chunks), static_cast<int>(i % chunks), p.K, f);
    *hp = pack8<T>(f);
}

// Raises the dynamic shared-memory limit of every instantiation once per device, on the first
// launch of this element type (normally an eager warm-up, not inside a graph capture).
template <typename T>
cudaError_t prepare_device() {
    static std::atomic<unsigned long long> done{0};
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    const unsigned long long bit = 1ull << (dev & 63);
    if (done.load() & bit) return cudaSuccess;
    const int most = static_cast<int>(linear_smem(32, kDiffMaxWidth, sizeof(T), 16));
    const void* kernels[] = {
#define VARSCOPE_DIFF_KERNELS(MT)                                            \
    reinterpret_cast<const void*>(linear_kernel<T, MT, 1, false>),           \
        reinterpret_cast<const void*>(linear_kernel<T, MT, 4, false>),       \
        reinterpret_cast<const void*>(linear_kernel<T, MT, 6, false>),       \
        reinterpret_cast<const void*>(linear_kernel<T, MT, 8, false>),       \
        reinterpret_cast<const void*>(final_kernel<T, MT, 1, kFinalPlain>),  \
        reinterpret_cast<const void*>(final_kernel<T, MT, 4, kFinalPlain>),  \
        reinterpret_cast<const void*>(final_kernel<T, MT, 6, kFinalPlain>),  \
        reinterpret_cast<const void*>(final_kernel<T, MT, 8, kFinalPlain>),  \
        reinterpret_cast<const void*>(final_kernel<T, MT, 1, kFinalCached>), \
        reinterpret_cast<const void*>(final_kernel<T, MT, 4, kFinalCached>), \
        reinterpret_cast<const void*>(final_kernel<T, MT, 6, kFinalCached>), \
        reinterpret_cast<const void*>(final_kernel<T, MT, 8, kFinalCached>)
#define VARSCOPE_DIFF_ROWS_KERNELS(MT)                                           \
    reinterpret_cast<const void*>(final_kernel<T, MT, 1, kFinalCachedRows>),     \
        reinterpret_cast<const void*>(final_kernel<T, MT, 4, kFinalCachedRows>), \
        reinterpret_cast<const void*>(final_kernel<T, MT, 6, kFinalCachedRows>), \
        reinterpret_cast<const void*>(final_kernel<T, MT, 8, kFinalCachedRows>)
        VARSCOPE_DIFF_KERNELS(8),
        VARSCOPE_DIFF_KERNELS(16),
        VARSCOPE_DIFF_KERNELS(32),
        VARSCOPE_DIFF_ROWS_KERNELS(8),
        VARSCOPE_DIFF_ROWS_KERNELS(16),
#undef VARSCOPE_DIFF_KERNELS
#undef VARSCOPE_DIFF_ROWS_KERNELS
        reinterpret_cast<const void*>(linear_kernel<T, 8, 1, true>),
        reinterpret_cast<const void*>(linear_kernel<T, 8, 4, true>),
        reinterpret_cast<const void*>(linear_kernel<T, 8, 6, true>),
        reinterpret_cast<const void*>(linear_kernel<T, 8, 8, true>)};
    for (const void* k : kernels) {
        e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
        if (e != cudaSuccess) return e;
    }
    done.fetch_or(bit);
    return cudaSuccess;
}

template <typename K>
cudaError_t launch(K kernel, dim3 grid, size_t smem, bool pdl, cudaStream_t stream,
                   const void* params_ptr) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(kDiffThreads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
    void* args[] = {const_cast<void*>(params_ptr)};
    const cudaError_t e = cudaLaunchKernelExC(&cfg, reinterpret_cast<const void*>(kernel), args);
    return e != cudaSuccess ? e : cudaGetLastError();
}

inline int tile_rows(int rows) {
    return rows <= 8 ? 8 : rows <= 16 ? 16 : 32;
}

// 16-byte chunks of a row per lane, as a template argument: registers for K <= 256, 1024,
// 1536, 2048 (a row's weights, input, scale and shift stay in registers without spilling).
inline int chunks_per_lane(int K) {
    return K <= 256 ? 1 : K <= 1024 ? 4 : K <= 1536 ? 6 : 8;
}

template <typename T, int MT, bool PROJ = false>
cudaError_t launch_linear_mt(const DiffLinearParams& p, dim3 grid, size_t smem, cudaStream_t s) {
    switch (chunks_per_lane(p.K)) {
        case 1:
            return launch(linear_kernel<T, MT, 1, PROJ>, grid, smem, p.pdl, s, &p);
        case 4:
            return launch(linear_kernel<T, MT, 4, PROJ>, grid, smem, p.pdl, s, &p);
        case 6:
            return launch(linear_kernel<T, MT, 6, PROJ>, grid, smem, p.pdl, s, &p);
        default:
            return launch(linear_kernel<T, MT, 8, PROJ>, grid, smem, p.pdl, s, &p);
    }
}

template <typename T, int MT, int KIND>
cudaError_t launch_final_mt(const DiffFinalParams& p, dim3 grid, size_t smem, cudaStream_t s) {
    switch (chunks_per_lane(p.K)) {
        case 1:
            return launch(final_kernel<T, MT, 1, KIND>, grid, smem, p.pdl, s, &p);
        case 4:
            return launch(final_kernel<T, MT, 4, KIND>, grid, smem, p.pdl, s, &p);
        case 6:
            return launch(final_kernel<T, MT, 6, KIND>, grid, smem, p.pdl, s, &p);
        default:
            return launch(final_kernel<T, MT, 8, KIND>, grid, smem, p.pdl, s, &p);
    }
}

template <typename T, int KIND>
cudaError_t launch_final_tiles(const DiffFinalParams& p, int mt, dim3 grid, size_t smem,
                               cudaStream_t s) {
    switch (mt) {
        case 8:
            return launch_final_mt<T, 8, KIND>(p, grid, smem, s);
        case 16:
            return launch_final_mt<T, 16, KIND>(p, grid, smem, s);
        default:
            if constexpr (KIND == kFinalCachedRows)
                return cudaErrorInvalidValue;  // <= 16 rows
            else
                return launch_final_mt<T, 32, KIND>(p, grid, smem, s);
    }
}

template <typename T>
cudaError_t launch_linear(const DiffLinearParams& p, cudaStream_t stream) {
    if (p.K % 8 != 0 || p.K > kDiffMaxWidth || p.rows < 1 || p.N < 1 || p.in_rows < 1)
        return cudaErrorInvalidValue;
    const bool proj = p.proj_weight != nullptr;
    if (proj && (p.N != p.K || (p.proj_k != 8 && p.proj_k != 16) || p.proj_bias == nullptr ||
                 p.proj_out == nullptr || p.prologue != DiffPrologue::NormModulate))
        return cudaErrorInvalidValue;
    const cudaError_t prep = prepare_device<T>();
    if (prep != cudaSuccess) return prep;
    if (p.row_split || proj) {
        // Tiles of 8 rows, one per blockIdx.y (up to 8, then each CTA loops), so more
        // rows cost more CTAs (each reads the weights again, from L2) instead of a longer
        // serial prologue and dot-product loop per CTA. The lanes' sums are added in another
        // order than with 16/32-row tiles (float32 reassociation).
        // The folded projection always takes this tiling (its caller falls back to two kernels
        // where the unfolded chain would use 16/32-row tiles).
        constexpr int mt = 8;
        const size_t smem = linear_smem(mt, p.K, sizeof(T), proj ? p.proj_k : 0);
        const dim3 grid((p.N + kWarps - 1) / kWarps, std::min((p.rows + mt - 1) / mt, 8));
        return proj ? launch_linear_mt<T, mt, true>(p, grid, smem, stream)
                    : launch_linear_mt<T, mt>(p, grid, smem, stream);
    }
    const int mt = tile_rows(p.rows);
    const size_t smem = linear_smem(mt, p.K, sizeof(T));
    const dim3 grid((p.N + kWarps - 1) / kWarps);
    switch (mt) {
        case 8:
            return launch_linear_mt<T, 8>(p, grid, smem, stream);
        case 16:
            return launch_linear_mt<T, 16>(p, grid, smem, stream);
        default:
            return launch_linear_mt<T, 32>(p, grid, smem, stream);
    }
}

template <typename T>
cudaError_t launch_final(const DiffFinalParams& p, cudaStream_t stream) {
    // The per-channel layouts keep two floats a row in shared memory; all_channels a CTA's.
    if (p.K % 8 != 0 || p.K > kDiffMaxWidth || p.rows < 1 ||
        (p.rows > kDiffMaxRows && !p.all_channels) || p.C < 1 || p.latents < 1)
        return cudaErrorInvalidValue;
    const bool cached = p.proj_weight != nullptr;
    if (cached && ((p.proj_k != 8 && p.proj_k != 16) || p.proj_k != p.C || !p.proj_bias ||
                   p.kept.count < 0 || p.kept.count > kDiffMaxKept || p.x_out == p.x))
        return cudaErrorInvalidValue;
    if (p.latents_per_cta < 0) return cudaErrorInvalidValue;
    // Rows per CTA: all, or with the rows split over blockIdx.y a group's latents (both CFG
    // halves when the step has 2N rows).
    const int per = p.latents_per_cta;
    const int groups = per > 0 ? (p.latents + per - 1) / per : 1;
    const int cta_rows = per > 0 ? (p.rows > p.latents ? 2 : 1) * std::min(per, p.latents) : p.rows;
    if (p.all_channels && (!cached || per < 1 || cta_rows > kFinalRowsPerCta || 2 * p.C > 32))
        return cudaErrorInvalidValue;
    const cudaError_t prep = prepare_device<T>();
    if (prep != cudaSuccess) return prep;
    const int mt = tile_rows(cta_rows);
    // The row tile, and with CACHED the projection weight, the tile's latent rows and the
    // projection bias.
    const size_t smem =
        (static_cast<size_t>(mt) * p.K + (cached ? static_cast<size_t>(p.K) * (p.proj_k + 1) : 0)) *
            sizeof(T) +
        (cached ? static_cast<size_t>(mt) * 2 * sizeof(uint4) : 0);
    if (p.all_channels)
        return launch_final_tiles<T, kFinalCachedRows>(p, mt, dim3(1, groups), smem, stream);
    const dim3 grid(p.C, groups);
    return cached ? launch_final_tiles<T, kFinalCached>(p, mt, grid, smem, stream)
                  : launch_final_tiles<T, kFinalPlain>(p, mt, grid, smem, stream);
}

template <typename T>
cudaError_t launch_apply(const DiffApplyParams& p, cudaStream_t stream) {
    if (p.K % 8 != 0 || p.rows < 1 || p.kept.count < 0 || p.kept.count > kDiffMaxKept)
        return cudaErrorInvalidValue;
    const long long chunks = static_cast<long long>(p.rows) * (p.K / 8);
    const dim3 grid(static_cast<unsigned>((chunks + kDiffThreads - 1) / kDiffThreads));
    return launch(apply_kernel<T>, grid, 0, p.pdl, stream, &p);
}

}  // namespace varscope::kernels::cuda::diffloss
