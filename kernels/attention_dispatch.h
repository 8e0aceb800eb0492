// Sparse attention entry points used by the accelerators (SparVAR's CSLA and CS4A). Each picks
// the CUDA kernel for CUDA tensors when this build has kernels for the device, the dtype and the
// head dim, and the LibTorch reference otherwise; KernelPolicy::reference (kernels/exec_policy.h)
// always selects the reference.
//
// Layout: q (B, H, Lq, D), k and v (B, H, Lk, D), any strides with a contiguous last dim.
// Block lists and index lists are shared by every batch row and head: build them once per scale
// and reuse them for all layers.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <string>

#include "kernels/exec_policy.h"

namespace varscope::kernels {

enum class KernelPath { Auto, Reference, Cuda };

struct AttentionOptions {
    std::optional<double> scale;  // softmax scale; default 1/sqrt(D)
    KernelPath path = KernelPath::Auto;
    bool return_lse = false;  // also return log-sum-exp per query row (B, H, Lq), float32
    at::Tensor out;           // optional preallocated output (B, H, Lq, D), q's dtype, contiguous
    KernelPolicy policy;      // reference / sm90_attention
};

struct AttentionResult {
    at::Tensor out;  // (B, H, Lq, D), q's dtype
    at::Tensor lse;  // (B, H, Lq) float32, natural log; -inf for rows without keys; or undefined
};

// Block-sparse attention (CSLA). block_indices (nqb, max_active) int32: active key blocks of
// each query block, padded with -1; block_counts (nqb) int32. Query block u covers rows
// [u*block_q, (u+1)*block_q), key block v covers keys [v*block_k, (v+1)*block_k), both clipped
// to the sequence. Query rows without an active key produce 0 (lse = -inf).
AttentionResult block_sparse_attention(const at::Tensor& q, const at::Tensor& k,
                                       const at::Tensor& v, const at::Tensor& block_indices,
                                       const at::Tensor& block_counts, int64_t block_q,
                                       int64_t block_k, const AttentionOptions& options = {});

// Gathered sparse attention (CS4A). key_indices (nqb, max_keys) int32: the distinct key rows
// each query block attends to, padded with -1; key_counts (nqb) int32. The returned lse lets the
// caller merge the result with attention over other keys (e.g. O_cache).
AttentionResult gathered_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const at::Tensor& key_indices, const at::Tensor& key_counts,
                                   int64_t block_q, const AttentionOptions& options = {});

// Attention mass per key per query block at a decision scale: (B, H, ceil(Lq/block_q), Lk)
// float32, the softmax probabilities of dense attention summed over each block's query rows,
// without materialising the probabilities on the CUDA path. lse (B, H, Lq), optional: each query
// row's log(sum_j exp(scale * q.k_j)) (natural log, AttentionResult::lse, sdpa_with_lse); given,
// the CUDA path makes one QK^T pass (the sums) instead of two (the lse first).
at::Tensor block_column_sum(const at::Tensor& q, const at::Tensor& k, int64_t block_q,
                            std::optional<double> scale = std::nullopt,
                            KernelPath path = KernelPath::Auto, const KernelPolicy& policy = {},
                            const at::Tensor& lse = {});

// True when this build contains CUDA kernels at all.
bool cuda_kernels_built();
// CSLA launches on the sm90 kernels that ran schedule 6 instead of their warp-specialised kernel
// because no TMA tensor map could be made (0 in a build without CUDA kernels); tests check
// theirs add none.
int sm90_ws_fallback_count();
// The sm_90a kernel that bf16 output attention at this head dim (64/128) runs on Hopper under
// KernelPolicy::sm90_attention, as the number of its schedule in the measured history
// (kernels/cuda/attention_params.h, sm90_schedule_for): CSLA 12 at d128, 10 at d64; gathered
// (CS4A) 6 at d128, 0 at d64. -1 in a build without CUDA kernels. Benchmarks record it.
int sm90_schedule(int head_dim, bool gathered);
// Whether the CUDA path would run for these inputs (device, dtype, head dim, block sizes, image
// for the device's architecture, policy). why_not receives the reason when it would not.
bool cuda_attention_supported(const at::Tensor& q, int64_t block_q, int64_t block_k,
                              const KernelPolicy& policy = {}, std::string* why_not = nullptr);

}  // namespace varscope::kernels
