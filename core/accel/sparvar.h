// SparVAR (sparvar.txt §3.2-3.3, App. A-C): training-free sparse attention at the last scales.
// Reference policy in LibTorch ops (the CUDA kernels in kernels/ must match it).
//
// Schedule: the last `sparse_scales` scales are sparse; the scale just before them is the sparse
// decision scale S (App. C: S = scale 11 of 13, sparsification on the last 2; with scale skipping
// the skipped scales simply never run). Earlier scales, and S itself, are dense.
// Layers: the first round(cs4a_fraction * depth) layers (shallow) use CS4A, the rest (deep) CSLA
// (App. C/D: 6:4).
//
// CS4A (sparvar_cs4a.h): at S, dense attention, column sums over query blocks of C rows, Top-k
// keys per block (k = ceil(top_k * N_<=S)), O_cache = O_dense - O_sparse. At each later scale K,
// the selection is mapped (query block homography + decompose/align/project of the keys), the
// sink tokens are added, and O = upsample(O_cache) + sparse attention over the mapped keys.
// Decisions beyond the paper's text (each also commented in the code):
//   - Selections are per batch row and head (D has b, h indices); CFG rows select separately.
//   - The sinks are part of the sparse set at S as well, so O_cache is exactly the residual of
//     the same kind of set that is used at K (O_dense = O_sparse + O_cache holds at S).
//   - top_k = 1 keeps every key: CS4A is then off (dense, the baseline's own attention).
//   - O_cache is upsampled bilinearly (align_corners = false); the paper says "upsampled".
//   - The decision scale returns its dense output computed with explicit probabilities.
//   - patch_mapping = false is App. A's literal point mapping (Eq. 5); true maps each selected
//     key to its whole nearest-upsampled patch (keeps the kept fraction, as App. B's cost
//     alpha * N_<=k assumes).
// CSLA (csla_mask.h, sparvar_csla.h): sinks + query-relative local windows after rescaling, OR
// over B x B blocks; attention is restricted to every token of the active blocks (or the token
// mask with token_mask = true). A scale whose mask masks nothing returns no output (the loop's
// own attention runs, bit-identical to the baseline).
//
// Kernels (kernels/attention_dispatch.h): on CUDA with bf16/fp16, head dim 64/128 and block
// sizes that are multiples of 64, CSLA runs the block-sparse kernel over the block lists built
// once per scale, CS4A's sparse scales the gathered kernel, and the decision scale the column-sum
// kernel (with SDPA for its dense output); everywhere else, or with reference_kernels, the
// LibTorch reference above. attend() reports its attention FLOPs in
// BlockContext::attention_flops: 4 * d * (query, key) pairs attended, summed over B and H. The
// references mask dense products but count the same pairs (the method's cost, as the kernels
// spend it); the decision scale counts its dense pass, the residual's sparse pass and, on the
// kernel path, the column-sum kernel's extra QK^T pass (two where SDPA's backend returns no
// log-sum-exp: kernels/sdpa_lse.h; the reference reuses the eager probabilities).
//
// Steps with pruned query rows or a KV cache that is not the full prefix (FastVAR, AMS-KV) or
// grouped steps (LazyVAR) are not supported at sparse or decision scales: attend() throws
// std::logic_error there.
//
// Probe records, method "sparvar" (only when probe->wants_accel("sparvar", kind)):
//   "csla_token_mask": bool (Lq, Lk), one per sparse scale (the same for every CSLA layer),
//                      layer -1; values {"sparsity", "cuda_kernels"}: cuda_kernels 1 where CSLA
//                      runs on the CUDA block-sparse kernel, 0 where on the exact masked
//                      reference, which computes every score and so saves no time (the CPU,
//                      fp32, the token-wise mask, or reference_kernels).
//   "csla_block_mask": bool (ceil(Lq/B), ceil(Lk/B)), one per sparse scale, layer -1;
//                      values {"token_sparsity", "block_sparsity", "block"}.
//   "cs4a_selected":   int64 (H, G_S, k) ascending key ids (0..N_<=S) kept by each query block
//                      at the decision scale, first conditional sample; one per CS4A layer;
//                      values {"top_k": k, "query_block": C, "kv_len": N_<=S}.
//   "cs4a_mapped":     int64 (H, G_K, m) ascending key ids kept by each query block at a sparse
//                      scale after mapping (sinks included), -1 padded; one per CS4A layer and
//                      sparse scale; values {"kept_fraction", "decision_scale"}.
#pragma once

#include <memory>
#include <vector>

#include "core/accel/csla_mask.h"
#include "core/accel/param_spec.h"
#include "core/sampling/hooks.h"
#include "core/sampling/probes.h"

namespace varscope {

struct SparVarConfig {
    bool enabled = false;
    int64_t sparse_scales = 2;   // last scales computed sparsely; S = the scale before them
    double cs4a_fraction = 0.6;  // share of layers (shallow first) using CS4A, rest CSLA
    // CS4A
    double top_k = 0.2;          // alpha: fraction of the decision scale's keys kept
    int64_t query_block = 192;   // C
    bool use_cache = true;       // add the upsampled O_cache
    bool patch_mapping = false;  // see above
    // shared by both: scales [0, sink_scales) always attended
    int64_t sink_scales = 5;
    // CSLA
    std::vector<int64_t> windows{3, 5, 7};
    int64_t middle_window = 3;
    int64_t block = 128;  // B
    bool token_mask = false;
    // Always the LibTorch reference, even where the CUDA kernels could run (debugging); the
    // environment variable VARSCOPE_REFERENCE_KERNELS=1 does the same for every policy.
    bool reference_kernels = false;

    static const MethodSpec& spec();
    static SparVarConfig from_json(const nlohmann::json& j);
    nlohmann::json to_json() const;

    CslaSpec csla_spec() const { return {sink_scales, windows, middle_window}; }
    int64_t cs4a_layers(int64_t depth) const;  // layers [0, n) use CS4A
};

// Throws AccelConfigError naming the field when the settings do not fit the model.
std::shared_ptr<SamplingHooks> make_sparvar(const SparVarConfig& cfg, const VarConfig& model,
                                            ProbeSink* probe);

}  // namespace varscope
