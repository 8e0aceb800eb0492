// SparVAR's Cross-Scale Self-Similar Sparse Attention (CS4A, sparvar.txt §3.2, App. A): the
// pieces, as plain LibTorch functions on (B, H, ...) tensors so the tests and the CUDA kernels can
// check them one by one. The policy that strings them together is in sparvar.cpp.
//
// At the decision scale S (dense attention):
//   P = softmax(Q K^T * scale), O_dense = P V
//   D[b,h,i,j] = sum of P over the query rows of block i (blocks of C rows; last one partial)
//   inds^(S)[b,h,i] = TopK_k(D[b,h,i,:]), k = ceil(alpha * N_<=S)
//   O_cache = O_dense - softmax-over(inds^(S) ∪ sinks)(Q K^T) V
// At a later scale K:
//   query block g_K takes the selection of source block phi(g_K) (query block homography),
//   every selected key j of scale l is moved to scale l' = K - (S - l) at the floor-projected
//   position (decompose, align, project: Eqs. 4-5), sinks are added,
//   O = upsample(O_cache) + softmax-over(mapped)(Q K^T) V.
//
// Selections are bool masks (B, H, G, kv_len) here (true = key kept by that query block); the
// kernels use index lists, which csla_block_lists-style padding gives from the same masks.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "kernels/key_lists.h"

namespace varscope::sparvar {

// Column sums D (B, H, ceil(Lq/C), Lk) float32 of probabilities (B, H, Lq, Lk).
at::Tensor block_column_sums(const at::Tensor& probs, int64_t query_block);

// Number of keys kept per query block at the decision scale: ceil(alpha * kv_len) in [1, kv_len].
int64_t top_k_count(double alpha, int64_t kv_len);

// The k largest columns of each row of D (B, H, G, Lk): int64 (B, H, G, k), ascending ids.
at::Tensor top_k_indices(const at::Tensor& column_sums, int64_t k);

// Bool (B, H, G, kv_len) with true at `indices` (B, H, G, k).
at::Tensor selection_from_indices(const at::Tensor& indices, int64_t kv_len);

// Source query block of every target block: phi(g) = clamp(round((g + 0.5) / G_K * G_S - 0.5))
// with ties to even (App. A.2, query block homography).
std::vector<int64_t> query_block_homography(int64_t target_blocks, int64_t source_blocks);

// Target key of every key of scales 0..S when the pattern moves from decision scale S to scale
// K > S (App. A.2, relative scale alignment): int64 (N_<=S) with values in [0, N_<=K).
at::Tensor relative_scale_alignment(const std::vector<int64_t>& patch_nums, int64_t decision_scale,
                                    int64_t target_scale);

// The inverse view used by the patch mapping: for every key of scales 0..K, the key of scales
// 0..S whose floor-projection covers it (nearest upsampling of the selection), or -1 for keys of
// scales l' < K - S that no decision-scale key maps to. int64 (N_<=K).
at::Tensor patch_alignment(const std::vector<int64_t>& patch_nums, int64_t decision_scale,
                           int64_t target_scale);

// Selection (B, H, G_K, N_<=K) at target scale K from the decision-scale selection
// (B, H, G_S, N_<=S): homography over query blocks, key alignment, then the first sink_tokens
// keys always on. patch = true maps each key to its whole upsampled patch instead of one point.
at::Tensor map_selection(const at::Tensor& source_selection, const std::vector<int64_t>& patch_nums,
                         int64_t decision_scale, int64_t target_scale, int64_t query_block,
                         int64_t sink_tokens, bool patch);

// map_selection in two halves, so the host-side index maps can be staged on the device before
// a CUDA graph captures the device half: the maps of one (S, K) pair, then their use.
struct SelectionMap {
    at::Tensor blocks;   // int64 (G_K): source query block of each target block (homography)
    at::Tensor keys;     // point: relative_scale_alignment; patch: patch_alignment
    int64_t kv_len = 0;  // N_<=K
    bool patch = false;
    int64_t fanout = 1;  // most target keys one source key maps to (1 for the point mapping)
    // The point map is strictly increasing (growing grids: always), so mapped ascending lists
    // stay ascending and distinct: what the CUDA key lists (kernels/key_lists.h) rely on.
    bool increasing = false;
    SelectionMap to(const at::Device& device) const;
};
SelectionMap selection_map(const std::vector<int64_t>& patch_nums, int64_t decision_scale,
                           int64_t target_scale, int64_t query_block, int64_t source_blocks,
                           bool patch);
// Device ops only (no host copies, no syncs): capturable.
at::Tensor map_selection(const at::Tensor& source_selection, const SelectionMap& map,
                         int64_t sink_tokens);

// The same selections as ascending key lists of a fixed width (the kernel path): keys int64
// (B, H, G, W) ascending, each row's first `counts` (B, H, G) entries the kept keys, the rest
// the padding value kv_len. They cost O(W) per block instead of the masks' O(kv_len).
struct KeyLists {
    at::Tensor keys;
    at::Tensor counts;
};
// Decision scale: the Top-k ids (B, H, G, k) ascending plus the first sink_tokens keys.
// W = k + min(sink_tokens, kv_len). Both are kernels::reference::key_lists (the kernel path runs
// kernels::key_lists, which also writes the attention kernel's lists and counts the pairs).
KeyLists decision_key_lists(const at::Tensor& top_indices, int64_t sink_tokens, int64_t kv_len);
// The point mapping (map.patch false) of decision lists to the map's
// target scale, sinks added; the key sets equal map_selection's. W = source W + sinks.
KeyLists map_key_lists(const KeyLists& source, const SelectionMap& map, int64_t sink_tokens);
// kernels::key_lists' (B * H, G, W) lists and counts seen as (B, H, G, W) and (B, H, G).
KeyLists per_head(const kernels::GatheredKeyLists& lists, int64_t B, int64_t H);
// Bool (B, H, G, kv_len) of key lists (tests; the probe's records).
at::Tensor selection_from_lists(const KeyLists& lists, int64_t kv_len);

// Per-query-block selection (B, H, G, Lk) expanded to token rows (B, H, Lq, Lk).
at::Tensor expand_query_blocks(const at::Tensor& selection, int64_t query_block, int64_t q_len);

// Softmax attention of q (B, H, Lq, d) restricted to the bool mask (broadcastable to
// (B, H, Lq, Lk)); every row must keep at least one key. Output in float32.
at::Tensor masked_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            double softmax_scale, const at::Tensor& mask);

// O_cache (B, H, pn_S^2, d) resampled bilinearly (align_corners = false) to (B, H, pn_K^2, d).
at::Tensor upsample_cache(const at::Tensor& cache, int64_t pn_source, int64_t pn_target);
// The sampling loop adds it to the sparse output with kernels::upsample_add (the same bilinear
// taps, resample.h bilinear_taps), in one pass.

// Index lists of a selection (B, H, G, Lk) for the first row: int64 (H, G, max) ascending, -1
// padded (the probe layout).
at::Tensor selection_lists(const at::Tensor& selection);

}  // namespace varscope::sparvar
