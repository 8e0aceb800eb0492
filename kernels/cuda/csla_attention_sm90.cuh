// Hopper (sm_90a) sparse attention: the dispatch's kernel for CSLA (block-sparse) and CS4A
// (gathered) attention with an output, bf16, head dim 64/128, on Hopper; every other case, and
// every non-Hopper GPU, runs the sm_80 kernels (attention_kernel.cuh).
//
// One warpgroup (4 warps) per 64 query rows. S = Q K^T and O += P V on warpgroup MMA (wgmma)
// straight from 128-byte-swizzled shared memory; P stays in registers as wgmma's A operand; online
// softmax in registers. Where a tile's keys come from (the tile source):
//   CSLA (BlockSparse): 64 consecutive keys of an active key block on the query block's list.
//   CS4A (Gathered): 64 key rows picked by the query block's index list, each row copied from
//     where the list says into the same swizzled layout; rows past the list's count or with an
//     index outside [0, len_k) are zero-filled and masked, as the reference ignores them.
// The kernels (numbered as the schedules of the measured history, "schedule N"):
//   CSLA d128 (12, sm90_persistent_kernel): persistent, warp-specialised: a producer warpgroup
//     issues TMA tile copies into a ring of K/V slots on mbarriers (Q through the ring too, as
//     QK's register operand); the consumer warpgroup overlaps QK_{i+1} and PV_i, moves the
//     softmax's exponent base lazily, and stores O by TMA. Items round-robin, the last partial
//     round claimed from a counter (WorkOrder).
//   CSLA d64 (10, sm90_ws_kernel): the same tile loop, one CTA per query block with a producer
//     warp (VAR-d30's last scales fill at most a wave: the persistent kernel is slower there).
//   CSLA where no TMA tensor map can be made (6), CS4A d128 (6) and d64 (0):
//     sm90_attention_kernel, K/V tiles by 16-byte cp.async, zero-filled where there is no key;
//     one K/V stage and three CTAs per SM (6) or two stages (0). CS4A has no TMA form.
// How they were chosen, and everything tried: bench/results/2026-11-26-h200/csla_sm90_notes.md;
// the schedules deleted as never the default and their numbers: bench/results/pruned-kernels.md.
//
// V (B operand of PV) is read MN-major: CUTLASS's canonical 128B-swizzle MN-major layout puts
// the stride between 64-element panels in LBO and the 8-row group stride in SBO (confirmed on
// the device in session 5 by a swapped-descriptor run that failed the test).
#pragma once

#include <cuda.h>          // CUtensorMap (schedules 10 and 12: TMA copies)
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <map>
#include <mutex>
#include <type_traits>
#include <utility>

#include "kernels/cuda/attention_params.h"
#include "kernels/cuda/work_order.h"

namespace varscope::kernels::cuda::sm90 {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define VARSCOPE_SM90_WGMMA 1
#endif

template <int kHeadDim, int kStages>
struct Sm90Traits {
    static_assert(kHeadDim == 64 || kHeadDim == 128, "head dim 64 or 128");
    static_assert(kStages == 1 || kStages == 2, "schedule 6 (one stage) or 0 (two)");
    static constexpr int kRows = 64;      // query rows per CTA (one warpgroup)
    static constexpr int kKeys = 64;      // keys per tile
    static constexpr int kThreads = 128;  // one warpgroup
    static constexpr int kTileBytes = kKeys * kHeadDim * 2;
    // Copies: each thread keeps one 16-byte column chunk and steps down the rows.
    static constexpr int kChunks = kHeadDim / 8;
    static constexpr int kRowsPerPass = kThreads / kChunks;  // 8 (d128) / 16 (d64)
    static constexpr int kPasses = kKeys / kRowsPerPass;     // copies per thread per tile
    // Q + kStages x (K, V), then one validity byte per key and stage (gathered tiles).
    static constexpr int kValidOffset = kTileBytes * (1 + 2 * kStages);
    // Plus 1 KiB so the base can be aligned for the 128-byte swizzle.
    static constexpr int kSmemBytes = kValidOffset + kKeys * kStages + 1024;
    // Three CTAs per SM with one stage (6), two with two stages (0: by shared memory at d128).
    static constexpr int kMinBlocks = kStages == 1 ? 3 : 1;
};
// Schedule 10 (warp-specialised, see sm90_ws_kernel): S_i, P_{i-1} and O held at once, so two
// CTAs per SM at d128 (a fifth slot there: 97 KiB) and three at d64 (four slots). The kernel waits
// little on its tiles, so they are fetched far ahead: at d128 the fifth slot took the K/V data
// waits from ~12 % of the consumer's stall samples and the time from 0.167 to 0.163 ms (H200,
// Table 1; neutral at d64). The dispatch runs it at d64 only.
template <int kHeadDim>
struct WsTraits {
    static constexpr int kSlots = kHeadDim == 128 ? 5 : 4;
    static constexpr int kPanels = kHeadDim / 64;         // 64-column (128-byte) panels
    static constexpr int kTileBytes = 64 * kHeadDim * 2;  // Q, K or V tile
    static constexpr int kThreads = 160;                  // consumer warpgroup + producer warp
    static constexpr int kBarOffset = kTileBytes * (1 + kSlots);
    // Barriers: Q full, then full[kSlots], empty[kSlots]; then per slot the valid keys of its K
    // tile (len_k - first key, written by the producer before the slot's arrive); plus 1 KiB for
    // the 1024-byte alignment.
    static constexpr int kValidOffset = kBarOffset + 8 * (1 + 2 * kSlots);
    // (+4: the tile count at d64, see sm90_ws_kernel.)
    static constexpr int kSmemBytes = kValidOffset + 4 * kSlots + 4 + 1024;
    // d128: 97.1 KiB, 2 CTAs per SM. (__maxnreg__ instead of these launch bounds: 0.218 instead
    // of 0.156 ms.)
    static constexpr int kMinBlocks = kHeadDim == 128 ? 2 : 3;
};
// A persistent CTA's work item as the producer hands it to the consumer (shared memory).
struct ItemInfo {
    int lin, n, row0, h, b;
};
// The persistent kernel's work order. Items lin < dynamic_from go round-robin (lin = blockIdx.x +
// k * gridDim.x: the items in flight at once stay on a few heads, whose K/V the CTAs then walk in
// step). The rest, in launch order, are claimed from *claims as CTAs run out of items, so that
// the CTAs that finished their static items early take the last ones. Every CTA claims until a
// claim fails, so one launch makes exactly (total - dynamic_from) + gridDim.x claims, and
// atomicInc's wrap leaves *claims at zero for the next launch. (Claiming the longest items first
// would balance better by a model of session 13's trace, but ranking the query blocks in the
// kernel moved ptxas's schedule of the consumer's tile loop.)
struct WorkOrder {
    int dynamic_from = INT_MAX;  // whole heads: a multiple of the query blocks per head
    unsigned* claims = nullptr;
};
// Schedule 12 (sm90_persistent_kernel). Why a producer warpgroup: registers are split between
// the SM's four sub-partitions; with 5 warps per CTA one sub-partition holds 3 warps of the SM's
// two CTAs, which caps every thread at 168 registers (16384 / 3 / 32), and 10 uses 168. The
// persistent loop's per-item state then spilled into the tile loop (0.176 ms) or, uncapped (187
// registers), left one CTA per SM (0.241 ms). With 2 warpgroups per CTA (4 warps per
// sub-partition) setmaxnreg moves registers from the producer warpgroup (40) to the consumer
// (216): no spills. The dispatch runs it at d128 only.
template <int kHeadDim>
struct PersistentTraits {
    // Each item's Q comes through the ring, ahead of its K/V tiles (QK's register operand, loaded
    // once per item), and O is staged in a buffer of its own.
    static constexpr int kOBufs = 1;
    static constexpr int kSlots = (kHeadDim == 128 ? 5 : 4) + 1;
    static constexpr int kInfos = kSlots;  // ItemInfo per slot (the Q slots carry one)
    static constexpr int kPanels = kHeadDim / 64;
    static constexpr int kTileBytes = 64 * kHeadDim * 2;
    static constexpr int kThreads = 256;  // consumer warpgroup + producer warpgroup
    static constexpr int kProducerRegs = 40, kConsumerRegs = 216;  // 2 x (40 + 216) x 32 x 4 warps
    static constexpr int kBarOffset = kTileBytes * (kOBufs + kSlots);
    // full[kSlots], empty[kSlots]; then the valid keys per slot, and the items (ItemInfo). No
    // alignment pad: the dynamic shared memory base is 1024-byte aligned (as CUTLASS's kernels
    // assume; checked in the kernel), and with the pad 7 tiles would not fit twice per SM.
    static constexpr int kValidOffset = kBarOffset + 8 * (2 * kSlots);
    static constexpr int kSmemBytes =
        kValidOffset + 4 * kSlots + kInfos * static_cast<int>(sizeof(ItemInfo));
    // Two CTAs per SM: 228 KiB per SM, 1 KiB of it reserved per CTA.
    static_assert(2 * (kSmemBytes + 1024) <= 228 * 1024, "two CTAs per SM");
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
// D (64 x 64, f32) += A (64 x 16, registers) * B from smem: K-major (64 x 16, S = Q K^T with Q in
// registers) or, kTransB, MN-major (16 x 64, O += P V at head dim 64); zero_init: D = A*B.
template <bool kTransB>
__device__ __forceinline__ void wgmma_rs_m64n64(float (&d)[32], const uint32_t (&a)[4], uint64_t db,
                                                int zero_init) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%"
        "24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, %38;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(zero_init ? 0 : 1),
          "n"(kTransB ? 1 : 0));
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

// A descriptor moved by a byte offset: the start address is its low field (bytes >> 4, 14 bits;
// shared memory offsets stay far below 256 KiB, so no carry reaches LBO). The warp-specialised
// kernels build each operand's descriptor once and step it by constants (their SASS spent ~125
// uniform instructions per step rebuilding descriptors from addresses).
__device__ __forceinline__ uint64_t desc_at(uint64_t desc, uint32_t byte_offset) {
    return desc + (byte_offset >> 4);
}

// S = Q K^T for one 64 x 64 tile from the two tiles' descriptors, stepped by desc_at: k-steps of
// 16 along the head dim (32 bytes inside a panel, panels 8 KiB apart).
template <int kHeadDim>
__device__ __forceinline__ void qk_from_descs(float (&s)[32], uint64_t dq, uint64_t dk) {
#pragma unroll
    for (int ks = 0; ks < kHeadDim / 16; ++ks) {
        const uint32_t off = (ks >> 2) * (64 * 128) + (ks & 3) * 32;
        wgmma_ss_m64n64(s, desc_at(dq, off), desc_at(dk, off), ks == 0);
    }
}
// S = Q K^T with Q as wgmma's register operand (schedule 12): QK then reads only K from shared
// memory, half of what the SS form reads per k-step at N = 64.
template <int kHeadDim>
__device__ __forceinline__ void qk_from_regs(float (&s)[32], const uint32_t (&qa)[kHeadDim / 16][4],
                                             uint64_t dk) {
#pragma unroll
    for (int ks = 0; ks < kHeadDim / 16; ++ks) {
        const uint32_t off = (ks >> 2) * (64 * 128) + (ks & 3) * 32;
        wgmma_rs_m64n64<false>(s, qa[ks], desc_at(dk, off), ks == 0);
    }
}
// This warp's 16 rows of a 64-row, 128-byte-swizzled tile (TMA's layout: 64-column panels 8 KiB
// apart, the 16-byte chunk index XORed with row % 8) as wgmma A fragments, one ldmatrix.x4 per
// 16 columns: matrices (rows 0-7 | 8-15) x (columns 0-7 | 8-15) = registers 0..3.
template <int kHeadDim>
__device__ __forceinline__ void load_a_fragments(uint32_t tile, uint32_t (&a)[kHeadDim / 16][4]) {
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
    const int m = lane >> 3, r = lane & 7;
    const int row = 16 * warp + (m & 1) * 8 + r;
#pragma unroll
    for (int ks = 0; ks < kHeadDim / 16; ++ks) {
        const int chunk = (ks & 3) * 2 + (m >> 1);  // 16-byte chunk inside the panel's row
        const uint32_t addr = tile + (ks >> 2) * 8192 + row * 128 + ((chunk ^ r) << 4);
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(a[ks][0]), "=r"(a[ks][1]), "=r"(a[ks][2]), "=r"(a[ks][3])
                     : "r"(addr)
                     : "memory");
    }
}
// O += P V from V's descriptor: V is (keys x head dim) row-major, i.e. B stored MN-major. 16
// keys per step = two 8-row groups (2 KiB); head-dim panels 8 KiB apart (LBO), 8-row groups 1 KiB
// apart (SBO).
template <int kHeadDim>
__device__ __forceinline__ void pv_from_desc(float (&o)[kHeadDim / 2], const uint32_t (&pa)[4][4],
                                             uint64_t dv) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
        if constexpr (kHeadDim == 128)
            wgmma_rs_m64n128_tb(o, pa[kk], desc_at(dv, kk * 2048));
        else
            wgmma_rs_m64n64<true>(o, pa[kk], desc_at(dv, kk * 2048), 0);
    }
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

// Loads rows [row0, row0 + 64) of a (len x kHeadDim) matrix into a swizzled tile, zero-filled
// past len. Layout: panels of 64 columns x 64 rows x 128 bytes (8 KiB apart), chunk index XOR-ed
// with the row within its 8-row group (1024-byte aligned base: the hardware's 128-byte swizzle).
// Each thread keeps one 16-byte column chunk and steps down the rows kRowsPerPass at a time (a
// multiple of 8, so its swizzle phase never changes): per copy one address add and one bounds
// test. (The first version walked a runtime-strided index with a division per copy; ncu showed
// the kernels bound by instruction issue.)
template <int kHeadDim>
__device__ __forceinline__ void load_tile(uint32_t tile, const __nv_bfloat16* base, int64_t stride,
                                          int row0, int len) {
    using T = Sm90Traits<kHeadDim, 1>;
    const int c = threadIdx.x % T::kChunks, r0 = threadIdx.x / T::kChunks;
    const uint32_t dst = tile + (c >> 3) * (64 * 128) + r0 * 128 + (((c & 7) ^ (r0 & 7)) << 4);
    const __nv_bfloat16* src = base + static_cast<int64_t>(row0 + r0) * stride + c * 8;
    const int64_t step = static_cast<int64_t>(T::kRowsPerPass) * stride;
#pragma unroll
    for (int pass = 0; pass < T::kPasses; ++pass) {
        const bool valid = row0 + r0 + pass * T::kRowsPerPass < len;
        // Past the end: zero bytes are read (src-size 0), so the address needs no clamping
        // (CUTLASS's zero-fill copy does the same).
        cp_async_16(dst + pass * T::kRowsPerPass * 128, src + pass * step, valid);
    }
}

// The key rows this thread copies for one gathered tile (rows r0 + pass * kRowsPerPass of the
// tile); -1 where there is none (zero-filled, masked).
template <int kHeadDim>
struct GatherRows {
    int row[Sm90Traits<kHeadDim, 1>::kPasses];
};

// As load_tile, with each row's source given by rows (the same layout, so the tensor-core side
// cannot tell a gathered tile from a contiguous one).
template <int kHeadDim>
__device__ __forceinline__ void gather_tile(uint32_t tile, const __nv_bfloat16* base,
                                            int64_t stride, const GatherRows<kHeadDim>& rows) {
    using T = Sm90Traits<kHeadDim, 1>;
    const int c = threadIdx.x % T::kChunks, r0 = threadIdx.x / T::kChunks;
    const uint32_t dst = tile + (c >> 3) * (64 * 128) + r0 * 128 + (((c & 7) ^ (r0 & 7)) << 4);
    const __nv_bfloat16* src = base + c * 8;
#pragma unroll
    for (int pass = 0; pass < T::kPasses; ++pass) {
        const int r = rows.row[pass];
        cp_async_16(dst + pass * T::kRowsPerPass * 128,
                    src + static_cast<int64_t>(max(r, 0)) * stride, r >= 0);
    }
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
}

// qk_from_descs and pv_from_desc from tile addresses (schedules 0 and 6).
template <int kHeadDim>
__device__ __forceinline__ void issue_qk(float (&s)[32], uint32_t q_tile, uint32_t k_tile) {
    qk_from_descs<kHeadDim>(s, smem_desc(q_tile, 16, 1024), smem_desc(k_tile, 16, 1024));
}

template <int kHeadDim>
__device__ __forceinline__ void issue_pv(float (&o)[kHeadDim / 2], const uint32_t (&pa)[4][4],
                                         uint32_t v_tile) {
    pv_from_desc<kHeadDim>(o, pa, smem_desc(v_tile, 64 * 128, 1024));
}

// Score layout (wgmma's accumulator, per warp 16 rows): s[4 j + e] is row g + 8 (e >> 1) of the
// warp's 16 (g = lane / 4), column 8 j + 2 t + (e & 1) (t = lane % 4).

// Masks columns >= n_valid (the tile past len_k; n_valid <= 0 masks all of it).
__device__ __forceinline__ void mask_tail(float (&s)[32], int n_valid, int t) {
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            if (8 * j + 2 * t + (e & 1) >= n_valid) s[4 * j + e] = -INFINITY;
}

// Masks the columns whose validity byte (shared memory, one per key of the tile) is 0.
__device__ __forceinline__ void mask_columns(float (&s)[32], const unsigned char* valid, int t) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const unsigned two = *reinterpret_cast<const unsigned short*>(valid + 8 * j + 2 * t);
        if ((two & 0xFFu) == 0) s[4 * j + 0] = s[4 * j + 2] = -INFINITY;
        if ((two >> 8) == 0) s[4 * j + 1] = s[4 * j + 3] = -INFINITY;
    }
}

// The maxima of this thread's two rows of an S tile over the whole row (the 4 threads that hold
// a row exchange theirs).
__device__ __forceinline__ void tile_row_maxima(const float (&s)[32], float (&tile_max)[2]) {
    tile_max[0] = tile_max[1] = -INFINITY;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        tile_max[0] = fmaxf(tile_max[0], fmaxf(s[4 * j + 0], s[4 * j + 1]));
        tile_max[1] = fmaxf(tile_max[1], fmaxf(s[4 * j + 2], s[4 * j + 3]));
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffff, tile_max[r], 1));
        tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffff, tile_max[r], 2));
    }
}

// Softmax of one (masked) S tile in place (log2 units, scale folded into one FFMA per element):
// updates the running max / sum, leaves P = exp2(S * scale - max) in s and the factor by which O
// must be rescaled in corr.
__device__ __forceinline__ void online_softmax(float (&s)[32], float (&row_max)[2],
                                               float (&row_sum)[2], float (&corr)[2], float sl2) {
    float tile_max[2];
    tile_row_maxima(s, tile_max);
    float neg_base[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
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

__device__ __forceinline__ int log2_or_minus1(int x) {
    return (x & (x - 1)) == 0 ? __ffs(x) - 1 : -1;
}

// CSLA tile source: tile i = 64 consecutive keys of an active key block on the list; a tile is
// named by its first key (len_k for a list entry outside the key range: loaded as zeros and
// masked whole, as the reference ignores such entries).
template <int kHeadDim>
struct BlockTiles {
    using Ref = int;
    const int32_t* list;
    int block_k, n_tiles, len_k, shift;  // shift = log2(block_k / 64), -1 if not a power of two
    int tiles_per_block;

    __device__ __forceinline__ BlockTiles(const AttentionParams& p, int row0) {
        const int qb = row0 / p.block_q;
        const int count = min(max(p.counts[qb], 0), p.list_stride);
        list = p.lists + static_cast<int64_t>(qb) * p.list_stride;
        tiles_per_block = p.block_k / 64;
        block_k = p.block_k;
        n_tiles = count * tiles_per_block;
        len_k = p.len_k;
        shift = log2_or_minus1(tiles_per_block);
    }
    __device__ __forceinline__ Ref ref(int i) const {
        int kb, sub;
        if (shift >= 0) {  // no integer division (a long SASS sequence)
            kb = list[i >> shift];
            sub = i & ((1 << shift) - 1);
        } else {
            kb = list[i / tiles_per_block];
            sub = i % tiles_per_block;
        }
        const int key0 = kb * block_k + sub * 64;
        return kb >= 0 && key0 < len_k ? key0 : len_k;
    }
    __device__ __forceinline__ void load(uint32_t tile, const __nv_bfloat16* base, int64_t stride,
                                         Ref key0) const {
        load_tile<kHeadDim>(tile, base, stride, key0, len_k);
    }
    // Validity bytes: not needed (a contiguous tile is valid up to len_k).
    __device__ __forceinline__ bool mark(unsigned char*, Ref key0) const {
        return key0 + 64 > len_k;
    }
};

// CS4A tile source: tile i = list entries [64 i, 64 i + 64) of the query block's index list.
// Each thread reads the indices of its own rows one tile ahead of their copies (registers), so
// the list's latency hides behind the previous tile's math.
template <int kHeadDim>
struct GatherTiles {
    using Ref = GatherRows<kHeadDim>;
    using T = Sm90Traits<kHeadDim, 1>;
    const int32_t* list;
    int count, n_tiles, len_k;

    __device__ __forceinline__ GatherTiles(const AttentionParams& p, int row0) {
        const int qb = row0 / p.block_q;
        count = min(max(p.counts[qb], 0), p.list_stride);
        list = p.lists + static_cast<int64_t>(qb) * p.list_stride;
        n_tiles = (count + 63) / 64;
        len_k = p.len_k;
    }
    __device__ __forceinline__ Ref ref(int i) const {
        Ref r;
        const int slot0 = 64 * i + static_cast<int>(threadIdx.x) / T::kChunks;
#pragma unroll
        for (int pass = 0; pass < T::kPasses; ++pass) {
            const int slot = slot0 + pass * T::kRowsPerPass;
            const int key = slot < count ? __ldg(list + slot) : -1;
            r.row[pass] = key >= 0 && key < len_k ? key : -1;
        }
        return r;
    }
    __device__ __forceinline__ void load(uint32_t tile, const __nv_bfloat16* base, int64_t stride,
                                         const Ref& rows) const {
        gather_tile<kHeadDim>(tile, base, stride, rows);
    }
    // Writes the tile's validity bytes (one thread per row) and says whether this thread's rows
    // include an invalid one (the CTA's OR decides whether the tile is masked).
    __device__ __forceinline__ bool mark(unsigned char* valid, const Ref& rows) const {
        const int r0 = static_cast<int>(threadIdx.x) / T::kChunks;
        bool any_invalid = false;
#pragma unroll
        for (int pass = 0; pass < T::kPasses; ++pass) {
            if (threadIdx.x % T::kChunks == 0)
                valid[r0 + pass * T::kRowsPerPass] = rows.row[pass] >= 0 ? 1 : 0;
            any_invalid |= rows.row[pass] < 0;
        }
        return any_invalid;
    }
};

// One kernel for both tile sources and both schedules (0: kStages = 2, 6: kStages = 1).
// cp.async groups: schedule 0: [Q, tile 0], then one per iteration (tile i + 1, one ahead);
// schedule 6: [Q], then [K_i], [V_i] per iteration (S_i waits only for K_i).
// Masking: CSLA masks a tile that reaches past len_k (uniform: every thread knows key0); CS4A
// masks by the validity bytes when any thread of the CTA saw an invalid row (barrier OR), i.e.
// normally only the list's last tile.
template <int kHeadDim, int kStages, bool kGathered>
__global__ void __launch_bounds__(128, Sm90Traits<kHeadDim, kStages>::kMinBlocks)
    sm90_attention_kernel(const AttentionParams p) {
    using T = Sm90Traits<kHeadDim, kStages>;
    using Tiles = std::conditional_t<kGathered, GatherTiles<kHeadDim>, BlockTiles<kHeadDim>>;
    using Ref = typename Tiles::Ref;
    constexpr int kTile = T::kTileBytes;
    extern __shared__ unsigned char smem_raw[];
    const uint32_t raw = smem_addr(smem_raw);
    const uint32_t smem = (raw + 1023) & ~1023u;
    unsigned char* valid = smem_raw + (smem - raw) + T::kValidOffset;  // [kStages][64]
    const uint32_t q_tile = smem;
    auto k_tile = [&](int st) { return smem + kTile * (1 + 2 * st); };
    auto v_tile = [&](int st) { return smem + kTile * (2 + 2 * st); };

    const int h = blockIdx.y, b = blockIdx.z;
    const int row0 = blockIdx.x * T::kRows;
    const auto* q = static_cast<const __nv_bfloat16*>(p.q) + b * p.q_stride[0] + h * p.q_stride[1];
    const auto* k = static_cast<const __nv_bfloat16*>(p.k) + b * p.k_stride[0] + h * p.k_stride[1];
    const auto* v = static_cast<const __nv_bfloat16*>(p.v) + b * p.v_stride[0] + h * p.v_stride[1];
    const Tiles tiles(p, row0);
    const int n = tiles.n_tiles;
    const int t = threadIdx.x % 4;

    float o[kHeadDim / 2];
#pragma unroll
    for (int i = 0; i < kHeadDim / 2; ++i) o[i] = 0.f;
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};

    // S_i -> softmax -> PV_i on the tile in stage st (K and V landed for every thread). Between
    // S and PV, wait_v (schedule 6: V_i's group) runs.
    auto compute = [&](int st, bool masked, Ref cur, auto wait_v) {
        float s[32];
        wgmma_fence();
        issue_qk<kHeadDim>(s, q_tile, k_tile(st));
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(s);
        if (masked) {  // uniform per CTA
            if constexpr (kGathered)
                mask_columns(s, valid + 64 * st, t);
            else
                mask_tail(s, p.len_k - cur, t);
        }
        float corr[2];
        online_softmax(s, row_max, row_sum, corr, p.scale_log2);
        rescale_o<kHeadDim>(o, corr);
        uint32_t pa[4][4];
        pack_p(s, pa);
        wait_v();
        fence_regs(o);
        fence_regs(pa);
        wgmma_fence();
        issue_pv<kHeadDim>(o, pa, v_tile(st));
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(o);
    };
    // The barrier that publishes tile i; returns whether it must be masked (uniform).
    auto publish = [&](bool needs_mask) -> bool {
        fence_async_shared();
        if constexpr (kGathered) return __syncthreads_or(needs_mask) != 0;
        __syncthreads();
        return needs_mask;  // the same in every thread
    };

    load_tile<kHeadDim>(q_tile, q, p.q_stride[2], row0, p.len_q);
    if constexpr (kStages == 1) {
        cp_async_commit();
        Ref next{};
        if (n > 0) next = tiles.ref(0);
        for (int i = 0; i < n; ++i) {
            const Ref cur = next;
            tiles.load(k_tile(0), k, p.k_stride[2], cur);
            cp_async_commit();
            tiles.load(v_tile(0), v, p.v_stride[2], cur);
            cp_async_commit();
            const bool mask_i = tiles.mark(valid, cur);
            if (i + 1 < n) next = tiles.ref(i + 1);
            cp_async_wait<1>();  // Q and K_i
            const bool masked = publish(mask_i);
            compute(0, masked, cur, [] {
                cp_async_wait<0>();  // V_i
                fence_async_shared();
                __syncthreads();
            });
            __syncthreads();  // K and V are reloaded next
        }
    } else {
        Ref cur{}, next{};
        bool mask_cur = false;
        if (n > 0) {
            cur = tiles.ref(0);
            tiles.load(k_tile(0), k, p.k_stride[2], cur);
            tiles.load(v_tile(0), v, p.v_stride[2], cur);
            mask_cur = tiles.mark(valid, cur);
        }
        cp_async_commit();
        if (n > 1) next = tiles.ref(1);
        for (int i = 0; i < n; ++i) {
            const int st = i & 1;
            bool mask_next = false;
            if (i + 1 < n) {  // the next tile into the other stage (freed by i - 1's barrier)
                tiles.load(k_tile(st ^ 1), k, p.k_stride[2], next);
                tiles.load(v_tile(st ^ 1), v, p.v_stride[2], next);
                mask_next = tiles.mark(valid + 64 * (st ^ 1), next);
            }
            cp_async_commit();
            Ref after{};
            if (i + 2 < n) after = tiles.ref(i + 2);
            cp_async_wait<1>();  // tile i
            const bool masked = publish(mask_cur);
            compute(st, masked, cur, [] {});
            __syncthreads();  // this stage is reloaded by the next iteration
            cur = next;
            next = after;
            mask_cur = mask_next;
        }
    }
    cp_async_wait<0>();
    store_output<kHeadDim>(p, o, row_max, row_sum, b, h, row0);
}

// ---- Warp specialisation (CSLA only; schedules 10 and 12). A producer issues TMA tile copies
// (cp.async.bulk.tensor, 128-byte swizzle: the layout load_tile writes by hand) into a ring of
// kSlots 64-key tiles, completing on mbarriers; the consumer warpgroup issues no copy
// instructions and no CTA barriers, only mbarrier waits. Rows past len_k (tails, list entries
// outside the key range) come back as zeros from the copy engine and are masked as before. The
// consumer also rescales O lazily: the running maximum (the softmax's exponent base) stays unless
// some row of the warp grows by more than 2^8 (first tile) or some P exceeds 2^16 (later tiles;
// exact: softmax is invariant to the base, and bf16 keeps its relative precision), so the 64
// FMULs of the rescale are skipped on almost every tile.

__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Spins until the phase of the given parity has completed (a fresh barrier counts parity 1 as
// completed, so a producer's first wait on an empty slot passes at once).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    asm volatile(
        "{\n.reg .pred done;\nWAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT;\n}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}
// One 64-column x 64-row box of a 4-d map (columns, rows, heads, batch) into shared memory.
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap* map, int col, int row,
                                         int h, int b, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], "
        "[%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(h), "r"(b), "r"(bar)
        : "memory");
}

// As tma_load for a map made by make_tensor_map with panels = 2: both 64-column panels of a 64-row
// tile (d128) in one copy.
__device__ __forceinline__ void tma_load_panels(uint32_t dst, const CUtensorMap* map, int row,
                                                int h, int b, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], "
        "[%1, {%2, %3, %4, %5, %6}], [%7];\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(0), "r"(row), "r"(0), "r"(h), "r"(b), "r"(bar)
        : "memory");
}

// P = exp2(S * scale - base) of one tile (p may be s itself), and each row's sum of P over this
// thread's 16 values (four independent partials: ncu showed the consumer warps stalled on
// fixed-latency chains of 16).
__device__ __forceinline__ void exp2_tile(const float (&s)[32], float (&p)[32],
                                          const float (&neg_base)[2], float sl2,
                                          float (&tile_sum)[2]) {
    float part[2][4];
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float x = fast_exp2(fmaf(s[4 * j + e], sl2, neg_base[e >> 1]));
            p[4 * j + e] = x;
            float& acc = part[e >> 1][(j & 1) * 2 + (e & 1)];
            acc = j < 2 ? x : acc + x;  // not 0 + x: ptxas keeps that FADD
        }
#pragma unroll
    for (int r = 0; r < 2; ++r) tile_sum[r] = (part[r][0] + part[r][1]) + (part[r][2] + part[r][3]);
}

// Moves each row's exponent base up to the tile's maximum where that is larger: corr is the factor
// by which O and the row sums made on the old base must be scaled (0 where there was none yet).
// Writes the new -base * scale per row to neg_base (0 for a row still without one).
__device__ __forceinline__ void move_base(const float (&tile_max)[2], float (&row_max)[2],
                                          float (&row_sum)[2], float (&corr)[2], float sl2) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const float m_new = fmaxf(row_max[r], tile_max[r]);
        corr[r] = row_max[r] == -INFINITY ? 0.f : fast_exp2((row_max[r] - m_new) * sl2);
        row_max[r] = m_new;
        row_sum[r] *= corr[r];
    }
}
__device__ __forceinline__ void neg_base_of(const float (&row_max)[2], float sl2,
                                            float (&neg_base)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) neg_base[r] = row_max[r] == -INFINITY ? 0.f : -row_max[r] * sl2;
}

// As online_softmax, with the lazy base (see above). Returns whether O must be
// rescaled by corr (uniform per warp).
__device__ __forceinline__ bool online_softmax_lazy(float (&s)[32], float (&row_max)[2],
                                                    float (&row_sum)[2], float (&corr)[2],
                                                    float sl2) {
    // Maxima over four independent partials per row (chains of 4 instead of 16: ncu showed the
    // consumer warps stalled on fixed-latency dependencies); the sums likewise in exp2_tile.
    float part_max[2][4];
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int c = 0; c < 4; ++c) part_max[r][c] = fmaxf(s[4 * c + 2 * r], s[4 * c + 2 * r + 1]);
#pragma unroll
    for (int j = 4; j < 8; ++j)
#pragma unroll
        for (int r = 0; r < 2; ++r)
            part_max[r][j & 3] =
                fmaxf(part_max[r][j & 3], fmaxf(s[4 * j + 2 * r], s[4 * j + 2 * r + 1]));
    float tile_max[2];
#pragma unroll
    for (int r = 0; r < 2; ++r)
        tile_max[r] =
            fmaxf(fmaxf(part_max[r][0], part_max[r][1]), fmaxf(part_max[r][2], part_max[r][3]));
    bool grow = false;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffff, tile_max[r], 1));
        tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffff, tile_max[r], 2));
        // -inf base (nothing seen yet): any finite maximum moves it; an all-masked tile never.
        grow |= tile_max[r] * sl2 > row_max[r] * sl2 + 8.f;
    }
    const bool rescale = __any_sync(0xffffffff, grow);
    if (rescale) move_base(tile_max, row_max, row_sum, corr, sl2);
    float neg_base[2];
    neg_base_of(row_max, sl2, neg_base);
    float tile_sum[2];
    exp2_tile(s, s, neg_base, sl2, tile_sum);
    row_sum[0] += tile_sum[0];
    row_sum[1] += tile_sum[1];
    return rescale;
}

// The softmax after the first tile: no maximum per tile. The exponent base (a maximum of scores
// already seen, so never above the true running maximum) stays until some P of a tile exceeds
// 2^kPBoundLog2, which the thread's partial row sums show (P > 2^k forces its sum above 2^k; a NaN
// or inf fails the test too); only then are the tile's maxima found (shuffles) and the base moved,
// and P computed again from S. Exact as before: softmax does not depend on the base, P <= 2^16 is
// far from fp32 overflow, and bf16 keeps its relative precision at any magnitude. No base yet
// (-inf, nothing seen) makes the fast path's P inf or NaN: the test sends it to the slow path.
// Writes P to p (S stays for the slow path); returns whether O must be rescaled by corr (uniform
// per warp). (H200, Table 1's shape, block 64: 0.167 ms vs 0.174 with a per-tile maximum.)
constexpr float kPBoundLog2 = 16.f;
__device__ __forceinline__ bool online_softmax_bounded(const float (&s)[32], float (&p)[32],
                                                       float (&row_max)[2], float (&row_sum)[2],
                                                       float (&corr)[2], float sl2) {
    const float bound = exp2f(kPBoundLog2);
    float tile_sum[2];
    {
        const float neg_base[2] = {-row_max[0] * sl2, -row_max[1] * sl2};
        exp2_tile(s, p, neg_base, sl2, tile_sum);
        const bool over = !(tile_sum[0] <= bound) || !(tile_sum[1] <= bound);
        if (!__any_sync(0xffffffff, over)) {
            row_sum[0] += tile_sum[0];
            row_sum[1] += tile_sum[1];
            return false;
        }
    }
    float tile_max[2];
    tile_row_maxima(s, tile_max);
    move_base(tile_max, row_max, row_sum, corr, sl2);
    float neg_base[2];
    neg_base_of(row_max, sl2, neg_base);
    exp2_tile(s, p, neg_base, sl2, tile_sum);
    row_sum[0] += tile_sum[0];
    row_sum[1] += tile_sum[1];
    return true;
}

// The warp-specialised kernels' end: as store_output, with O written into shared memory (10: the Q
// tile, free after the last QK; 12: its O buffer) and stored by TMA (rows past len_q are clipped by
// the copy engine). The stores of store_output (32 four-byte writes per thread, eight rows apart)
// and IEEE division and log2 made each CTA's end ~1.8 us of a ~25 us life (globaltimer stamps per
// CTA, H200, Table 1); this one ~1.0 us. Approximate reciprocal and log2 (MUFU, ~1 ulp) are far
// below bf16's rounding and the LSE's needs. Only the calling warpgroup's 128 threads take part
// (named barrier 1).
template <int kHeadDim>
__device__ __forceinline__ void store_output_tma(const AttentionParams& p, float (&o)[kHeadDim / 2],
                                                 float (&row_max)[2], float (&row_sum)[2], int b,
                                                 int h, int row0, uint32_t tile,
                                                 const CUtensorMap* map_o, bool wait_read = true) {
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int g = lane / 4, t = lane % 4;
    float inv[2], lse2[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        row_sum[r] += __shfl_xor_sync(0xffffffff, row_sum[r], 1);
        row_sum[r] += __shfl_xor_sync(0xffffffff, row_sum[r], 2);
        float rcp, lg;
        asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(rcp) : "f"(row_sum[r]));
        asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(lg) : "f"(row_sum[r]));
        inv[r] = row_sum[r] > 0.f ? rcp : 0.f;
        lse2[r] = row_sum[r] > 0.f ? row_max[r] * p.scale_log2 + lg : -INFINITY;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = warp * 16 + g + 8 * r;  // row % 8 == g: the swizzle phase
#pragma unroll
        for (int j = 0; j < kHeadDim / 8; ++j) {
            // Column 8 j + 2 t: panel j / 8, 16-byte chunk j % 8 (XOR the row's phase), 4 t bytes
            // in.
            const uint32_t addr = tile + (j >> 3) * 8192 + row * 128 + (((j & 7) ^ g) << 4) + 4 * t;
            const uint32_t v = pack_bf16(o[4 * j + 2 * r] * inv[r], o[4 * j + 2 * r + 1] * inv[r]);
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
        }
        if (p.lse != nullptr && t == 0 && row0 + row < p.len_q)
            p.lse[(static_cast<int64_t>(b) * p.heads + h) * p.len_q + row0 + row] =
                lse2[r] * 0.6931471805599453f;
    }
    fence_async_shared();
    asm volatile("bar.sync 1, 128;\n" ::: "memory");
    if (tid == 0) {
#pragma unroll
        for (int c = 0; c < kHeadDim / 64; ++c)
            asm volatile(
                "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%1, %2, %3, %4}], "
                "[%5];\n" ::"l"(reinterpret_cast<uint64_t>(map_o)),
                "r"(64 * c), "r"(row0), "r"(h), "r"(b), "r"(tile + c * 8192)
                : "memory");
        asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
        // The tile must stay until the copy engine has read it (the CTA's end frees it).
        if (wait_read) asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
    }
}

// A position in a ring of kSlots mbarrier-guarded slots: the slot and the parity of its pass.
template <int kSlots>
struct RingPos {
    int slot;
    uint32_t phase;
    __device__ __forceinline__ void step1() {
        if (++slot == kSlots) slot = 0, phase ^= 1;
    }
    __device__ __forceinline__ RingPos next() const {
        RingPos r = *this;
        r.step1();
        return r;
    }
};

// The producer's copy of one K or V tile into the ring's next slot, once the consumer has released
// it. A K slot also gets the tile's valid-key count (len_k - key0): published by the full
// barrier's arrive (release), read after the consumer's wait. tile_at, full, empty: the kernel's
// slot address and barriers.
template <int kPanels, int kSlots, int kTile, class TileAt, class Full, class Empty>
__device__ __forceinline__ void copy_tile(bool is_k, int key0, int h, int b, int len_k,
                                          const CUtensorMap* map_k, const CUtensorMap* map_v,
                                          volatile int* valid_keys, RingPos<kSlots>& pos,
                                          const TileAt& tile_at, const Full& full,
                                          const Empty& empty) {
    mbar_wait(empty(pos.slot), pos.phase ^ 1);
    if (is_k) valid_keys[pos.slot] = len_k - key0;
    mbar_expect_tx(full(pos.slot), kTile);
    if constexpr (kPanels == 2)
        tma_load_panels(tile_at(pos.slot), is_k ? map_k : map_v, key0, h, b, full(pos.slot));
    else
        tma_load(tile_at(pos.slot), is_k ? map_k : map_v, 0, key0, h, b, full(pos.slot));
    pos.step1();
}

// The producer's copies of an item's list tiles i0 .. i1 - 1 (tiles.ref(i): tile i's first key).
// The ring holds the K and V tiles in the order the consumer waits for them, so that it also
// releases them in that order: K_0, then K_i before V_{i-1}, then V_{n-1} (QK_i and PV_{i-1} are
// in flight together). (Before, V_{i-1} went ahead of K_i, which the consumer needs first. H200,
// Table 1, block 64, schedule 12: 0.1415-0.1425 vs 0.1440-0.1463 ms; K waits 97-102 vs 113-124
// cycles per tile.) Tile i1 - 1's V follows where it is the item's last tile (i1 = n, and the
// range is not empty).
template <int kPanels, int kSlots, int kTile, class Tiles, class TileAt, class Full, class Empty>
__device__ __forceinline__ void copy_item_tiles(const Tiles& tiles, int i0, int i1, int n, int h,
                                                int b, int len_k, const CUtensorMap* map_k,
                                                const CUtensorMap* map_v, volatile int* valid_keys,
                                                RingPos<kSlots>& pos, const TileAt& tile_at,
                                                const Full& full, const Empty& empty) {
    auto copy = [&](bool is_k, int key0) {
        copy_tile<kPanels, kSlots, kTile>(is_k, key0, h, b, len_k, map_k, map_v, valid_keys, pos,
                                          tile_at, full, empty);
    };
    int prev = i0 > 0 ? tiles.ref(i0 - 1) : 0;  // V_{i-1}'s first key
    for (int i = i0; i < i1; ++i) {
        const int key0 = tiles.ref(i);
        copy(true, key0);
        if (i > 0) copy(false, prev);
        prev = key0;
    }
    if (i0 < i1 && i1 == n) copy(false, prev);
}

// Schedule 10 (CSLA only): one CTA per query block, a producer warp and the consumer
// warpgroup. QK_{i+1} and PV_i are in flight together while the softmax of tile i + 1 runs
// (FlashAttention-3's intra-warpgroup pipelining); the softmax after the first tile finds no
// maximum per tile (online_softmax_bounded); Q, K_0 and V_0 are copied before the CTA barrier,
// and O leaves through shared memory (the Q tile) by a TMA store.
template <int kHeadDim>
__global__ void __launch_bounds__(160, WsTraits<kHeadDim>::kMinBlocks)
    sm90_ws_kernel(const AttentionParams p, const __grid_constant__ CUtensorMap map_q,
                   const __grid_constant__ CUtensorMap map_k,
                   const __grid_constant__ CUtensorMap map_v,
                   const __grid_constant__ CUtensorMap map_o) {
    using W = WsTraits<kHeadDim>;
    constexpr int kTile = W::kTileBytes;
    constexpr int kSlots = W::kSlots;
    extern __shared__ unsigned char smem_raw[];
    const uint32_t raw = smem_addr(smem_raw);
    const uint32_t smem = (raw + 1023) & ~1023u;
    const uint32_t q_tile = smem;
    const uint32_t q_full = smem + W::kBarOffset;
    volatile int* valid_keys =
        reinterpret_cast<volatile int*>(smem_raw + (smem - raw) + W::kValidOffset);
    auto tile_at = [&](int slot) { return smem + kTile * (1 + slot); };
    auto full = [&](int slot) { return q_full + 8 * (1 + slot); };
    auto empty = [&](int slot) { return q_full + 8 * (1 + kSlots + slot); };

    const int h = blockIdx.y, b = blockIdx.z;
    const int row0 = blockIdx.x * 64;
    const BlockTiles<kHeadDim> tiles(p, row0);
    const int n = tiles.n_tiles;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

    // At d64 the consumer's loop reads its tile count from shared memory: held in a register
    // through the loop, it was the one value ptxas spilled there (three CTAs per SM, 128
    // registers). H100, VAR-d30: as before; at d128 it cost every block active 1-2 %, so d128
    // keeps the register (csla_s15.md).
    volatile int* n_shared = valid_keys + kSlots;
    if (threadIdx.x == 128) {  // first thread of the producer warp
        if constexpr (kHeadDim == 64) *n_shared = n;
        mbar_init(q_full, 1);
#pragma unroll
        for (int st = 0; st < kSlots; ++st) {
            mbar_init(full(st), 1);
            mbar_init(empty(st), 4);  // one arrive per consumer warp
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        // Q (always: the consumer waits for it even without tiles, then stores O through its
        // buffer) and K_0 (slot 0, free) before the CTA barrier: a CTA's first scores waited
        // ~2.1 us after its start, ~1.4 with K_0 and V_0 here (H200 stamps).
        asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&map_k))
                     : "memory");
        asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&map_v))
                     : "memory");
        mbar_expect_tx(q_full, kTile);
#pragma unroll
        for (int c = 0; c < W::kPanels; ++c)
            tma_load(q_tile + c * 8192, &map_q, 64 * c, row0, h, b, q_full);
        // (V_0 too where tile 0 is the only one.)
        RingPos<kSlots> first{0, 0};
        copy_item_tiles<W::kPanels, kSlots, kTile>(tiles, 0, min(n, 1), n, h, b, p.len_k, &map_k,
                                                   &map_v, valid_keys, first, tile_at, full, empty);
    }
    __syncthreads();  // the last CTA-wide barrier: the producer warp leaves early

    if (warp == 4) {                      // producer: lane 0 issues every copy
        if (lane != 0 || n == 0) return;  // no tile: no copy may outlive the CTA
        RingPos<kSlots> pos{1, 0};        // tile 0's copies went before the barrier
        copy_item_tiles<W::kPanels, kSlots, kTile>(tiles, 1, n, n, h, b, p.len_k, &map_k, &map_v,
                                                   valid_keys, pos, tile_at, full, empty);
        return;
    }

    // Consumer warpgroup (warps 0-3). pos: the oldest slot not yet released (the ring holds the
    // tiles in the order they are waited for and released: copy_item_tiles).
    const int t = lane % 4;
    RingPos<kSlots> pos{0, 0};
    auto release = [&]() {
        __syncwarp();
        if (lane == 0) mbar_arrive(empty(pos.slot));
        pos.step1();
    };
    float o[kHeadDim / 2];
#pragma unroll
    for (int i = 0; i < kHeadDim / 2; ++i) o[i] = 0.f;
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
    const float sl2 = p.scale_log2;
    const uint64_t dq = smem_desc(q_tile, 16, 1024);

    // Issues S_i = Q K_i; returns the number of valid keys of tile i (from the producer; the
    // consumer reads no list).
    auto scores = [&](float(&s)[32]) -> int {
        mbar_wait(full(pos.slot), pos.phase);
        const int n_valid = valid_keys[pos.slot];
        wgmma_fence();
        const uint64_t dk = smem_desc(tile_at(pos.slot), 16, 1024);
        qk_from_descs<kHeadDim>(s, dq, dk);
        wgmma_commit();
        return n_valid;
    };
    // After S_i's wait: releases K_i's slot, masks keys past len_k (uniform per CTA).
    auto finish_scores = [&](float(&s)[32], int n_valid) {
        fence_regs(s);
        release();
        if (n_valid < 64) mask_tail(s, n_valid, t);
    };
    // v: V's ring position (in the loop pos.next(), K_i being at pos; after it pos).
    auto issue_pv_at = [&](const uint32_t(&pa)[4][4], RingPos<kSlots> v) {
        mbar_wait(full(v.slot), v.phase);
        wgmma_fence();
        const uint64_t dv = smem_desc(tile_at(v.slot), 64 * 128, 1024);
        pv_from_desc<kHeadDim>(o, pa, dv);
        wgmma_commit();
    };

    mbar_wait(q_full, 0);
    if (n > 0) {
        uint32_t pa[4][4];
        {
            float s[32];
            const int n_valid = scores(s);
            wgmma_wait<0>();
            finish_scores(s, n_valid);
            float corr[2];
            online_softmax_lazy(s, row_max, row_sum, corr, sl2);  // O is still 0
            pack_p(s, pa);
        }
        for (int i = 1; i < (kHeadDim == 64 ? *n_shared : n); ++i) {
            float s[32];
            const int n_valid = scores(s);
            fence_regs(o);
            fence_regs(pa);
            issue_pv_at(pa, pos.next());  // V_{i-1}, after K_i in the ring
            wgmma_wait<1>();              // S_i done; PV_{i-1} may still run
            finish_scores(s, n_valid);
            float corr[2];
            float pv[32];  // P; S stays for online_softmax_bounded's slow path
            const bool rescale = online_softmax_bounded(s, pv, row_max, row_sum, corr, sl2);
            // Pins the softmax above the wait: ptxas otherwise sank the exponentials below it,
            // serialising them after PV_{i-1} (seen in the SASS).
            fence_regs(pv);
            fence_regs(row_sum);
            wgmma_wait<0>();  // PV_{i-1} done: O and V_{i-1}'s slot are free
            fence_regs(o);
            release();
            if (rescale) rescale_o<kHeadDim>(o, corr);
            pack_p(pv, pa);
        }
        fence_regs(o);
        fence_regs(pa);
        issue_pv_at(pa, pos);
        wgmma_wait<0>();
        fence_regs(o);
        release();
    }
    store_output_tma<kHeadDim>(p, o, row_max, row_sum, b, h, row0, q_tile, &map_o);
}

// A claimed item (WorkOrder): its lin, or total where none is left. Called by the producer lane
// only; the consumer's SASS stays as without it (up to register names).
__device__ __forceinline__ int claim_item(const WorkOrder& order, int total) {
    const int n_claimed = total - order.dynamic_from;
    const int x =
        static_cast<int>(atomicInc(order.claims, static_cast<unsigned>(n_claimed + gridDim.x - 1)));
    // The shuffle (the producer lane alone) makes ptxas treat the item as uniform: without it the
    // producer computed every copy's coordinates in vector registers and moved them to uniform
    // ones for the TMA, and the tile loop fed by it ran 3-5 % slower with every block active.
    const int x_uniform = __shfl_sync(1u, x, 0);
    return x_uniform < n_claimed ? order.dynamic_from + x_uniform : total;
}

// Schedule 12: schedule 10's tile loop as a persistent kernel. G CTAs (two per SM) take work
// items (query block, head, batch) lin = blockIdx.x + k * G in turn (in launch order, so the
// items in flight at once are as L2-local as the CTAs of a plain launch). The K/V ring runs on
// across items, so an item's first tiles are usually in shared memory before its consumer gets to
// them. Each item's Q comes through the ring ahead of its K/V tiles, with its index, tile count
// and coordinates (ItemInfo: the consumer reads no lists or counts), and becomes QK's register
// operand, loaded once per item (QK then reads only K from shared memory); O is staged in a
// buffer of its own. (H200, Table 1, block 64: 0.1425-0.1428 vs 0.1434-0.1444 ms with two Q
// buffers in shared memory; K waits 91 vs 97-102 cycles per tile; 0.146-0.148 ms for the
// persistent kernel with Q in shared memory vs 0.155 for 10.)
template <int kHeadDim>
__global__ void __launch_bounds__(256, 2)
    sm90_persistent_kernel(const AttentionParams p, const __grid_constant__ CUtensorMap map_q,
                           const __grid_constant__ CUtensorMap map_k,
                           const __grid_constant__ CUtensorMap map_v,
                           const __grid_constant__ CUtensorMap map_o, const WorkOrder order) {
    using W = PersistentTraits<kHeadDim>;
    constexpr int kTile = W::kTileBytes;
    constexpr int kSlots = W::kSlots;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const uint32_t smem = smem_addr(smem_raw);
    if ((smem & 1023u) != 0) __trap();
    const uint32_t o_tile = smem;
    auto tile_at = [&](int slot) { return smem + kTile * (W::kOBufs + slot); };
    const uint32_t bars = smem + W::kBarOffset;
    auto full = [&](int slot) { return bars + 8 * slot; };
    auto empty = [&](int slot) { return bars + 8 * (kSlots + slot); };
    volatile int* valid_keys = reinterpret_cast<volatile int*>(smem_raw + W::kValidOffset);
    // Per Q slot: its item (lin -1: no more items), tile count and coordinates, so that the
    // consumer reads them instead of dividing.
    volatile ItemInfo* item_info = reinterpret_cast<volatile ItemInfo*>(valid_keys + kSlots);

    const int nqb = (p.len_q + 63) / 64;
    const int total = nqb * p.heads * p.batch;
    const int G = gridDim.x;
    auto coords = [&](int lin, int& row0, int& h, int& b) {
        row0 = (lin % nqb) * 64;
        h = (lin / nqb) % p.heads;
        b = lin / (nqb * p.heads);
    };
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

    if (threadIdx.x == 128) {
#pragma unroll
        for (int st = 0; st < kSlots; ++st) {
            mbar_init(full(st), 1);
            mbar_init(empty(st), 4);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&map_k))
                     : "memory");
        asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&map_v))
                     : "memory");
    }
    __syncthreads();

    if (warp >= 4) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(W::kProducerRegs) : "memory");
        if (warp != 4 || lane != 0) return;
        RingPos<kSlots> pos{0, 0};  // the ring runs on across items
        int lin = blockIdx.x;
        if (lin >= order.dynamic_from) lin = claim_item(order, total);
        for (;;) {
            // The item's Q and its ItemInfo go into the ring's next slot (lin -1 with a plain
            // arrive: no more items).
            mbar_wait(empty(pos.slot), pos.phase ^ 1);
            const uint32_t q_bar = full(pos.slot);
            if (lin >= total) {
                item_info[pos.slot].lin = -1;
                mbar_arrive(q_bar);
                break;
            }
            int row0, h, b;
            coords(lin, row0, h, b);
            const BlockTiles<kHeadDim> tiles(p, row0);
            const int n = tiles.n_tiles;
            volatile ItemInfo& info = item_info[pos.slot];  // published by the arrive below
            info.lin = lin, info.n = n, info.row0 = row0, info.h = h, info.b = b;
            mbar_expect_tx(q_bar, kTile);
            const uint32_t q_dst = tile_at(pos.slot);
#pragma unroll
            for (int c = 0; c < W::kPanels; ++c)
                tma_load(q_dst + c * 8192, &map_q, 64 * c, row0, h, b, q_bar);
            pos.step1();
            copy_item_tiles<W::kPanels, kSlots, kTile>(tiles, 0, n, n, h, b, p.len_k, &map_k,
                                                       &map_v, valid_keys, pos, tile_at, full,
                                                       empty);
            lin += G;
            if (lin >= order.dynamic_from) lin = claim_item(order, total);
        }
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(W::kConsumerRegs) : "memory");
    const int t = lane % 4;
    // pos: the oldest slot not yet released, as in sm90_ws_kernel (the ring runs on across items).
    RingPos<kSlots> pos{0, 0};
    auto release = [&]() {
        __syncwarp();
        if (lane == 0) mbar_arrive(empty(pos.slot));
        pos.step1();
    };
    const float sl2 = p.scale_log2;
    for (;;) {
        mbar_wait(full(pos.slot), pos.phase);
        const int lin = item_info[pos.slot].lin;
        if (lin < 0) break;
        const int n = item_info[pos.slot].n, row0 = item_info[pos.slot].row0,
                  h = item_info[pos.slot].h, b = item_info[pos.slot].b;
        float o[kHeadDim / 2];
#pragma unroll
        for (int i = 0; i < kHeadDim / 2; ++i) o[i] = 0.f;
        float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
        uint32_t qa[kHeadDim / 16][4];
        load_a_fragments<kHeadDim>(tile_at(pos.slot), qa);
        release();  // Q's slot
        auto scores = [&](float(&s)[32]) -> int {
            mbar_wait(full(pos.slot), pos.phase);
            const int n_valid = valid_keys[pos.slot];
            wgmma_fence();
            const uint64_t dk = smem_desc(tile_at(pos.slot), 16, 1024);
            qk_from_regs<kHeadDim>(s, qa, dk);
            wgmma_commit();
            return n_valid;
        };
        auto finish_scores = [&](float(&s)[32], int n_valid) {
            fence_regs(s);
            release();
            if (n_valid < 64) mask_tail(s, n_valid, t);
        };
        // v: V's ring position (inside the loop pos.next(), K_i being at pos; after it pos).
        auto issue_pv = [&](const uint32_t(&pa)[4][4], RingPos<kSlots> v) {
            mbar_wait(full(v.slot), v.phase);
            wgmma_fence();
            const uint64_t dv = smem_desc(tile_at(v.slot), 64 * 128, 1024);
            pv_from_desc<kHeadDim>(o, pa, dv);
            wgmma_commit();
        };
        if (n > 0) {
            uint32_t pa[4][4];
            {
                float s[32];
                const int n_valid = scores(s);
                wgmma_wait<0>();
                finish_scores(s, n_valid);
                float corr[2];
                online_softmax_lazy(s, row_max, row_sum, corr, sl2);
                pack_p(s, pa);
            }
            for (int i = 1; i < n; ++i) {
                float s[32];
                const int n_valid = scores(s);
                fence_regs(o);
                fence_regs(pa);
                issue_pv(pa, pos.next());  // V_{i-1}, after K_i in the ring
                wgmma_wait<1>();
                finish_scores(s, n_valid);
                float corr[2];
                float pv[32];
                const bool rescale = online_softmax_bounded(s, pv, row_max, row_sum, corr, sl2);
                fence_regs(pv);
                fence_regs(row_sum);
                wgmma_wait<0>();
                fence_regs(o);
                release();
                if (rescale) rescale_o<kHeadDim>(o, corr);
                pack_p(pv, pa);
            }
            fence_regs(o);
            fence_regs(pa);
            issue_pv(pa, pos);
            wgmma_wait<0>();
            fence_regs(o);
            release();
        }
        // O_{k-1} must have left the O buffer (its copy was issued an item ago).
        if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
        asm volatile("bar.sync 1, 128;\n" ::: "memory");
        store_output_tma<kHeadDim>(p, o, row_max, row_sum, b, h, row0, o_tile, &map_o, false);
    }
    if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
#else
template <int kHeadDim, int kStages, bool kGathered>
__global__ void sm90_attention_kernel(const AttentionParams) {}
template <int kHeadDim>
__global__ void sm90_ws_kernel(const AttentionParams, const __grid_constant__ CUtensorMap,
                               const __grid_constant__ CUtensorMap,
                               const __grid_constant__ CUtensorMap,
                               const __grid_constant__ CUtensorMap) {}
template <int kHeadDim>
__global__ void sm90_persistent_kernel(const AttentionParams, const __grid_constant__ CUtensorMap,
                                       const __grid_constant__ CUtensorMap,
                                       const __grid_constant__ CUtensorMap,
                                       const __grid_constant__ CUtensorMap, const WorkOrder) {}
#endif

// The shared-memory opt-in is set once per kernel (as the sm_80 kernels do).
template <int kHeadDim, int kStages, bool kGathered>
cudaError_t launch_sm90(const AttentionParams& p, cudaStream_t stream) {
    constexpr auto kKernel = sm90_attention_kernel<kHeadDim, kStages, kGathered>;
    constexpr int kSmem = Sm90Traits<kHeadDim, kStages>::kSmemBytes;
    static const cudaError_t attr_err =
        cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
    if (attr_err != cudaSuccess) return attr_err;
    if (p.len_q <= 0 || p.heads <= 0 || p.batch <= 0) return cudaSuccess;
    const dim3 grid((p.len_q + 63) / 64, p.heads, p.batch);
    kKernel<<<grid, 128, kSmem, stream>>>(p);
    return cudaGetLastError();
}

// The tensor maps of schedules 10 and 12: a (batch, heads, len, head dim) bf16 tensor with the
// given element strides: 64-column (128-byte) boxes with the 128-byte swizzle; rows past len read
// as zeros. The driver's encoder is found once through the runtime (no libcuda link). False where
// the map cannot be made (e.g. a zero stride): the caller falls back to 6. panels = 1: a 4-d map
// (head dim, len, heads, batch), 64 x 64 boxes (a copy per 64-column panel). panels = 2 (K and V at
// d128): the head dim as 64 columns x 2 panels with the panel dim outermost in the box, (64, len,
// 2, heads, batch), box 64 x 64 x 2: one copy brings both panels of a 64-row tile in the kernels'
// layout (panel c at c x 8 KiB). (H200, Table 1, block 64: 0.1407-0.1410 vs 0.1415-0.1420 ms, every
// block active -0.8 %.)
inline bool make_tensor_map(CUtensorMap* map, const void* ptr, const int64_t (&stride)[3], int len,
                            const AttentionParams& p, int head_dim, int panels = 1) {
    static const auto encode = [] {
        void* fn = nullptr;
        cudaDriverEntryPointQueryResult found{};
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                             cudaEnableDefault, &found) != cudaSuccess ||
            found != cudaDriverEntryPointSuccess)
            fn = nullptr;
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
    }();
    if (encode == nullptr || len <= 0 || (panels == 2 && head_dim != 128)) return false;
    const auto u64 = [](int64_t x) { return static_cast<cuuint64_t>(x); };
    const cuuint64_t len_u = u64(len), heads = u64(p.heads), batch = u64(p.batch);
    const cuuint64_t row = u64(stride[2]) * 2, head = u64(stride[1]) * 2, item = u64(stride[0]) * 2;
    const cuuint64_t dims1[4] = {u64(head_dim), len_u, heads, batch},
                     strides1[3] = {row, head, item};
    const cuuint64_t dims2[5] = {64, len_u, 2, heads, batch}, strides2[4] = {row, 128, head, item};
    const cuuint32_t box[5] = {64, 64, static_cast<cuuint32_t>(panels), 1, 1},
                     unit[5] = {1, 1, 1, 1, 1};
    const bool two = panels == 2;
    return encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, two ? 5 : 4, const_cast<void*>(ptr),
                  two ? dims2 : dims1, two ? strides2 : strides1, box, unit,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// K's or V's map for copy_tile (one copy per tile).
template <int kHeadDim>
bool make_kv_map(CUtensorMap* map, const void* ptr, const int64_t (&stride)[3],
                 const AttentionParams& p) {
    return make_tensor_map(map, ptr, stride, p.len_k, p, kHeadDim, kHeadDim / 64);
}

// Schedule 10 (CSLA only). Returns cudaErrorNotSupported where the tensor maps cannot be made
// (nothing launched).
template <int kHeadDim>
cudaError_t launch_sm90_ws(const AttentionParams& p, cudaStream_t stream) {
    using W = WsTraits<kHeadDim>;
    constexpr auto kKernel = sm90_ws_kernel<kHeadDim>;
    constexpr int kSmem = W::kSmemBytes;
    static const cudaError_t attr_err =
        cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
    if (attr_err != cudaSuccess) return attr_err;
    if (p.len_q <= 0 || p.heads <= 0 || p.batch <= 0) return cudaSuccess;
    alignas(64) CUtensorMap mq, mk, mv;
    if (!make_tensor_map(&mq, p.q, p.q_stride, p.len_q, p, kHeadDim) ||
        !make_kv_map<kHeadDim>(&mk, p.k, p.k_stride, p) ||
        !make_kv_map<kHeadDim>(&mv, p.v, p.v_stride, p))
        return cudaErrorNotSupported;
    alignas(64) CUtensorMap mo;  // the output's map (its TMA store)
    if (!make_tensor_map(&mo, p.o, p.o_stride, p.len_q, p, kHeadDim)) return cudaErrorNotSupported;
    const dim3 grid((p.len_q + 63) / 64, p.heads, p.batch);
    kKernel<<<grid, W::kThreads, kSmem, stream>>>(p, mq, mk, mv, mo);
    return cudaGetLastError();
}

// One claim counter per device and stream (zeroed once; each launch leaves it at zero, and
// launches on one stream run one after another). None is made while the stream is being captured
// into a graph (no allocation there): such launches stay round-robin. A graph captured after the
// counter exists uses its capture stream's counter, so it must not be replayed on another stream
// while that stream runs these kernels.
inline unsigned* claim_counter(int device, cudaStream_t stream) {
    static std::mutex mutex;
    static std::map<std::pair<int, cudaStream_t>, unsigned*> counters;
    const std::lock_guard<std::mutex> lock(mutex);
    const auto key = std::make_pair(device, stream);
    const auto it = counters.find(key);
    if (it != counters.end()) return it->second;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess ||
        capture != cudaStreamCaptureStatusNone)
        return nullptr;
    unsigned* counter = nullptr;
    if (cudaMalloc(&counter, sizeof(unsigned)) != cudaSuccess) return nullptr;
    if (cudaMemset(counter, 0, sizeof(unsigned)) != cudaSuccess) {
        cudaFree(counter);
        return nullptr;
    }
    counters.emplace(key, counter);
    return counter;
}

// The persistent kernel's work order (WorkOrder): the last partial round of items, from the head
// it starts in, is claimed (first_claimed_item; none where no counter can be had). H100, Table 1,
// block 64, schedule 12: 0.1522-0.1527 vs 0.1556-0.1575 ms round-robin; every block active and
// block 128 unchanged (csla_s15.md).
inline WorkOrder work_order(int nqb, int total, int grid, int device, cudaStream_t stream) {
    WorkOrder order;
    const int from = first_claimed_item(nqb, total, grid);
    if (from >= total) return order;
    order.claims = claim_counter(device, stream);
    if (order.claims != nullptr) order.dynamic_from = from;
    return order;
}

// Schedule 12 (CSLA only), as launch_sm90_ws.
template <int kHeadDim>
cudaError_t launch_sm90_persistent(const AttentionParams& p, cudaStream_t stream) {
    using W = PersistentTraits<kHeadDim>;
    constexpr auto kKernel = sm90_persistent_kernel<kHeadDim>;
    constexpr int kSmem = W::kSmemBytes;
    static const cudaError_t attr_err =
        cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
    if (attr_err != cudaSuccess) return attr_err;
    if (p.len_q <= 0 || p.heads <= 0 || p.batch <= 0) return cudaSuccess;
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        sms <= 0)
        return cudaErrorNotSupported;
    alignas(64) CUtensorMap mq, mk, mv, mo;
    if (!make_tensor_map(&mq, p.q, p.q_stride, p.len_q, p, kHeadDim) ||
        !make_kv_map<kHeadDim>(&mk, p.k, p.k_stride, p) ||
        !make_kv_map<kHeadDim>(&mv, p.v, p.v_stride, p) ||
        !make_tensor_map(&mo, p.o, p.o_stride, p.len_q, p, kHeadDim))
        return cudaErrorNotSupported;
    const int nqb = (p.len_q + 63) / 64;
    const int total = nqb * p.heads * p.batch;
    const int grid = std::min(total, 2 * sms);
    kKernel<<<grid, W::kThreads, kSmem, stream>>>(p, mq, mk, mv, mo,
                                                  work_order(nqb, total, grid, dev, stream));
    return cudaGetLastError();
}

// How often a CSLA call ran 6 instead of its warp-specialised kernel (no tensor map): tests
// check that what they check is what the dispatch normally runs.
inline std::atomic<int>& ws_fallbacks() {
    static std::atomic<int> n{0};
    return n;
}

// CSLA (block-sparse tiles): sm90_schedule_for's kernel (12 at d128, 10 at d64); 6 where no
// tensor map can be made.
template <int kHeadDim>
cudaError_t launch_csla_sm90(const AttentionParams& p, cudaStream_t stream) {
    constexpr int kSchedule = sm90_schedule_for(kHeadDim, false);
    static_assert(kSchedule == 12 || kSchedule == 10, "CSLA runs 12 or 10 (the rest was deleted)");
    cudaError_t err;
    if constexpr (kSchedule == 12)
        err = launch_sm90_persistent<kHeadDim>(p, stream);
    else
        err = launch_sm90_ws<kHeadDim>(p, stream);
    if (err != cudaErrorNotSupported) return err;
    ++ws_fallbacks();
    return launch_sm90<kHeadDim, 1, false>(p, stream);
}

// CS4A (gathered tiles, no TMA form): sm90_schedule_for's kernel (6, one K/V stage, at d128; 0,
// two stages, at d64).
template <int kHeadDim>
cudaError_t launch_cs4a_sm90(const AttentionParams& p, cudaStream_t stream) {
    constexpr int kSchedule = sm90_schedule_for(kHeadDim, true);
    static_assert(kSchedule == 6 || kSchedule == 0, "CS4A runs 6 or 0 (the rest was deleted)");
    return launch_sm90 < kHeadDim, kSchedule == 6 ? 1 : 2, true > (p, stream);
}

}  // namespace varscope::kernels::cuda::sm90
