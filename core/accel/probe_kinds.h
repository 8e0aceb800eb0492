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

}  // namespace varscope::probe_kinds
