// Launch parameters shared by the CUDA attention kernels and their LibTorch wrapper. Plain C++:
// the .cu files never include LibTorch, so they compile quickly and in parallel.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace varscope::kernels::cuda {

// Which key tiles a query tile visits.
enum class TileMode : int {
    BlockSparse = 0,  // key blocks from a block list (CSLA)
    Gathered = 1,     // key rows from an index list, gathered into tiles (CS4A)
    Dense = 2,        // every key (decision scale)
};

// What a kernel produces.
enum class Epilogue : int {
    Output = 0,   // attention output (+ log-sum-exp when lse != nullptr)
    LseOnly = 1,  // only the log-sum-exp per query row (no V)
};

enum class ElemType : int { BFloat16 = 0, Float16 = 1 };

struct AttentionParams {
    const void* q = nullptr;
    const void* k = nullptr;
    const void* v = nullptr;
    void* o = nullptr;
    float* lse = nullptr;           // (batch, heads, len_q), natural log; optional
    const float* lse_in = nullptr;  // column sums: log-sum-exp of each query row
    float* colsum = nullptr;        // column sums: (batch, heads, num_query_blocks, len_k)
    // Strides in elements: batch, head, row. The last dimension is contiguous.
    int64_t q_stride[3] = {0, 0, 0};
    int64_t k_stride[3] = {0, 0, 0};
    int64_t v_stride[3] = {0, 0, 0};
    int64_t o_stride[3] = {0, 0, 0};
    int batch = 0, heads = 0, len_q = 0, len_k = 0;
    float scale_log2 = 0.f;  // softmax scale * log2(e)
    // BlockSparse: lists[qb * list_stride + i] = active key block, i < counts[qb].
    // Gathered: lists[qb * list_stride + i] = key row, i < counts[qb].
    const int32_t* lists = nullptr;
    const int32_t* counts = nullptr;
    int list_stride = 0;
    int block_q = 64;  // query rows per list entry / per column-sum block (multiple of 64)
    int block_k = 64;  // BlockSparse: keys per block (multiple of 64)
    int num_query_blocks = 0;
};

// The sm_90a kernel (csla_attention_sm90.cuh) that bf16 output attention at a head dim (64/128)
// runs, as its schedule number in the measured history: CSLA (block-sparse tiles) 12 at d128 (the
// persistent kernel with Q in registers), 10 at d64 (one CTA per query block: VAR-d30's last scales
// fill at most a wave); CS4A (gathered tiles, no TMA form) 6 at d128 (one K/V stage), 0 at d64
// (two). The fastest measured (bench/results/2026-11-26-h200/csla_cta.md, csla_s12.md, csla_s13.md,
// 2026-11-25-h100/cs4a_sm90.md); the others were deleted (bench/results/pruned-kernels.md). The
// launchers and the dispatch's report (kernels::sm90_schedule) both read it.
constexpr int sm90_schedule_for(int head_dim, bool gathered) {
    if (gathered) return head_dim == 128 ? 6 : 0;
    return head_dim == 128 ? 12 : 10;
}

// Query rows per CTA and keys per tile: block sizes must be multiples of these.
inline constexpr int kQueryTile = 64;
inline constexpr int kKeyTile = 64;

// Strides (batch, head, row), in elements, of a contiguous (batch, heads, len, head_dim) tensor.
inline void set_contiguous_strides(int64_t (&dst)[3], int heads, int len, int head_dim) {
    dst[2] = head_dim;
    dst[1] = int64_t{len} * head_dim;
    dst[0] = int64_t{heads} * dst[1];
}

// AttentionParams::scale_log2 for a softmax scale: the kernels exponentiate with exp2.
inline float scale_log2_of(double scale) {
    return static_cast<float>(scale * 1.4426950408889634);
}

// One entry point per (head dim, element type); each lives in its own .cu file.
cudaError_t launch_attention_d64_bf16(const AttentionParams&, TileMode, Epilogue, cudaStream_t);
cudaError_t launch_attention_d64_fp16(const AttentionParams&, TileMode, Epilogue, cudaStream_t);
cudaError_t launch_attention_d128_bf16(const AttentionParams&, TileMode, Epilogue, cudaStream_t);
cudaError_t launch_attention_d128_fp16(const AttentionParams&, TileMode, Epilogue, cudaStream_t);
// The decision-scale column sums, keys-major (column_sum_keys.cuh): p.colsum (batch, heads,
// num_query_blocks, len_k) written whole from p.lse_in; head dim 64 or 128.
cudaError_t launch_column_sum_keys(const AttentionParams&, int head_dim, bool bf16, cudaStream_t);

// How many CSLA launches on the sm90 kernels ran schedule 6 instead of their warp-specialised
// kernel because no TMA tensor map could be made (csla_attention_sm90_d128.cu); tests check it
// stays 0 for theirs.
int sm90_ws_fallback_count();

}  // namespace varscope::kernels::cuda
