// Every AccelRecord kind string an accelerator emits (core/sampling/probes.h), with the layout of
// its tensor, so the inspector and the tests agree on names. Tensors are CPU copies; "pn x pn"
// maps are in raster order of the scale's token grid. Append new kinds at the end of the list.
#pragma once

namespace varscope::probe_kinds {

// FastVAR (core/accel/fastvar.h): pruned scales only, first conditional sample.
// Pivotal score ||x - mean(x)||^2 of each token at the first block's input: (pn, pn) float.
// values: {"ratio": pruning ratio, "kept": tokens kept}; layer = 0.
constexpr const char* kPtsScores = "pts_scores";
// Tokens kept by Pivotal Token Selection in one block: (pn, pn) uint8, 1 = computed,
// 0 = restored from the cache; one record per layer. values: {"ratio", "kept"}.
constexpr const char* kPtsKept = "pts_kept";

// LazyVAR (core/accel/lazyvar.h), method "lazyvar".
// Update index 1 - cos(f_hat before, f_hat after) of scale `scale` over the latent channels, on
// the final latent grid: (H, W) float, first sample; values: {"mean"}.
constexpr const char* kUpdateIndex = "update_index";
// Tokens a pruned scale computes: (pn, pn) bool, true = computed, false = zero residual.
// values: {"kept": tokens, "ratio": kept share, "rank_begin": first update-index rank taken}.
constexpr const char* kLazyVarKept = "lazyvar_kept";
// One record per decoded group, scale = its first scale: int64 (p) list of the group's scales.
// values: {"first_scale", "size"}.
constexpr const char* kLazyVarGroup = "lazyvar_group";

// AMS-KV (core/accel/ams_kv.h), method "ams_kv": one record per scale after the step that
// decoded it (every layer's cache updated), layer = -1.
// Bytes of keys + values each layer holds: int64 (layers). values: {"total"}.
constexpr const char* kKvBytes = "kv_bytes";
// Tokens each layer holds from each source scale: int64 (layers x scales).
constexpr const char* kKvOccupancy = "kv_occupancy";
// Cache-demanding layers (budget C_max): bool (layers). values: {"theta", "c_min", "c_max",
// "similarity.<layer>": -mean((k_i - up(k_{i-1}))^2) where measured at this step}.
constexpr const char* kAmsKvDemanding = "ams_kv_demanding";

// SparVAR (core/accel/sparvar.h), method "sparvar"; sparse scales only unless noted.
// CSLA token mask M^(k) of a sparse scale: bool (Lq, Lk), the same for every CSLA layer;
// layer = -1; values: {"sparsity"}.
constexpr const char* kCslaTokenMask = "csla_token_mask";
// CSLA block mask (Eq. 3): bool (ceil(Lq/B), ceil(Lk/B)); layer = -1;
// values: {"token_sparsity", "block_sparsity", "block": B}.
constexpr const char* kCslaBlockMask = "csla_block_mask";
// CS4A Top-k keys of each query block at the decision scale: int64 (H, G_S, k), ascending key
// ids, first conditional sample; one per CS4A layer; values: {"top_k", "query_block", "kv_len"}.
constexpr const char* kCs4aSelected = "cs4a_selected";
// CS4A keys of each query block at a sparse scale after the cross-scale mapping (sinks
// included): int64 (H, G_K, m), ascending, -1 padded; one per CS4A layer;
// values: {"kept_fraction", "decision_scale"}.
constexpr const char* kCs4aMapped = "cs4a_mapped";

// Loop (method "loop"), when ProbeSink::wants_block_timing(): wall time of one block, no tensor;
// values {"qkv_ms", "attention_ms", "ffn_ms", "rows"} (rows = tokens the block computed).
constexpr const char* kBlockMs = "block_ms";

// LazyMAR's DiffLoss head caches (released code; LazyMarHeadCache in core/accel/lazymar.h),
// method "lazymar", from the statistics the MAR loop hands the hooks: one record per decoding
// step that decoded tokens, scale = step, no tensor; values {"mlp_drift", "mlp_refreshes",
// "cfg_drift", "cfg_refreshes"}: the refreshes of each cache in the step's reverse diffusion and
// how far the kept tensors had moved when refreshed (mean ||new - kept|| / ||new||; core/sampling/
// gaussian_diffusion.h HeadCacheStats). A drift near 0 means the reuse steps lost little.
constexpr const char* kLazyMarHeadCache = "lazymar_head_cache";

// LazyMAR (core/accel/lazymar.h), method "lazymar", scale = decoding step.
// Positions each block computes: layer = global block (encoder first), no tensor; values
// {"computed", "cached", "total"} per row, {"refresh"} 0/1.
constexpr const char* kLazyMarTokens = "lazymar_tokens";
// Cosine similarity of the first row's positions (decoder order), lazy steps only: layer = the
// similarity layer (global), (n) float; values {"mean", "computed"}.
constexpr const char* kLazyMarSimilarity = "lazymar_similarity";
// The condition cache, no tensor: values {"skipped"} 0/1, and at refresh steps after the first
// {"drift"} = ||C_new - C_old|| / ||C_new|| (how far the residual moved over the period it was
// reused), {"age"} = steps since the residual was cached.
constexpr const char* kLazyMarCondition = "lazymar_condition";
// Decoder rows (sequence indices, buffer first) computed in the lazy layers of a step, first row.
constexpr const char* kLazyMarComputedRows = "lazymar_computed_rows";

}  // namespace varscope::probe_kinds
