// Hopper (sm_90a) block-sparse attention for CSLA: attention variant 3 (the dispatch's default);
// BlockSparse + Output, bf16, head dim 64/128 only; every other case, and every non-Hopper GPU,
// runs the sm_80 kernels (variant 1).
//
// S = Q K^T and O += P V on warpgroup MMA (wgmma) straight from 128-byte-swizzled shared memory;
// P stays in registers as wgmma's A operand. K/V tiles arrive by cp.async (16-byte chunks,
// zero-filled past the end), visiting only the key blocks on the query block's list.
// Implementations (VARSCOPE_SM90_IMPL), one warpgroup (4 warps) per 64 query rows:
//   0: serial: load wait -> S -> softmax -> PV per tile (2 stages).
//   1, 2: overlapped (FlashAttention-3's intra-warpgroup pipelining): S_i = Q K_i^T is issued
//      together with PV_{i-1}; the softmax of S_i runs while PV_{i-1} is still on the tensor
//      cores. K and V arrive as separate cp.async groups, kStages - 1 tiles ahead (1: 2 stages,
//      2: 3 stages).
// and two warpgroups per 128 query rows sharing each loaded K/V tile (fewer L2 -> SM bytes):
//   3: serial per warpgroup, 3 stages.  4: as 3 with 1's overlap inside each warpgroup.
//   5: as 3 with 128-key steps (two union tiles per step), 2 stages.
// and 6: as 0 with a single K/V buffer, three 64-row CTAs per SM.
// Defaults (attention_cuda.cpp, measured on an H100): 6 at d128, 0 at d64. What bounds them is
// instruction issue and latency at low occupancy, not L2 bytes (3-5 halve the bytes and are
// slower); see bench/results/2026-11-25-h100/kernels_sm90_v2.md.
//
// Descriptor orientation for V (B operand, MN-major): CUTLASS's canonical 128B-swizzle MN-major
// layout ((64 elems, n panels), (8 rows, k groups)) puts the panel stride in LBO and the 8-row
// group stride in SBO; v_desc_swap = 1 swaps them (a device-side check only, expected wrong).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "kernels/cuda/attention_params.h"

namespace varscope::kernels::cuda::sm90 {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define VARSCOPE_SM90_WGMMA 1
#endif

template <int kHeadDim, int kStages>
struct Sm90Traits {
    static constexpr int kRows = 64;      // query rows per CTA (one warpgroup)
    static constexpr int kKeys = 64;      // keys per tile
    static constexpr int kThreads = 128;  // one warpgroup
    static constexpr int kTileBytes = kKeys * kHeadDim * 2;
    // Q + kStages x (K, V), plus 1 KiB so the base can be aligned for the 128-byte swizzle.
    static constexpr int kSmemBytes = kTileBytes * (1 + 2 * kStages) + 1024;
};

#ifdef VARSCOPE_SM90_WGMMA
// D (64 x 64, f32) += A (64 x 16, smem, K-major) * B (64 x 16, smem, K-major); zero_init: D = A*B.
__device__ __forceinline__ void wgmma_ss_m64n64(float (&d)[32], uint64_t da, uint64_t db,
                                                int zero_init) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%"
        "24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(zero_init ? 0 : 1));
}
// D (64 x 64, f32) += A (64 x 16, registers) * B (16 x 64, smem, MN-major: transposed).
__device__ __forceinline__ void wgmma_rs_m64n64_tb(float (&d)[32], const uint32_t (&a)[4],
                                                   uint64_t db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%"
        "24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
// D (64 x 128, f32) += A (64 x 16, registers) * B (16 x 128, smem, MN-major: transposed).
__device__ __forceinline__ void wgmma_rs_m64n128_tb(float (&d)[64], const uint32_t (&a)[4],
                                                    uint64_t db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%"
        "24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%"
        "46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
        "{%64,%65,%66,%67}, %68, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
          "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
          "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Pins a register's value to this point of the instruction stream (CUTLASS's
// warpgroup_fence_operand): reads of wgmma accumulators cannot be scheduled above the wait that
// precedes the fence, nor writes below a later issue.
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}
// Makes generic-proxy shared-memory writes (cp.async) visible to wgmma's async proxy.
__device__ __forceinline__ void fence_async_shared() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// Shared-memory matrix descriptor, 128-byte swizzle: start address, LBO, SBO (bytes >> 4).
// K-major operands use only the stride between 8-row groups (sbo); MN-major ones (V read as B)
// also the stride between 64-element panels (lbo).
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    uint64_t d = 0;
    d |= static_cast<uint64_t>((addr & 0x3FFFF) >> 4);
    d |= static_cast<uint64_t>((lbo >> 4) & 0x3FFF) << 16;
    d |= static_cast<uint64_t>((sbo >> 4) & 0x3FFF) << 32;
    d |= static_cast<uint64_t>(1) << 62;  // 128-byte swizzle
    return d;
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
    const int bytes = valid ? 16 : 0;  // 0: zero-fill (rows past the end)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Loads rows [row0, row0 + 64) of a (len x kHeadDim) matrix into a swizzled tile (zero-filled
// past len, and wholly when !use); kThreads threads share the copies (tid in [0, kThreads)).
// Layout: panels of 64 columns x rows x 128 bytes (kPanelBytes apart: 8 KiB for 64-row tiles,
// 16 KiB for implementation 5's 128-row ones, whose halves start at dst_row0 = 0 / 64), chunk
// index XOR-ed with the row within its 8-row group (1024-byte aligned base: the hardware's
// 128-byte swizzle). Each thread keeps one 16-byte column chunk and steps down the rows
// kThreads / kChunks at a time (a multiple of 8, so its swizzle phase never changes): per copy
// one address add and one bounds test. The first version walked a runtime-strided index with a
// division per copy; ncu showed the kernels bound by instruction issue (ALU pipe).
template <int kHeadDim, int kThreads = 128, int kPanelBytes = 64 * 128>
__device__ __forceinline__ void load_tile(uint32_t tile, const __nv_bfloat16* base, int64_t stride,
                                          int row0, int len, int tid = threadIdx.x,
                                          int dst_row0 = 0, bool use = true) {
    constexpr int kChunks = kHeadDim / 8, kRowsPerPass = kThreads / kChunks;
    static_assert(kThreads % kChunks == 0 && kRowsPerPass % 8 == 0 && 64 % kRowsPerPass == 0,
                  "each thread must keep its column chunk and swizzle phase");
    const int c = tid % kChunks, r0 = tid / kChunks;
    const int r = dst_row0 + r0;
    const uint32_t dst = tile + (c >> 3) * kPanelBytes + r * 128 + (((c & 7) ^ (r & 7)) << 4);
    const __nv_bfloat16* src = base + static_cast<int64_t>(row0 + r0) * stride + c * 8;
    const int64_t step = static_cast<int64_t>(kRowsPerPass) * stride;
#pragma unroll
    for (int pass = 0; pass < 64 / kRowsPerPass; ++pass) {
        const bool valid = use && row0 + r0 + pass * kRowsPerPass < len;
        // Past the end: zero bytes are read (src-size 0), so the address needs no clamping
        // (CUTLASS's zero-fill copy does the same).
        cp_async_16(dst + pass * kRowsPerPass * 128, src + pass * step, valid);
    }
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
}

// S = Q K^T for one 64 x 64 tile: k-steps of 16 along the head dim (32 bytes inside a panel,
// panels 8 KiB apart).
template <int kHeadDim>
__device__ __forceinline__ void issue_qk(float (&s)[32], uint32_t q_tile, uint32_t k_tile) {
#pragma unroll
    for (int ks = 0; ks < kHeadDim / 16; ++ks) {
        const uint32_t off = (ks >> 2) * (64 * 128) + (ks & 3) * 32;
        wgmma_ss_m64n64(s, smem_desc(q_tile + off, 16, 1024), smem_desc(k_tile + off, 16, 1024),
                        ks == 0);
    }
}

// O += P V: V is (keys x head dim) row-major, i.e. B stored MN-major. 16 keys per step = two
// 8-row groups (2 KiB); head-dim panels 8 KiB apart.
template <int kHeadDim>
__device__ __forceinline__ void issue_pv(float (&o)[kHeadDim / 2], const uint32_t (&pa)[4][4],
                                         uint32_t v_tile, int v_desc_swap) {
    const uint32_t lbo = v_desc_swap ? 1024 : 64 * 128, sbo = v_desc_swap ? 64 * 128 : 1024;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
        const uint64_t db = smem_desc(v_tile + kk * 2048, lbo, sbo);
        if constexpr (kHeadDim == 128)
            wgmma_rs_m64n128_tb(o, pa[kk], db);
        else
            wgmma_rs_m64n64_tb(o, pa[kk], db);
    }
}

// Softmax of one S tile in place (log2 units, scale folded into one FFMA per element): masks
// keys >= len_k, updates the running max / sum, leaves P = exp2(S * scale - max) in s and the
// factor by which O must be rescaled in corr. Thread rows: g and g + 8 of its warp's 16.
__device__ __forceinline__ void online_softmax(float (&s)[32], float (&row_max)[2],
                                               float (&row_sum)[2], float (&corr)[2], int key0,
                                               int len_k, float sl2, int t) {
    if (key0 + 64 > len_k) {
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                if (key0 + 8 * j + 2 * t + (e & 1) >= len_k) s[4 * j + e] = -INFINITY;
    }
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        tile_max[0] = fmaxf(tile_max[0], fmaxf(s[4 * j + 0], s[4 * j + 1]));
        tile_max[1] = fmaxf(tile_max[1], fmaxf(s[4 * j + 2], s[4 * j + 3]));
    }
    float neg_base[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffff, tile_max[r], 1));
        tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffff, tile_max[r], 2));
        const float m_new = fmaxf(row_max[r], tile_max[r]);
        const float m_use = m_new == -INFINITY ? 0.f : m_new;  // all masked so far: no inf - inf
        corr[r] = fast_exp2((row_max[r] - m_use) * sl2);
        row_max[r] = m_new;
        row_sum[r] *= corr[r];
        neg_base[r] = -m_use * sl2;
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float x = fast_exp2(fmaf(s[4 * j + e], sl2, neg_base[e >> 1]));
            s[4 * j + e] = x;
            row_sum[e >> 1] += x;
        }
    }
}

// P (fp32 accumulator layout) -> four 64 x 16 bf16 A fragments (mma.sync's A layout per warp).
__device__ __forceinline__ void pack_p(const float (&s)[32], uint32_t (&pa)[4][4]) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        pa[j >> 1][(j & 1) * 2 + 0] = pack_bf16(s[4 * j + 0], s[4 * j + 1]);
        pa[j >> 1][(j & 1) * 2 + 1] = pack_bf16(s[4 * j + 2], s[4 * j + 3]);
    }
}

template <int kHeadDim>
__device__ __forceinline__ void rescale_o(float (&o)[kHeadDim / 2], const float (&corr)[2]) {
#pragma unroll
    for (int j = 0; j < kHeadDim / 8; ++j) {
        o[4 * j + 0] *= corr[0];
        o[4 * j + 1] *= corr[0];
        o[4 * j + 2] *= corr[1];
        o[4 * j + 3] *= corr[1];
    }
}

// Finishes the row sums across the 4 threads of a row, normalises, stores O (and the natural-log
// LSE). Rows with no active key: O = 0, LSE = -inf.
template <int kHeadDim>
__device__ __forceinline__ void store_output(const AttentionParams& p, float (&o)[kHeadDim / 2],
                                             float (&row_max)[2], float (&row_sum)[2], int b, int h,
                                             int row0, int tid = threadIdx.x) {
    const int warp = tid / 32, lane = tid % 32;  // tid: thread index within the warpgroup
    const int g = lane / 4, t = lane % 4;
    float inv[2], lse2[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        row_sum[r] += __shfl_xor_sync(0xffffffff, row_sum[r], 1);
        row_sum[r] += __shfl_xor_sync(0xffffffff, row_sum[r], 2);
        inv[r] = row_sum[r] > 0.f ? 1.f / row_sum[r] : 0.f;
        lse2[r] = row_sum[r] > 0.f ? row_max[r] * p.scale_log2 + log2f(row_sum[r]) : -INFINITY;
    }
    auto* out = static_cast<__nv_bfloat16*>(p.o) + b * p.o_stride[0] + h * p.o_stride[1];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = row0 + warp * 16 + g + 8 * r;
        if (row >= p.len_q) continue;
        __nv_bfloat16* dst = out + static_cast<int64_t>(row) * p.o_stride[2];
#pragma unroll
        for (int j = 0; j < kHeadDim / 8; ++j) {
            const int col = 8 * j + 2 * t;
            *reinterpret_cast<__nv_bfloat162*>(dst + col) =
                __floats2bfloat162_rn(o[4 * j + 2 * r] * inv[r], o[4 * j + 2 * r + 1] * inv[r]);
        }
        if (p.lse != nullptr && t == 0)
            p.lse[(static_cast<int64_t>(b) * p.heads + h) * p.len_q + row] =
                lse2[r] * 0.6931471805599453f;
    }
}

struct TileList {
    const int32_t* list;
    int tiles_per_block, block_k, n_tiles, shift;  // shift = log2(tiles_per_block), -1 if none
    __device__ __forceinline__ int key0(int i) const {
        if (shift >= 0)  // block_k = 64 << shift: no integer division (a long SASS sequence)
            return list[i >> shift] * block_k + (i & ((1 << shift) - 1)) * 64;
        return list[i / tiles_per_block] * block_k + (i % tiles_per_block) * 64;
    }
};

__device__ __forceinline__ int log2_or_minus1(int x) {
    return (x & (x - 1)) == 0 ? __ffs(x) - 1 : -1;
}

__device__ __forceinline__ TileList tile_list(const AttentionParams& p, int row0) {
    const int qb = row0 / p.block_q;
    const int count = min(max(p.counts[qb], 0), p.list_stride);
    TileList l;
    l.list = p.lists + static_cast<int64_t>(qb) * p.list_stride;
    l.tiles_per_block = p.block_k / 64;
    l.block_k = p.block_k;
    l.n_tiles = count * l.tiles_per_block;
    l.shift = log2_or_minus1(l.tiles_per_block);
    return l;
}

// Implementation 0: serial per tile (2 stages of K+V, one cp.async group per tile).
template <int kHeadDim>
__global__ void __launch_bounds__(128, 1)
    csla_sm90_serial_kernel(const AttentionParams p, int v_desc_swap) {
    using T = Sm90Traits<kHeadDim, 2>;
    constexpr int kTile = T::kTileBytes;
    extern __shared__ unsigned char smem_raw[];
    const uint32_t smem = (smem_addr(smem_raw) + 1023) & ~1023u;
    const uint32_t q_tile = smem;
    auto k_tile = [&](int s) { return smem + kTile * (1 + 2 * s); };
    auto v_tile = [&](int s) { return smem + kTile * (2 + 2 * s); };

    const int qt = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int row0 = qt * T::kRows;
    const auto* q = static_cast<const __nv_bfloat16*>(p.q) + b * p.q_stride[0] + h * p.q_stride[1];
    const auto* k = static_cast<const __nv_bfloat16*>(p.k) + b * p.k_stride[0] + h * p.k_stride[1];
    const auto* v = static_cast<const __nv_bfloat16*>(p.v) + b * p.v_stride[0] + h * p.v_stride[1];
    const TileList tl = tile_list(p, row0);
    const int n_tiles = tl.n_tiles;

    load_tile<kHeadDim>(q_tile, q, p.q_stride[2], row0, p.len_q);
    if (n_tiles > 0) {
        const int key0 = tl.key0(0);
        load_tile<kHeadDim>(k_tile(0), k, p.k_stride[2], key0, p.len_k);
        load_tile<kHeadDim>(v_tile(0), v, p.v_stride[2], key0, p.len_k);
    }
    cp_async_commit();

    const int t = threadIdx.x % 4;
    float o[kHeadDim / 2];
#pragma unroll
    for (int i = 0; i < kHeadDim / 2; ++i) o[i] = 0.f;
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};

    for (int i = 0; i < n_tiles; ++i) {
        const int stage = i & 1;
        const int key0 = tl.key0(i);
        if (i + 1 < n_tiles) {  // prefetch the next active tile into the other stage
            const int next = tl.key0(i + 1);
            load_tile<kHeadDim>(k_tile(stage ^ 1), k, p.k_stride[2], next, p.len_k);
            load_tile<kHeadDim>(v_tile(stage ^ 1), v, p.v_stride[2], next, p.len_k);
        }
        cp_async_commit();
        cp_async_wait<1>();
        fence_async_shared();
        __syncthreads();

        float s[32];
        wgmma_fence();
        issue_qk<kHeadDim>(s, q_tile, k_tile(stage));
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(s);

        float corr[2];
        online_softmax(s, row_max, row_sum, corr, key0, p.len_k, p.scale_log2, t);
        rescale_o<kHeadDim>(o, corr);
        uint32_t pa[4][4];
        pack_p(s, pa);

        fence_regs(o);
        fence_regs(pa);
        wgmma_fence();
        issue_pv<kHeadDim>(o, pa, v_tile(stage), v_desc_swap);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(o);
        __syncthreads();  // this stage is reloaded by the next iteration's prefetch
    }
    cp_async_wait<0>();
    store_output<kHeadDim>(p, o, row_max, row_sum, b, h, row0);
}

// Implementations 1 and 2: S_i issued with PV_{i-1}; softmax_i overlaps PV_{i-1}.
// cp.async groups, in commit order: [Q, K0], [V0], [K1], [V1], ... ; iteration i commits
// K_{i+D} at its start and V_{i+D} at its end (D = kStages - 1, empty groups past the end), so
// at the top of iteration i the groups younger than K_i are V_i .. V_{i+D-1}: 2D - 1 of them.
template <int kHeadDim, int kStages>
__global__ void __launch_bounds__(128, 1)
    csla_sm90_overlap_kernel(const AttentionParams p, int v_desc_swap) {
    using T = Sm90Traits<kHeadDim, kStages>;
    constexpr int kTile = T::kTileBytes;
    constexpr int D = kStages - 1;
    extern __shared__ unsigned char smem_raw[];
    const uint32_t smem = (smem_addr(smem_raw) + 1023) & ~1023u;
    const uint32_t q_tile = smem;
    auto k_tile = [&](int s) { return smem + kTile * (1 + s); };
    auto v_tile = [&](int s) { return smem + kTile * (1 + kStages + s); };

    const int qt = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int row0 = qt * T::kRows;
    const auto* q = static_cast<const __nv_bfloat16*>(p.q) + b * p.q_stride[0] + h * p.q_stride[1];
    const auto* k = static_cast<const __nv_bfloat16*>(p.k) + b * p.k_stride[0] + h * p.k_stride[1];
    const auto* v = static_cast<const __nv_bfloat16*>(p.v) + b * p.v_stride[0] + h * p.v_stride[1];
    const TileList tl = tile_list(p, row0);
    const int n = tl.n_tiles;

    // keys[j] = first key of tile i + j (j = 0..D), valid while i + j < n; keys[D + 1] is the
    // next one read from the list one iteration ahead of its use.
    int keys[D + 2];
#pragma unroll
    for (int j = 0; j < D + 2; ++j) keys[j] = j < n ? tl.key0(j) : 0;

    load_tile<kHeadDim>(q_tile, q, p.q_stride[2], row0, p.len_q);
#pragma unroll
    for (int j = 0; j < D; ++j) {
        if (j < n) load_tile<kHeadDim>(k_tile(j), k, p.k_stride[2], keys[j], p.len_k);
        cp_async_commit();
        if (j < n) load_tile<kHeadDim>(v_tile(j), v, p.v_stride[2], keys[j], p.len_k);
        cp_async_commit();
    }

    const int t = threadIdx.x % 4;
    float o[kHeadDim / 2];
#pragma unroll
    for (int i = 0; i < kHeadDim / 2; ++i) o[i] = 0.f;
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
    uint32_t pa[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) pa[i][j] = 0u;

    int stage = 0;  // i % kStages
    for (int i = 0; i < n; ++i) {
        const int prev = stage == 0 ? kStages - 1 : stage - 1;  // (i - 1) % kStages
        cp_async_wait<2 * D - 1>();                             // K_i and V_{i-1} have landed
        fence_async_shared();
        __syncthreads();  // ... for every thread; and S_{i-1} is done with K[(i + D) % kStages]
        const int pre = prev;  // (i + D) % kStages
        const int key_pre = keys[D];
        if (i + D < n) load_tile<kHeadDim>(k_tile(pre), k, p.k_stride[2], key_pre, p.len_k);
        cp_async_commit();

        float s[32];
        fence_regs(o);
        fence_regs(pa);
        wgmma_fence();
        issue_qk<kHeadDim>(s, q_tile, k_tile(stage));
        wgmma_commit();
        if (i > 0) {
            issue_pv<kHeadDim>(o, pa, v_tile(prev), v_desc_swap);
            wgmma_commit();
            wgmma_wait<1>();  // S_i done, PV_{i-1} may still run
        } else {
            wgmma_wait<0>();
        }
        fence_regs(s);
        // The list entry for tile i + D + 2 (keys[D + 1] after the shift below), read one
        // iteration before its K load.
        const int key_next = i + D + 2 < n ? tl.key0(i + D + 2) : 0;

        float corr[2];
        online_softmax(s, row_max, row_sum, corr, keys[0], p.len_k, p.scale_log2, t);

        // ptxas schedules the wait below early within its basic block (it has no register
        // dependence on the softmax), which would serialise the softmax behind PV_{i-1}. A
        // branch on the row sums (which depend on every exponential) ends the block after them.
        fence_regs(s);
        fence_regs(row_sum);
        if ((__float_as_uint(row_sum[0]) & __float_as_uint(row_sum[1])) == 0xFFFFFFFFu)
            asm volatile("nanosleep.u32 0;");  // never taken (that NaN is not produced)
        wgmma_wait<0>();                       // PV_{i-1} done: O and the P registers are free
        fence_regs(o);
        fence_regs(pa);
        rescale_o<kHeadDim>(o, corr);
        pack_p(s, pa);

        __syncthreads();  // every warp is past PV_{i-1}: V[(i - 1) % kStages] may be reloaded
        if (i + D < n) load_tile<kHeadDim>(v_tile(pre), v, p.v_stride[2], key_pre, p.len_k);
        cp_async_commit();

#pragma unroll
        for (int j = 0; j < D; ++j) keys[j] = keys[j + 1];
        keys[D] = keys[D + 1];
        keys[D + 1] = key_next;
        stage = stage + 1 == kStages ? 0 : stage + 1;
    }
    if (n > 0) {
        const int last = stage == 0 ? kStages - 1 : stage - 1;  // (n - 1) % kStages
        cp_async_wait<0>();
        fence_async_shared();
        __syncthreads();
        fence_regs(o);
        fence_regs(pa);
        wgmma_fence();
        issue_pv<kHeadDim>(o, pa, v_tile(last), v_desc_swap);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(o);
    } else {
        cp_async_wait<0>();
    }
    store_output<kHeadDim>(p, o, row_max, row_sum, b, h, row0);
}
// Implementations 3 and 4: two warpgroups (256 threads) per 128 query rows share every loaded
// K/V tile. Warpgroup w owns rows [128 x + 64 w, +64) and their query block's list; the CTA walks
// the union of both lists (ascending key block, built in shared memory at the start), each
// warpgroup computing only the tiles on its own list; K/V tiles are loaded by all 256 threads.
// Same FLOPs as 64-row CTAs, fewer bytes: at block 128 both halves share one list (half the
// loads), at block 64 the union of two neighbouring CSLA lists is ~0.54 of their sum.
// Shared memory after the tiles: ownership bytes [2][n_kb] (16-byte padded), then the union's
// length and entries (kb | owners << 28, bit 0 = warpgroup 0).
//
// Builds the union; every thread of the CTA calls it (it has barriers). Returns its length.
__device__ __forceinline__ int pair_build_union(const AttentionParams& p, unsigned char* own,
                                                int32_t* uhead, int n_kb, int wg, int tid,
                                                bool has_rows, int row0) {
    for (int i = threadIdx.x; i < 2 * n_kb; i += 256) own[i] = 0;
    __syncthreads();
    if (has_rows) {
        const int qb = row0 / p.block_q;
        const int count = min(max(p.counts[qb], 0), p.list_stride);
        const int32_t* list = p.lists + static_cast<int64_t>(qb) * p.list_stride;
        for (int i = tid; i < count; i += 128) {
            const int kb = list[i];
            if (kb >= 0 && kb < n_kb) own[wg * n_kb + kb] = 1;
        }
    }
    __syncthreads();
    if (threadIdx.x < 32) {  // one warp compacts, ascending kb
        const int lane = threadIdx.x;
        int base = 0;
        for (int kb0 = 0; kb0 < n_kb; kb0 += 32) {
            const int kb = kb0 + lane;
            const int m = kb < n_kb ? own[kb] | (own[n_kb + kb] << 1) : 0;
            const unsigned ballot = __ballot_sync(0xffffffffu, m != 0);
            if (m != 0) uhead[1 + base + __popc(ballot & ((1u << lane) - 1u))] = kb | (m << 28);
            base += __popc(ballot);
        }
        if (lane == 0) uhead[0] = base;
    }
    __syncthreads();
    return uhead[0];
}

// Pointers and the union list of one pair CTA.
template <int kHeadDim, int kStages>
struct PairCta {
    static constexpr int kTile = Sm90Traits<kHeadDim, kStages>::kTileBytes;
    uint32_t smem, q_tile;
    int wg, tid, row0, tiles_per_block, block_k, n, shift;
    bool has_rows;
    const int32_t* ulist;
    const __nv_bfloat16 *q, *k, *v;

    __device__ __forceinline__ PairCta(const AttentionParams& p, unsigned char* smem_raw) {
        const uint32_t raw = smem_addr(smem_raw);
        smem = (raw + 1023) & ~1023u;
        wg = threadIdx.x / 128;
        tid = threadIdx.x % 128;
        q_tile = smem + kTile * wg;
        const int n_kb = (p.len_k + p.block_k - 1) / p.block_k;
        unsigned char* own = smem_raw + (smem - raw) + kTile * (2 + 2 * kStages);
        int32_t* uhead = reinterpret_cast<int32_t*>(own + ((2 * n_kb + 15) & ~15));
        const int h = blockIdx.y, b = blockIdx.z;
        row0 = blockIdx.x * 128 + 64 * wg;
        has_rows = row0 < p.len_q;
        q = static_cast<const __nv_bfloat16*>(p.q) + b * p.q_stride[0] + h * p.q_stride[1];
        k = static_cast<const __nv_bfloat16*>(p.k) + b * p.k_stride[0] + h * p.k_stride[1];
        v = static_cast<const __nv_bfloat16*>(p.v) + b * p.v_stride[0] + h * p.v_stride[1];
        tiles_per_block = p.block_k / 64;
        shift = log2_or_minus1(tiles_per_block);
        block_k = p.block_k;
        n = pair_build_union(p, own, uhead, n_kb, wg, tid, has_rows, row0) * tiles_per_block;
        ulist = uhead + 1;
    }
    __device__ __forceinline__ uint32_t k_tile(int s) const { return smem + kTile * (2 + s); }
    __device__ __forceinline__ uint32_t v_tile(int s) const {
        return smem + kTile * (2 + kStages + s);
    }
    __device__ __forceinline__ int entry(int i) const {
        return ulist[shift >= 0 ? i >> shift : i / tiles_per_block];
    }
    __device__ __forceinline__ int key0(int i) const {
        const int sub = shift >= 0 ? i & ((1 << shift) - 1) : i % tiles_per_block;
        return (entry(i) & 0x0FFFFFFF) * block_k + sub * 64;
    }
    // Uniform per warpgroup.
    __device__ __forceinline__ bool mine(int i) const { return ((entry(i) >> 28) >> wg) & 1; }
};

// Implementation 3: serial schedule per warpgroup (the two warpgroups interleave on the SM),
// one cp.async group per tile (K and V), kStages - 1 tiles ahead.
template <int kHeadDim, int kStages>
__global__ void __launch_bounds__(256, 1)
    csla_sm90_pair_kernel(const AttentionParams p, int v_desc_swap) {
    constexpr int D = kStages - 1;
    extern __shared__ unsigned char smem_raw[];
    const PairCta<kHeadDim, kStages> c(p, smem_raw);
    const int n = c.n;

    // cp.async groups: [Q0, Q1, tile 0], [tile 1], ..., one per tile (K and V), D ahead.
    load_tile<kHeadDim>(c.q_tile, c.q, p.q_stride[2], c.row0, p.len_q, c.tid);
#pragma unroll
    for (int j = 0; j < D; ++j) {
        if (j < n) {
            const int key0 = c.key0(j);
            load_tile<kHeadDim, 256>(c.k_tile(j), c.k, p.k_stride[2], key0, p.len_k, threadIdx.x);
            load_tile<kHeadDim, 256>(c.v_tile(j), c.v, p.v_stride[2], key0, p.len_k, threadIdx.x);
        }
        cp_async_commit();
    }

    const int t = c.tid % 4;
    float o[kHeadDim / 2];
#pragma unroll
    for (int i = 0; i < kHeadDim / 2; ++i) o[i] = 0.f;
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};

    int stage = 0;  // i % kStages
    for (int i = 0; i < n; ++i) {
        // Tile i + D goes into the stage tile i - 1 used (every warpgroup finished it: barrier
        // at the end of the previous iteration).
        if (i + D < n) {
            const int pre = stage == 0 ? kStages - 1 : stage - 1;
            const int key0 = c.key0(i + D);
            load_tile<kHeadDim, 256>(c.k_tile(pre), c.k, p.k_stride[2], key0, p.len_k, threadIdx.x);
            load_tile<kHeadDim, 256>(c.v_tile(pre), c.v, p.v_stride[2], key0, p.len_k, threadIdx.x);
        }
        cp_async_commit();
        cp_async_wait<D>();  // tile i (and the Q tiles) landed for this thread ...
        fence_async_shared();
        __syncthreads();  // ... and for every thread
        if (c.mine(i)) {
            float s[32];
            wgmma_fence();
            issue_qk<kHeadDim>(s, c.q_tile, c.k_tile(stage));
            wgmma_commit();
            wgmma_wait<0>();
            fence_regs(s);

            float corr[2];
            online_softmax(s, row_max, row_sum, corr, c.key0(i), p.len_k, p.scale_log2, t);
            rescale_o<kHeadDim>(o, corr);
            uint32_t pa[4][4];
            pack_p(s, pa);

            fence_regs(o);
            fence_regs(pa);
            wgmma_fence();
            issue_pv<kHeadDim>(o, pa, c.v_tile(stage), v_desc_swap);
            wgmma_commit();
            wgmma_wait<0>();
            fence_regs(o);
        }
        __syncthreads();  // both warpgroups are done with this stage
        stage = stage + 1 == kStages ? 0 : stage + 1;
    }
    cp_async_wait<0>();
    if (c.has_rows)
        store_output<kHeadDim>(p, o, row_max, row_sum, blockIdx.z, blockIdx.y, c.row0, c.tid);
}

// Implementation 4: as 3, with implementation 1's schedule inside each warpgroup: S_i is issued
// together with the PV of the warpgroup's previous tile and the softmax of S_i runs while that PV
// is on the tensor cores (in implementation 3 both warpgroups reach their softmax at the same
// time, after the shared barrier, and the tensor cores idle). A warpgroup's pending PV is always
// for union tile i - 1: issued in iteration i whether or not it owns tile i, so V stages are
// recycled exactly as in implementation 1. cp.async groups as there: [Q, K0], [V0], [K1], [V1],
// ...; iteration i commits K_{i+D} at its start and V_{i+D} at its end.
template <int kHeadDim, int kStages>
__global__ void __launch_bounds__(256, 1)
    csla_sm90_pair_overlap_kernel(const AttentionParams p, int v_desc_swap) {
    constexpr int D = kStages - 1;
    extern __shared__ unsigned char smem_raw[];
    const PairCta<kHeadDim, kStages> c(p, smem_raw);
    const int n = c.n;

    load_tile<kHeadDim>(c.q_tile, c.q, p.q_stride[2], c.row0, p.len_q, c.tid);
#pragma unroll
    for (int j = 0; j < D; ++j) {
        if (j < n)
            load_tile<kHeadDim, 256>(c.k_tile(j), c.k, p.k_stride[2], c.key0(j), p.len_k,
                                     threadIdx.x);
        cp_async_commit();
        if (j < n)
            load_tile<kHeadDim, 256>(c.v_tile(j), c.v, p.v_stride[2], c.key0(j), p.len_k,
                                     threadIdx.x);
        cp_async_commit();
    }

    const int t = c.tid % 4;
    float o[kHeadDim / 2];
#pragma unroll
    for (int i = 0; i < kHeadDim / 2; ++i) o[i] = 0.f;
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
    uint32_t pa[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) pa[i][j] = 0u;
    bool pending = false;  // pa holds P of union tile i - 1, its PV not yet issued

    int stage = 0;  // i % kStages
    for (int i = 0; i < n; ++i) {
        const int prev =
            stage == 0 ? kStages - 1 : stage - 1;  // (i - 1) % kStages = (i + D) % kStages
        cp_async_wait<2 * D - 1>();                // K_i and V_{i-1} have landed
        fence_async_shared();
        __syncthreads();  // ... for every thread; every S_{i-1} is done with K[prev]
        if (i + D < n)
            load_tile<kHeadDim, 256>(c.k_tile(prev), c.k, p.k_stride[2], c.key0(i + D), p.len_k,
                                     threadIdx.x);
        cp_async_commit();

        const bool own_i = c.mine(i);
        if (own_i && pending) {
            float s[32];
            fence_regs(o);
            fence_regs(pa);
            wgmma_fence();
            issue_qk<kHeadDim>(s, c.q_tile, c.k_tile(stage));
            wgmma_commit();
            issue_pv<kHeadDim>(o, pa, c.v_tile(prev), v_desc_swap);
            wgmma_commit();
            wgmma_wait<1>();  // S_i done, PV_{i-1} may still run
            fence_regs(s);
            float corr[2];
            online_softmax(s, row_max, row_sum, corr, c.key0(i), p.len_k, p.scale_log2, t);
            fence_regs(s);
            fence_regs(row_sum);
            if ((__float_as_uint(row_sum[0]) & __float_as_uint(row_sum[1])) == 0xFFFFFFFFu)
                asm volatile("nanosleep.u32 0;");
            wgmma_wait<0>();  // PV_{i-1} done: O and the P registers are free
            fence_regs(o);
            fence_regs(pa);
            rescale_o<kHeadDim>(o, corr);
            pack_p(s, pa);
        } else if (own_i) {
            float s[32];
            fence_regs(o);
            fence_regs(pa);
            wgmma_fence();
            issue_qk<kHeadDim>(s, c.q_tile, c.k_tile(stage));
            wgmma_commit();
            wgmma_wait<0>();
            fence_regs(s);
            float corr[2];
            online_softmax(s, row_max, row_sum, corr, c.key0(i), p.len_k, p.scale_log2, t);
            fence_regs(o);
            fence_regs(pa);
            rescale_o<kHeadDim>(o, corr);
            pack_p(s, pa);
        } else if (pending) {
            fence_regs(o);
            fence_regs(pa);
            wgmma_fence();
            issue_pv<kHeadDim>(o, pa, c.v_tile(prev), v_desc_swap);
            wgmma_commit();
            wgmma_wait<0>();
            fence_regs(o);
        }
        pending = own_i;

        __syncthreads();  // both warpgroups are past PV_{i-1}: V[prev] may be reloaded
        if (i + D < n)
            load_tile<kHeadDim, 256>(c.v_tile(prev), c.v, p.v_stride[2], c.key0(i + D), p.len_k,
                                     threadIdx.x);
        cp_async_commit();
        stage = stage + 1 == kStages ? 0 : stage + 1;
    }
    cp_async_wait<0>();
    fence_async_shared();
    __syncthreads();
    if (pending) {
        const int last = stage == 0 ? kStages - 1 : stage - 1;  // (n - 1) % kStages
        fence_regs(o);
        fence_regs(pa);
        wgmma_fence();
        issue_pv<kHeadDim>(o, pa, c.v_tile(last), v_desc_swap);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(o);
    }
    if (c.has_rows)
        store_output<kHeadDim>(p, o, row_max, row_sum, blockIdx.z, blockIdx.y, c.row0, c.tid);
}
// Implementation 5: implementation 3 with 128-key steps. Each step takes two consecutive union
// tiles (keys of both in one 128-row K and V layout), so S is one m64n128 product per k-step and
// PV has 8 k-steps: half the steps, and with them half the per-step barriers, waits and
// reductions, for the same tensor work plus the halves a warpgroup does not own (masked: their
// scores are -inf, so their P is 0). 2 stages (Q 2 x 16 KiB + 2 x (K, V) x 32 KiB at d128).
// Measured first: halving the bytes (3) and overlapping the softmax with PV (4) did not help,
// every implementation took about the same time per step.
__device__ __forceinline__ void wgmma_ss_m64n128(float (&d)[64], uint64_t da, uint64_t db,
                                                 int zero_init) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%"
        "24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%"
        "46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, "
        "1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
          "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
          "+f"(d[63])
        : "l"(da), "l"(db), "r"(zero_init ? 0 : 1));
}

// Wide (128-row) tiles: panels of 64 columns x 128 rows x 128 bytes (16 KiB), same swizzle;
// loaded as two 64-row halves by load_tile<kHeadDim, 256, 16384> with dst_row0 = 0 / 64.

template <int kHeadDim>
__device__ __forceinline__ void issue_qk_wide(float (&s)[64], uint32_t q_tile, uint32_t k_tile) {
#pragma unroll
    for (int ks = 0; ks < kHeadDim / 16; ++ks) {
        const uint32_t q_off = (ks >> 2) * (64 * 128) + (ks & 3) * 32;
        const uint32_t k_off = (ks >> 2) * (128 * 128) + (ks & 3) * 32;
        wgmma_ss_m64n128(s, smem_desc(q_tile + q_off, 16, 1024),
                         smem_desc(k_tile + k_off, 16, 1024), ks == 0);
    }
}

// O += P V over 128 keys: 8 k-steps of 16 keys (2 KiB each); head-dim panels 16 KiB apart.
template <int kHeadDim>
__device__ __forceinline__ void issue_pv_wide(float (&o)[kHeadDim / 2], const uint32_t (&pa)[8][4],
                                              uint32_t v_tile) {
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
        const uint64_t db = smem_desc(v_tile + kk * 2048, 128 * 128, 1024);
        if constexpr (kHeadDim == 128)
            wgmma_rs_m64n128_tb(o, pa[kk], db);
        else
            wgmma_rs_m64n64_tb(o, pa[kk], db);
    }
}

// online_softmax over 128 columns: half h (columns 64 h ..) holds keys key0[h] ..; a half not
// used by this warpgroup is masked whole.
__device__ __forceinline__ void online_softmax_wide(float (&s)[64], float (&row_max)[2],
                                                    float (&row_sum)[2], float (&corr)[2],
                                                    const int (&key0)[2], const bool (&use)[2],
                                                    int len_k, float sl2, int t) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        if (!use[h] || key0[h] + 64 > len_k) {
#pragma unroll
            for (int j = 0; j < 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (!use[h] || key0[h] + 8 * j + 2 * t + (e & 1) >= len_k)
                        s[32 * h + 4 * j + e] = -INFINITY;
        }
    }
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        tile_max[0] = fmaxf(tile_max[0], fmaxf(s[4 * j + 0], s[4 * j + 1]));
        tile_max[1] = fmaxf(tile_max[1], fmaxf(s[4 * j + 2], s[4 * j + 3]));
    }
    float neg_base[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffff, tile_max[r], 1));
        tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffff, tile_max[r], 2));
        const float m_new = fmaxf(row_max[r], tile_max[r]);
        const float m_use = m_new == -INFINITY ? 0.f : m_new;
        corr[r] = fast_exp2((row_max[r] - m_use) * sl2);
        row_max[r] = m_new;
        row_sum[r] *= corr[r];
        neg_base[r] = -m_use * sl2;
    }
#pragma unroll
    for (int j = 0; j < 16; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float x = fast_exp2(fmaf(s[4 * j + e], sl2, neg_base[e >> 1]));
            s[4 * j + e] = x;
            row_sum[e >> 1] += x;
        }
    }
}

__device__ __forceinline__ void pack_p_wide(const float (&s)[64], uint32_t (&pa)[8][4]) {
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        pa[j >> 1][(j & 1) * 2 + 0] = pack_bf16(s[4 * j + 0], s[4 * j + 1]);
        pa[j >> 1][(j & 1) * 2 + 1] = pack_bf16(s[4 * j + 2], s[4 * j + 3]);
    }
}

template <int kHeadDim>
__global__ void __launch_bounds__(256, 1)
    csla_sm90_pair_wide_kernel(const AttentionParams p, int /*v_desc_swap*/) {
    constexpr int kStages = 2;
    constexpr int kWide = 2 * Sm90Traits<kHeadDim, 1>::kTileBytes;  // 128 rows
    extern __shared__ unsigned char smem_raw[];
    // PairCta's layout with "stages" counted in 64-row tiles: 2 Q tiles + 2 stages x (K, V) of
    // two tiles each = 2 + 2 x 4 tiles, i.e. PairCta<kHeadDim, 4>.
    const PairCta<kHeadDim, 2 * kStages> c(p, smem_raw);
    auto k_wide = [&](int st) { return c.smem + 2 * (kWide / 2) + st * 2 * kWide; };
    auto v_wide = [&](int st) { return c.smem + 2 * (kWide / 2) + st * 2 * kWide + kWide; };
    const int n = c.n, steps = (n + 1) / 2;

    auto load_step = [&](int j, int st) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int i = 2 * j + h;
            const bool use = i < n;
            const int key0 = use ? c.key0(i) : 0;
            load_tile<kHeadDim, 256, 128 * 128>(k_wide(st), c.k, p.k_stride[2], key0, p.len_k,
                                                threadIdx.x, 64 * h, use);
            load_tile<kHeadDim, 256, 128 * 128>(v_wide(st), c.v, p.v_stride[2], key0, p.len_k,
                                                threadIdx.x, 64 * h, use);
        }
    };
    // cp.async groups: [Q, step 0], [step 1], ...: one per step, one step ahead.
    load_tile<kHeadDim>(c.q_tile, c.q, p.q_stride[2], c.row0, p.len_q, c.tid);
    if (steps > 0) load_step(0, 0);
    cp_async_commit();

    const int t = c.tid % 4;
    float o[kHeadDim / 2];
#pragma unroll
    for (int i = 0; i < kHeadDim / 2; ++i) o[i] = 0.f;
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};

    for (int j = 0; j < steps; ++j) {
        const int st = j & 1;
        if (j + 1 < steps) load_step(j + 1, st ^ 1);  // its stage was freed by step j - 1's barrier
        cp_async_commit();
        cp_async_wait<1>();
        fence_async_shared();
        __syncthreads();
        const bool use[2] = {c.mine(2 * j), 2 * j + 1 < n && c.mine(2 * j + 1)};
        if (use[0] || use[1]) {  // uniform per warpgroup
            const int key0[2] = {c.key0(2 * j), 2 * j + 1 < n ? c.key0(2 * j + 1) : 0};
            float s[64];
            wgmma_fence();
            issue_qk_wide<kHeadDim>(s, c.q_tile, k_wide(st));
            wgmma_commit();
            wgmma_wait<0>();
            fence_regs(s);

            float corr[2];
            online_softmax_wide(s, row_max, row_sum, corr, key0, use, p.len_k, p.scale_log2, t);
            rescale_o<kHeadDim>(o, corr);
            uint32_t pa[8][4];
            pack_p_wide(s, pa);

            fence_regs(o);
            fence_regs(pa);
            wgmma_fence();
            issue_pv_wide<kHeadDim>(o, pa, v_wide(st));
            wgmma_commit();
            wgmma_wait<0>();
            fence_regs(o);
        }
        __syncthreads();  // both warpgroups are done with this stage
    }
    cp_async_wait<0>();
    if (c.has_rows)
        store_output<kHeadDim>(p, o, row_max, row_sum, blockIdx.z, blockIdx.y, c.row0, c.tid);
}
// Implementation 6: implementation 0 with a single K/V buffer (49 KiB at d128), so three CTAs
// (12 warps) share an SM instead of two: tests whether the per-step latency, not the SM's
// throughput, bounds the 64-row kernels. V_i's load overlaps S_i and its softmax.
template <int kHeadDim>
__global__ void __launch_bounds__(128, 3)
    csla_sm90_single_kernel(const AttentionParams p, int v_desc_swap) {
    using T = Sm90Traits<kHeadDim, 1>;
    constexpr int kTile = T::kTileBytes;
    extern __shared__ unsigned char smem_raw[];
    const uint32_t smem = (smem_addr(smem_raw) + 1023) & ~1023u;
    const uint32_t q_tile = smem, k_tile = smem + kTile, v_tile = smem + 2 * kTile;
    const int qt = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int row0 = qt * T::kRows;
    const auto* q = static_cast<const __nv_bfloat16*>(p.q) + b * p.q_stride[0] + h * p.q_stride[1];
    const auto* k = static_cast<const __nv_bfloat16*>(p.k) + b * p.k_stride[0] + h * p.k_stride[1];
    const auto* v = static_cast<const __nv_bfloat16*>(p.v) + b * p.v_stride[0] + h * p.v_stride[1];
    const TileList tl = tile_list(p, row0);
    const int n_tiles = tl.n_tiles;

    load_tile<kHeadDim>(q_tile, q, p.q_stride[2], row0, p.len_q);
    cp_async_commit();
    const int t = threadIdx.x % 4;
    float o[kHeadDim / 2];
#pragma unroll
    for (int i = 0; i < kHeadDim / 2; ++i) o[i] = 0.f;
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
    int key_next = n_tiles > 0 ? tl.key0(0) : 0;
    for (int i = 0; i < n_tiles; ++i) {
        const int key0 = key_next;
        load_tile<kHeadDim>(k_tile, k, p.k_stride[2], key0, p.len_k);
        cp_async_commit();
        load_tile<kHeadDim>(v_tile, v, p.v_stride[2], key0, p.len_k);
        cp_async_commit();
        if (i + 1 < n_tiles) key_next = tl.key0(i + 1);
        cp_async_wait<1>();  // Q and K_i
        fence_async_shared();
        __syncthreads();

        float s[32];
        wgmma_fence();
        issue_qk<kHeadDim>(s, q_tile, k_tile);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(s);
        float corr[2];
        online_softmax(s, row_max, row_sum, corr, key0, p.len_k, p.scale_log2, t);
        rescale_o<kHeadDim>(o, corr);
        uint32_t pa[4][4];
        pack_p(s, pa);

        cp_async_wait<0>();  // V_i
        fence_async_shared();
        __syncthreads();
        fence_regs(o);
        fence_regs(pa);
        wgmma_fence();
        issue_pv<kHeadDim>(o, pa, v_tile, v_desc_swap);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(o);
        __syncthreads();  // K and V are reloaded next
    }
    cp_async_wait<0>();
    store_output<kHeadDim>(p, o, row_max, row_sum, b, h, row0);
}
#else
template <int kHeadDim>
__global__ void csla_sm90_serial_kernel(const AttentionParams, int) {}
template <int kHeadDim, int kStages>
__global__ void csla_sm90_overlap_kernel(const AttentionParams, int) {}
template <int kHeadDim, int kStages>
__global__ void csla_sm90_pair_kernel(const AttentionParams, int) {}
template <int kHeadDim, int kStages>
__global__ void csla_sm90_pair_overlap_kernel(const AttentionParams, int) {}
template <int kHeadDim>
__global__ void csla_sm90_pair_wide_kernel(const AttentionParams, int) {}
template <int kHeadDim>
__global__ void csla_sm90_single_kernel(const AttentionParams, int) {}
#endif

// Dynamic shared memory of implementations 3 and 4 for these inputs (see PairCta).
template <int kHeadDim, int kStages>
inline int pair_smem_bytes(const AttentionParams& p) {
    const int n_kb = (p.len_k + p.block_k - 1) / p.block_k;
    return Sm90Traits<kHeadDim, kStages>::kTileBytes * (2 + 2 * kStages) + 1024 +
           ((2 * n_kb + 15) & ~15) + 4 * (n_kb + 1);
}

// The shared-memory opt-in is set once per kernel (as the sm_80 kernels do).
template <auto Kernel, int kSmemBytes>
cudaError_t launch_kernel(const AttentionParams& p, int v_desc_swap, cudaStream_t stream) {
    static const cudaError_t attr_err =
        cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
    if (attr_err != cudaSuccess) return attr_err;
    const dim3 grid((p.len_q + 63) / 64, p.heads, p.batch);
    Kernel<<<grid, 128, kSmemBytes, stream>>>(p, v_desc_swap);
    return cudaGetLastError();
}

// Implementations 3 and 4: 128 rows per CTA, shared memory sized by the key-block count. The
// opt-in is raised to the largest size launched so far (asking for the device maximum fails
// when the kernel has any static shared memory: the limit counts both). Inputs too large for
// one CTA's shared memory run implementation 1 instead.
template <auto Kernel, int kHeadDim, int kStages>
cudaError_t launch_pair(const AttentionParams& p, int v_desc_swap, cudaStream_t stream) {
    static std::atomic<int> allowed{48 * 1024};
    const int bytes = pair_smem_bytes<kHeadDim, kStages>(p);
    if (bytes > allowed.load()) {
        if (cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) !=
            cudaSuccess) {
            (void)cudaGetLastError();
            return launch_kernel<csla_sm90_overlap_kernel<kHeadDim, 2>,
                                 Sm90Traits<kHeadDim, 2>::kSmemBytes>(p, v_desc_swap, stream);
        }
        allowed.store(bytes);
    }
    const dim3 grid((p.len_q + 127) / 128, p.heads, p.batch);
    Kernel<<<grid, 256, bytes, stream>>>(p, v_desc_swap);
    return cudaGetLastError();
}

// impl: 0 serial, 1 overlapped with 2 stages, 2 overlapped with 3 stages, 3 two warpgroups per
// 128 rows over the union of their lists (serial, 3 stages), 4 as 3 with 1's overlap, 5 as 3
// with 128-key steps (2 stages), 6 as 0 with one K/V buffer (3 CTAs per SM).
template <int kHeadDim>
cudaError_t launch_csla_sm90(const AttentionParams& p, int impl, int v_desc_swap,
                             cudaStream_t stream) {
    switch (impl) {
        case 0:
            return launch_kernel<csla_sm90_serial_kernel<kHeadDim>,
                                 Sm90Traits<kHeadDim, 2>::kSmemBytes>(p, v_desc_swap, stream);
        case 1:
            return launch_kernel<csla_sm90_overlap_kernel<kHeadDim, 2>,
                                 Sm90Traits<kHeadDim, 2>::kSmemBytes>(p, v_desc_swap, stream);
        case 2:
            return launch_kernel<csla_sm90_overlap_kernel<kHeadDim, 3>,
                                 Sm90Traits<kHeadDim, 3>::kSmemBytes>(p, v_desc_swap, stream);
        case 3:
            return launch_pair<csla_sm90_pair_kernel<kHeadDim, 3>, kHeadDim, 3>(p, v_desc_swap,
                                                                                stream);
        case 4:
            return launch_pair<csla_sm90_pair_overlap_kernel<kHeadDim, 3>, kHeadDim, 3>(
                p, v_desc_swap, stream);
        case 5:  // 2 stages of 128-row K and V = the layout of 4 stages of 64-row tiles
            return launch_pair<csla_sm90_pair_wide_kernel<kHeadDim>, kHeadDim, 4>(p, v_desc_swap,
                                                                                  stream);
        case 6:
            return launch_kernel<csla_sm90_single_kernel<kHeadDim>,
                                 Sm90Traits<kHeadDim, 1>::kSmemBytes>(p, v_desc_swap, stream);
        default:
            return cudaErrorInvalidValue;
    }
}

}  // namespace varscope::kernels::cuda::sm90
