// Tiled attention over a list of key tiles: FlashAttention-2 style online softmax with
// mma.sync (m16n8k16, bf16/fp16 in, fp32 accumulate), ldmatrix from XOR-swizzled shared memory
// and a two-stage cp.async pipeline. One CTA = 64 query rows of one (batch, head); 4 warps of 16
// rows each. The tile source (block list, gathered rows, all keys) and the epilogue (output,
// log-sum-exp only, column sums) are template parameters, so CSLA, CS4A and the decision-scale
// column sum share one carefully checked inner loop.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>
#include <cstdint>

#include "kernels/cuda/attention_params.h"

namespace varscope::kernels::cuda {

template <int kHeadDim, typename Elem_>
struct AttentionTraits {
    using Elem = Elem_;
    static constexpr int kD = kHeadDim;
    static constexpr int kBlockM = kQueryTile;  // query rows per CTA
    static constexpr int kBlockN = kKeyTile;    // keys per tile
    static constexpr int kWarps = 4;
    static constexpr int kThreads = kWarps * 32;
    static constexpr int kChunks = kD / 8;  // 16-byte chunks per row
    static constexpr int kTileElems = kBlockN * kD;
    static constexpr int kQElems = kBlockM * kD;
    static constexpr int kNTiles = kBlockN / 8;  // mma n-tiles of S per warp
    static constexpr int kDTiles = kD / 8;       // mma n-tiles of O per warp
    static_assert(kD == 64 || kD == 128, "head dim 64 or 128");
    static_assert(kBlockM == kWarps * 16, "one 16-row mma tile per warp");

    static constexpr size_t smem_bytes(bool with_v) {
        return sizeof(Elem_) * (kQElems + 2 * kTileElems * (with_v ? 2 : 1)) +
               sizeof(int) * 2 * kBlockN;
    }
};

namespace detail {

// Element offset of 16-byte chunk `chunk` of row `row`: chunks are XOR-swizzled with the row so
// that the 8 rows one ldmatrix phase reads fall into 8 different bank groups.
template <int kChunks>
__device__ __forceinline__ int swizzle(int row, int chunk) {
    return row * kChunks * 8 + ((chunk ^ (row & 7)) * 8);
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte async copy; when !valid the destination is zero-filled (no global read).
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
    const int src_bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
                 "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::);
}
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}

template <typename Elem>
struct Mma;
template <>
struct Mma<__nv_bfloat16> {
    __device__ __forceinline__ static void run(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                               uint32_t b1) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    __device__ __forceinline__ static uint32_t pack(float lo, float hi) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t*>(&v);
    }
};
template <>
struct Mma<__half> {
    __device__ __forceinline__ static void run(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                               uint32_t b1) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    __device__ __forceinline__ static uint32_t pack(float lo, float hi) {
        __half2 v = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t*>(&v);
    }
};

__host__ __device__ __forceinline__ int ceil_div(int a, int b) {
    return (a + b - 1) / b;
}

// One warp's 16 rows of a swizzled shared tile as mma A fragments, one per 16-wide k step.
template <class Tr>
__device__ __forceinline__ void load_a_fragments(uint32_t (&a)[Tr::kD / 16][4],
                                                 const typename Tr::Elem* tile, int warp,
                                                 int lane) {
#pragma unroll
    for (int kk = 0; kk < Tr::kD / 16; ++kk)
        ldmatrix_x4(a[kk],
                    tile + swizzle<Tr::kChunks>(warp * 16 + (lane & 15), kk * 2 + (lane >> 4)));
}

// One warp's 16 x kBlockN scores S = A B^T of a tile: `a` the warp's 16 rows as mma A fragments
// (loaded once), `b_tile` kBlockN rows of the swizzled shared tile. The attention kernel passes
// queries and keys, the keys-major column sums keys and queries.
template <class Tr>
__device__ __forceinline__ void tile_scores(float (&s)[Tr::kNTiles][4],
                                            const uint32_t (&a)[Tr::kD / 16][4],
                                            const typename Tr::Elem* b_tile, int lane) {
    using M = Mma<typename Tr::Elem>;
#pragma unroll
    for (int i = 0; i < Tr::kNTiles; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < Tr::kD / 16; ++kk) {
#pragma unroll
        for (int np = 0; np < Tr::kNTiles / 2; ++np) {
            uint32_t bf[4];
            ldmatrix_x4(bf, b_tile + swizzle<Tr::kChunks>(np * 16 + (lane & 7) + ((lane >> 4) << 3),
                                                          kk * 2 + ((lane >> 3) & 1)));
            M::run(s[2 * np], a[kk], bf[0], bf[1]);
            M::run(s[2 * np + 1], a[kk], bf[2], bf[3]);
        }
    }
}

// The key tiles of kBN keys a query tile visits: every tile (Dense), the tiles of the active key
// blocks on its list (BlockSparse), or kBN-entry chunks of its index list (Gathered).
template <TileMode kMode, int kBN>
struct KeyTiles {
    const int32_t* list = nullptr;
    int count = 0, n_tiles = 0, tiles_per_block, block_k, len_k;

    __device__ __forceinline__ KeyTiles(const AttentionParams& p, int qb)
        : tiles_per_block(p.block_k / kBN), block_k(p.block_k), len_k(p.len_k) {
        if constexpr (kMode == TileMode::Dense) {
            n_tiles = ceil_div(p.len_k, kBN);
        } else {
            list = p.lists + static_cast<int64_t>(qb) * p.list_stride;
            count = min(max(p.counts[qb], 0), p.list_stride);
            n_tiles =
                kMode == TileMode::BlockSparse ? count * tiles_per_block : ceil_div(count, kBN);
        }
    }
    // First key of tile t (BlockSparse / Dense); len_k when the block entry is invalid.
    __device__ __forceinline__ int start(int t) const {
        if constexpr (kMode == TileMode::Dense) {
            return t * kBN;
        } else {
            const int block = list[t / tiles_per_block];
            if (block < 0) return len_k;
            const long first = static_cast<long>(block) * block_k + (t % tiles_per_block) * kBN;
            return first < len_k ? static_cast<int>(first) : len_k;
        }
    }
};

}  // namespace detail

template <class Tr, TileMode kMode, Epilogue kEpi>
__global__ void __launch_bounds__(Tr::kThreads, 2) attention_tiles_kernel(const AttentionParams p) {
    using Elem = typename Tr::Elem;
    using M = detail::Mma<Elem>;
    constexpr bool kWithV = kEpi == Epilogue::Output;
    constexpr int kBN = Tr::kBlockN;
    constexpr int kCh = Tr::kChunks;

    extern __shared__ __align__(128) unsigned char smem_raw[];
    Elem* s_q = reinterpret_cast<Elem*>(smem_raw);
    Elem* s_k = s_q + Tr::kQElems;         // 2 stages
    Elem* s_v = s_k + 2 * Tr::kTileElems;  // 2 stages when kWithV
    int* s_valid = reinterpret_cast<int*>(s_v + (kWithV ? 2 * Tr::kTileElems : 0));  // [2][kBN]

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int h = blockIdx.y, b = blockIdx.z;
    const int q0 = blockIdx.x * Tr::kBlockM;
    const Elem* q_g = static_cast<const Elem*>(p.q) + b * p.q_stride[0] + h * p.q_stride[1];
    const Elem* k_g = static_cast<const Elem*>(p.k) + b * p.k_stride[0] + h * p.k_stride[1];
    const Elem* v_g =
        kWithV ? static_cast<const Elem*>(p.v) + b * p.v_stride[0] + h * p.v_stride[1] : nullptr;

    // --- the key tiles this query tile visits ---
    const int qb = q0 / p.block_q;
    const detail::KeyTiles<kMode, kBN> tiles(p, qb);
    const int32_t* const list = tiles.list;
    const int count = tiles.count, n_tiles = tiles.n_tiles;
    auto tile_start = [&](int t) { return tiles.start(t); };

    auto load_tile = [&](int t, int stage) {
        const int start = kMode == TileMode::Gathered ? 0 : tile_start(t);
        Elem* dk = s_k + stage * Tr::kTileElems;
        Elem* dv = s_v + stage * Tr::kTileElems;
#pragma unroll
        for (int i = tid; i < kBN * kCh; i += Tr::kThreads) {
            const int r = i / kCh, c = i % kCh;
            int key;
            if constexpr (kMode == TileMode::Gathered) {
                const int slot = t * kBN + r;
                key = slot < count ? list[slot] : -1;
                if (key >= p.len_k) key = -1;
            } else {
                key = start + r < p.len_k ? start + r : -1;
            }
            const bool ok = key >= 0;
            const int64_t off = ok ? static_cast<int64_t>(key) * p.k_stride[2] + c * 8 : 0;
            detail::cp_async_16(dk + detail::swizzle<kCh>(r, c), k_g + off, ok);
            if constexpr (kWithV) {
                const int64_t voff = ok ? static_cast<int64_t>(key) * p.v_stride[2] + c * 8 : 0;
                detail::cp_async_16(dv + detail::swizzle<kCh>(r, c), v_g + voff, ok);
            }
            if (c == 0) s_valid[stage * kBN + r] = ok ? 1 : 0;
        }
    };

    // --- Q tile -> shared -> registers (A fragments, one per 16-wide k step) ---
#pragma unroll
    for (int i = tid; i < Tr::kBlockM * kCh; i += Tr::kThreads) {
        const int r = i / kCh, c = i % kCh;
        const bool ok = q0 + r < p.len_q;
        const int64_t off = ok ? static_cast<int64_t>(q0 + r) * p.q_stride[2] + c * 8 : 0;
        detail::cp_async_16(s_q + detail::swizzle<kCh>(r, c), q_g + off, ok);
    }
    detail::cp_async_commit();
    if (n_tiles > 0) load_tile(0, 0);
    detail::cp_async_commit();
    detail::cp_async_wait<1>();
    __syncthreads();

    uint32_t q_frag[Tr::kD / 16][4];
    detail::load_a_fragments<Tr>(q_frag, s_q, warp, lane);

    // Rows of this thread in the mma C layout: r0 = lane/4, r1 = r0 + 8 (within the warp's 16).
    const int row0 = q0 + warp * 16 + (lane >> 2);
    const int row1 = row0 + 8;
    const int col_base = 2 * (lane & 3);

    float o_acc[kWithV ? Tr::kDTiles : 1][4];
    if constexpr (kWithV) {
#pragma unroll
        for (int i = 0; i < Tr::kDTiles; ++i)
            o_acc[i][0] = o_acc[i][1] = o_acc[i][2] = o_acc[i][3] = 0.f;
    }
    float row_max[2] = {-INFINITY, -INFINITY};  // running max of scaled logits (log2 units)
    float row_sum[2] = {0.f, 0.f};              // thread-partial running sums

    for (int t = 0; t < n_tiles; ++t) {
        const int stage = t & 1;
        if (t + 1 < n_tiles) load_tile(t + 1, stage ^ 1);
        detail::cp_async_commit();
        detail::cp_async_wait<1>();
        __syncthreads();

        // S = Q K^T for this warp's 16 rows x kBN keys.
        float s[Tr::kNTiles][4];
        detail::tile_scores<Tr>(s, q_frag, s_k + stage * Tr::kTileElems, lane);

        // Scale into log2 units and mask keys that are past the end / padding / invalid.
        bool full_tile;
        int n_valid = kBN;
        if constexpr (kMode == TileMode::Gathered) {
            full_tile = false;
        } else {
            n_valid = p.len_k - tile_start(t);
            full_tile = n_valid >= kBN;
        }
#pragma unroll
        for (int nt = 0; nt < Tr::kNTiles; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                float x = s[nt][e] * p.scale_log2;
                if (!full_tile) {
                    const int col = nt * 8 + col_base + (e & 1);
                    bool ok;
                    if constexpr (kMode == TileMode::Gathered) {
                        ok = s_valid[stage * kBN + col] != 0;
                    } else {
                        ok = col < n_valid;
                    }
                    if (!ok) x = -INFINITY;
                }
                s[nt][e] = x;
            }
        }

        // Online softmax update.
        float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int nt = 0; nt < Tr::kNTiles; ++nt) {
            tile_max[0] = fmaxf(tile_max[0], fmaxf(s[nt][0], s[nt][1]));
            tile_max[1] = fmaxf(tile_max[1], fmaxf(s[nt][2], s[nt][3]));
        }
        float alpha[2], base[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
            tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
            const float m_new = fmaxf(row_max[r], tile_max[r]);
            base[r] = m_new == -INFINITY ? 0.f : m_new;  // all masked so far: avoid inf - inf
            alpha[r] = exp2f(row_max[r] - base[r]);
            row_max[r] = m_new;
        }
        float tile_sum[2] = {0.f, 0.f};
#pragma unroll
        for (int nt = 0; nt < Tr::kNTiles; ++nt) {
            s[nt][0] = exp2f(s[nt][0] - base[0]);
            s[nt][1] = exp2f(s[nt][1] - base[0]);
            s[nt][2] = exp2f(s[nt][2] - base[1]);
            s[nt][3] = exp2f(s[nt][3] - base[1]);
            tile_sum[0] += s[nt][0] + s[nt][1];
            tile_sum[1] += s[nt][2] + s[nt][3];
        }
        row_sum[0] = row_sum[0] * alpha[0] + tile_sum[0];
        row_sum[1] = row_sum[1] * alpha[1] + tile_sum[1];

        if constexpr (kWithV) {
#pragma unroll
            for (int dt = 0; dt < Tr::kDTiles; ++dt) {
                o_acc[dt][0] *= alpha[0];
                o_acc[dt][1] *= alpha[0];
                o_acc[dt][2] *= alpha[1];
                o_acc[dt][3] *= alpha[1];
            }
            const Elem* v_s = s_v + stage * Tr::kTileElems;
#pragma unroll
            for (int kk = 0; kk < kBN / 16; ++kk) {
                const uint32_t a[4] = {M::pack(s[2 * kk][0], s[2 * kk][1]),
                                       M::pack(s[2 * kk][2], s[2 * kk][3]),
                                       M::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                       M::pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
                for (int dp = 0; dp < Tr::kD / 16; ++dp) {
                    uint32_t bf[4];
                    detail::ldmatrix_x4_trans(
                        bf,
                        v_s + detail::swizzle<kCh>(kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3),
                                                   dp * 2 + (lane >> 4)));
                    M::run(o_acc[2 * dp], a, bf[0], bf[1]);
                    M::run(o_acc[2 * dp + 1], a, bf[2], bf[3]);
                }
            }
        }
        __syncthreads();  // the next iteration's loads overwrite the other stage
    }
    detail::cp_async_wait<0>();

    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
        row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
        inv[r] = row_sum[r] > 0.f ? 1.f / row_sum[r] : 0.f;  // no keys: output 0
    }
    if (p.lse != nullptr && (lane & 3) == 0) {
        float* lse_bh = p.lse + (static_cast<int64_t>(b) * p.heads + h) * p.len_q;
        const int rows[2] = {row0, row1};
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            if (rows[r] < p.len_q) {
                lse_bh[rows[r]] = row_sum[r] > 0.f
                                      ? (row_max[r] + log2f(row_sum[r])) * 0.6931471805599453f
                                      : -INFINITY;
            }
        }
    }
    if constexpr (kWithV) {
        Elem* o_g = static_cast<Elem*>(p.o) + b * p.o_stride[0] + h * p.o_stride[1];
#pragma unroll
        for (int dt = 0; dt < Tr::kDTiles; ++dt) {
            const int col = dt * 8 + col_base;
            if (row0 < p.len_q) {
                *reinterpret_cast<uint32_t*>(o_g + static_cast<int64_t>(row0) * p.o_stride[2] +
                                             col) =
                    M::pack(o_acc[dt][0] * inv[0], o_acc[dt][1] * inv[0]);
            }
            if (row1 < p.len_q) {
                *reinterpret_cast<uint32_t*>(o_g + static_cast<int64_t>(row1) * p.o_stride[2] +
                                             col) =
                    M::pack(o_acc[dt][2] * inv[1], o_acc[dt][3] * inv[1]);
            }
        }
    }
}

template <class Tr, TileMode kMode, Epilogue kEpi>
cudaError_t launch_tiles(const AttentionParams& p, cudaStream_t stream) {
    if (p.len_q == 0 || p.batch == 0 || p.heads == 0) return cudaSuccess;
    constexpr bool kWithV = kEpi == Epilogue::Output;
    const size_t smem = Tr::smem_bytes(kWithV);
    auto kernel = attention_tiles_kernel<Tr, kMode, kEpi>;
    static const cudaError_t attr_err = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (attr_err != cudaSuccess) return attr_err;
    const dim3 grid(detail::ceil_div(p.len_q, Tr::kBlockM), p.heads, p.batch);
    kernel<<<grid, Tr::kThreads, smem, stream>>>(p);
    return cudaGetLastError();
}

template <class Tr>
cudaError_t launch_attention_for(const AttentionParams& p, TileMode mode, Epilogue epi,
                                 cudaStream_t stream) {
    switch (mode) {
        case TileMode::BlockSparse:
            if (epi == Epilogue::Output)
                return launch_tiles<Tr, TileMode::BlockSparse, Epilogue::Output>(p, stream);
            break;
        case TileMode::Gathered:
            if (epi == Epilogue::Output)
                return launch_tiles<Tr, TileMode::Gathered, Epilogue::Output>(p, stream);
            break;
        case TileMode::Dense:
            if (epi == Epilogue::Output)
                return launch_tiles<Tr, TileMode::Dense, Epilogue::Output>(p, stream);
            if (epi == Epilogue::LseOnly)
                return launch_tiles<Tr, TileMode::Dense, Epilogue::LseOnly>(p, stream);
            break;
    }
    return cudaErrorNotSupported;
}

}  // namespace varscope::kernels::cuda
