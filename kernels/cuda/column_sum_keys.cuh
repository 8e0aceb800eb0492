// SparVAR's decision-scale column sums, keys-major (sparvar.txt §3.2: D[b,h,g,j] = sum of the
// probabilities P[i, j] over the query rows i of block g, from the rows' log-sum-exp): one CTA
// owns 64 keys of one (batch, head), computes S^T = K Q^T tile by tile over all query rows with
// mma.sync (the keys as the A operand, 16 per warp, loaded once) and sums each key's
// probabilities in registers, writing them at the end of every query block (blocks are whole
// tiles: block_q is a multiple of 64). So no column reduction across lanes, no shared-memory pass
// and no atomics per tile, as the query-major epilogue of the attention kernel needed; every
// (block, key) is written once, the same on every run. It replaced that epilogue after `bench
// cs4a` timed both from SDPA's lse in one run (H200, 1024^2 decision scale, ms: VAR-d30 0.299 vs
// 0.376, Infinity-2B 0.250 vs 0.334, 8B 0.192 vs 0.252; the epilogue is in commit 1f094e9,
// bench/results/2026-11-30-h200/session36).
#pragma once

#include "kernels/cuda/attention_kernel.cuh"

namespace varscope::kernels::cuda {

template <class Tr>
__global__ void __launch_bounds__(Tr::kThreads) column_sum_keys_kernel(const AttentionParams p) {
    using Elem = typename Tr::Elem;
    constexpr int kBN = Tr::kBlockN;  // query rows per tile
    constexpr int kCh = Tr::kChunks;

    extern __shared__ __align__(128) unsigned char smem_raw[];
    Elem* s_k = reinterpret_cast<Elem*>(smem_raw);  // the CTA's 64 keys
    Elem* s_q = s_k + Tr::kQElems;                  // 2 stages of kBN query rows
    float* s_lse = reinterpret_cast<float*>(s_q + 2 * Tr::kTileElems);  // [2][kBN], log2 units

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int h = blockIdx.y, b = blockIdx.z;
    const int k0 = blockIdx.x * Tr::kBlockM;
    const Elem* k_g = static_cast<const Elem*>(p.k) + b * p.k_stride[0] + h * p.k_stride[1];
    const Elem* q_g = static_cast<const Elem*>(p.q) + b * p.q_stride[0] + h * p.q_stride[1];
    const float* lse_bh = p.lse_in + (static_cast<int64_t>(b) * p.heads + h) * p.len_q;
    const int n_tiles = detail::ceil_div(p.len_q, kBN), tiles_per_block = p.block_q / kBN;

#pragma unroll
    for (int i = tid; i < Tr::kBlockM * kCh; i += Tr::kThreads) {
        const int r = i / kCh, c = i % kCh;
        const bool ok = k0 + r < p.len_k;
        const int64_t off = ok ? static_cast<int64_t>(k0 + r) * p.k_stride[2] + c * 8 : 0;
        detail::cp_async_16(s_k + detail::swizzle<kCh>(r, c), k_g + off, ok);
    }
    detail::cp_async_commit();

    auto load_tile = [&](int t, int stage) {
        const int start = t * kBN;
        Elem* dq = s_q + stage * Tr::kTileElems;
#pragma unroll
        for (int i = tid; i < kBN * kCh; i += Tr::kThreads) {
            const int r = i / kCh, c = i % kCh, row = start + r;
            const bool ok = row < p.len_q;
            const int64_t off = ok ? static_cast<int64_t>(row) * p.q_stride[2] + c * 8 : 0;
            detail::cp_async_16(dq + detail::swizzle<kCh>(r, c), q_g + off, ok);
        }
        for (int r = tid; r < kBN; r += Tr::kThreads) {
            const int row = start + r;
            // Rows past the end and rows without keys (lse = -inf) contribute nothing.
            float l = row < p.len_q ? lse_bh[row] * 1.4426950408889634f : INFINITY;
            if (!(l > -INFINITY)) l = INFINITY;
            s_lse[stage * kBN + r] = l;
        }
    };
    if (n_tiles > 0) load_tile(0, 0);
    detail::cp_async_commit();
    detail::cp_async_wait<1>();  // the keys
    __syncthreads();

    uint32_t k_frag[Tr::kD / 16][4];
    detail::load_a_fragments<Tr>(k_frag, s_k, warp, lane);

    // This thread's keys in the mma C layout: k0 + warp*16 + lane/4 and 8 rows below it.
    float acc[2] = {0.f, 0.f};
    const int col_base = 2 * (lane & 3);
    for (int t = 0; t < n_tiles; ++t) {
        const int stage = t & 1;
        if (t + 1 < n_tiles) load_tile(t + 1, stage ^ 1);
        detail::cp_async_commit();
        detail::cp_async_wait<1>();
        __syncthreads();

        // S^T = K Q^T: this warp's 16 keys x kBN query rows.
        float s[Tr::kNTiles][4];
        detail::tile_scores<Tr>(s, k_frag, s_q + stage * Tr::kTileElems, lane);
        const float* lse_s = s_lse + stage * kBN;
#pragma unroll
        for (int nt = 0; nt < Tr::kNTiles; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float x = s[nt][e] * p.scale_log2;
                acc[e >> 1] += exp2f(x - lse_s[nt * 8 + col_base + (e & 1)]);
            }
        }
        if ((t + 1) % tiles_per_block == 0 || t + 1 == n_tiles) {
            // The end of query block qb: the four lanes of a quad hold the same two keys'
            // partial sums.
            const int qb = t / tiles_per_block;
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], 1);
                acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], 2);
            }
            if ((lane & 3) == 0) {
                float* dst =
                    p.colsum +
                    ((static_cast<int64_t>(b) * p.heads + h) * p.num_query_blocks + qb) * p.len_k;
                const int key = k0 + warp * 16 + (lane >> 2);
                if (key < p.len_k) dst[key] = acc[0];
                if (key + 8 < p.len_k) dst[key + 8] = acc[1];
            }
            acc[0] = acc[1] = 0.f;
        }
        __syncthreads();  // the next iteration's loads overwrite the other stage
    }
    detail::cp_async_wait<0>();
}

template <int kHeadDim, typename Elem>
cudaError_t launch_column_sum_keys_for(const AttentionParams& p, cudaStream_t stream) {
    using Tr = AttentionTraits<kHeadDim, Elem>;
    if (p.len_k == 0 || p.len_q == 0 || p.batch == 0 || p.heads == 0) return cudaSuccess;
    const size_t smem =
        sizeof(Elem) * (Tr::kQElems + 2 * Tr::kTileElems) + sizeof(float) * 2 * Tr::kBlockN;
    auto kernel = column_sum_keys_kernel<Tr>;
    static const cudaError_t attr_err = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (attr_err != cudaSuccess) return attr_err;
    const dim3 grid(detail::ceil_div(p.len_k, Tr::kBlockM), p.heads, p.batch);
    kernel<<<grid, Tr::kThreads, smem, stream>>>(p);
    return cudaGetLastError();
}

}  // namespace varscope::kernels::cuda
