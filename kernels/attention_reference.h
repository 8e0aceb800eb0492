// LibTorch references for the sparse attention kernels: plain masked softmax attention, computed
// in float32 (float64 for float64 inputs) on whatever device the inputs live. They define the
// semantics the CUDA kernels must match and are what CI tests. Memory is O(Lq * Lk) per head.
#pragma once

#include "kernels/attention_dispatch.h"

namespace varscope::kernels::reference {

// Dense (Lq, Lk) bool mask from block lists (the OR-expansion of the block mask).
at::Tensor token_mask_from_block_lists(const at::Tensor& block_indices,
                                       const at::Tensor& block_counts, int64_t block_q,
                                       int64_t block_k, int64_t len_q, int64_t len_k);

// Dense (Lq, Lk) bool mask from per-query-block key index lists.
at::Tensor token_mask_from_key_lists(const at::Tensor& key_indices, const at::Tensor& key_counts,
                                     int64_t block_q, int64_t len_q, int64_t len_k);

// Softmax attention restricted to mask (Lq, Lk) (broadcast over B, H).
AttentionResult masked_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& mask, std::optional<double> scale,
                                 bool return_lse);

AttentionResult block_sparse_attention(const at::Tensor& q, const at::Tensor& k,
                                       const at::Tensor& v, const at::Tensor& block_indices,
                                       const at::Tensor& block_counts, int64_t block_q,
                                       int64_t block_k, std::optional<double> scale,
                                       bool return_lse);

AttentionResult gathered_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const at::Tensor& key_indices, const at::Tensor& key_counts,
                                   int64_t block_q, std::optional<double> scale, bool return_lse);

// lse (B, H, Lq), optional: the rows' normalisers, used instead of a softmax (rows with -inf
// contribute nothing, as in the CUDA kernel).
at::Tensor block_column_sum(const at::Tensor& q, const at::Tensor& k, int64_t block_q,
                            std::optional<double> scale, const at::Tensor& lse = {});

}  // namespace varscope::kernels::reference
