// FastVAR (fastvar.txt §3, App. G): cached token pruning at the last N scales.
//
// The first S-N scales run unchanged (the "structure construction" stage); at the last N scales
// every block computes only its pivotal tokens and restores the others from a cache:
//   Pivotal Token Selection (PTS): score = ||x - mean_tokens(x)||^2 of each token of the block
//     input (the mean is the scale map's DC component, per sample); the Top-K tokens,
//     K = n - floor(ratio * n), go through attention and FFN (and into the KV cache).
//   Cached Token Restoration (CTR): a pruned slot gets the residual update that the same block
//     made at scale S-N-1 (the last unpruned one), area-interpolated to the current map size.
//   A ratio of 1 prunes every token: the scale is skipped, as in scale_skip.h.
//
// Decisions, from the paper and the official code (csguoh/FastVAR):
//   - Restored value: the official code prunes and restores each Attention and FFN branch
//     output (the update added to the residual stream), not the hidden state itself. The loop's
//     hooks see a whole block, so we restore the block's update: out = x + up(y_c - x_c), where
//     x_c, y_c are the block's input and output at the cache scale. Copying the cached output
//     itself would replace the current scale's input (its word and level embeddings).
//   - One selection per block, scored on the block input, shared by attention and FFN (the
//     official code re-scores before the FFN; the block hook has one selection point).
//   - Interpolation: mode 'area' of the official code (= adaptive average pooling).
//   - CFG: the official code scores each of the 2B rows on its own. We let an image's
//     conditional and unconditional rows share the selection scored on the conditional row, so
//     each guided logit mixes two computed (or two restored) values; rows are (2B, K).
//   - Kept tokens are ordered by position (raster order), not by score.
//   - The cache is taken at scale S-N-1 even where a pruned scale has ratio 0 (paper App. D).
//
// Probe records (method "fastvar"; see core/accel/probe_kinds.h), pruned scales only, first
// conditional sample, only when probe->wants_accel("fastvar", kind):
//   "pts_scores": (pn, pn) float, pivotal scores of the first block's input; layer 0.
//   "pts_kept":   (pn, pn) uint8, 1 = token computed, 0 = restored; one record per layer.
//   values of both: {"ratio": pruning ratio of the scale, "kept": number of tokens kept}.
#pragma once

#include <memory>
#include <vector>

#include "core/accel/param_spec.h"
#include "core/sampling/hooks.h"
#include "core/sampling/probes.h"

namespace varscope {

struct FastVarConfig {
    bool enabled = false;
    // Pruning ratio of each of the last N scales (N = size), smallest scale first; 1 = skip.
    std::vector<double> ratios{0.4, 0.5};

    static const MethodSpec& spec();
    static FastVarConfig from_json(const nlohmann::json& j);
    nlohmann::json to_json() const;
};

// Throws AccelConfigError naming the field when the ratios do not fit the model (more entries
// than scales after the cache scale, a skipped scale followed by a run one).
std::shared_ptr<SamplingHooks> make_fastvar(const FastVarConfig& cfg, const VarConfig& model,
                                            ProbeSink* probe);

namespace fastvar {
// PTS score of every token: x (R, n, C) -> (R, n) float, ||x - mean over the n tokens||^2.
at::Tensor pivotal_scores(const at::Tensor& x);
// Tokens kept out of n at a pruning ratio: n - floor(ratio * n) (the official rounding).
int64_t kept_tokens(int64_t n, double ratio);
}  // namespace fastvar

}  // namespace varscope
