// Scale-aware attention measures of one block (issue #35): from the dense attention's inputs
// (q, k, v of one sample, every head) and what a method keeps (queries computed, keys attended),
// per head: the recall of the method's mask, the output error it causes, the softmax mass per
// source (key) scale, the entropy per query, and the numbers the head and layer types follow.
//
// Definitions (p = softmax(q k^T * scale) of the dense run, one row per query, natural log):
//   recall          mean over ALL queries of sum_{kept keys} p; a query the method does not
//                   compute keeps nothing (0), so query pruning (FastVAR, LazyVAR, skipped
//                   scales) lowers it by the share of dropped queries.
//   recall_computed the same mean over the computed queries only (0 when none is computed).
//   output_error    ||O_sparse - O_dense||_F / ||O_dense||_F over the head's rows, where O_sparse
//                   is attention restricted to the kept keys (softmax renormalised over them),
//                   0 for a query that is not computed or keeps no key. This is the error of the
//                   mask alone: a method's compensation (CS4A's cached residual, FastVAR's
//                   restored updates) is not part of it.
//   mass_by_scale   mean over queries of the mass on each source scale's keys (sums to 1);
//                   mass_sink = scales [0, sink_scales), mass_local = the query's own scale,
//                   mass_rest = the scales between.
//   entropy         mean over queries of -sum p log p; entropy_normalized divides by log(kv_len).
//   verticality     sum_j pbar_j^2 / mean_q sum_j p_qj^2 with pbar the query-averaged row: 1 when
//                   every query attends alike (vertical stripes: a "contextual" head in HACK's
//                   terms, arXiv 2504.09261), about 1/queries when each query looks at its own
//                   keys (diagonals: a "structural" head).
//
// Computed in chunks of queries (MeasureOptions::query_chunk), in float32 with float64 sums, on
// the inputs' device: memory is O(heads * chunk * kv_len), so a 64x64 last scale fits.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "core/analysis/head_measures.h"

namespace varscope::analysis {

// What a method computes at one (scale, layer), in the dense run's index space. An undefined
// tensor keeps everything of its kind; the kept set is the AND of the three.
struct KeepMask {
    at::Tensor queries;  // bool (Lq): rows the method computes
    at::Tensor keys;     // bool (Lk): keys its cache holds (same for every query)
    // bool (Hp, ceil(Lq / block_q), ceil(Lk / block_k)), Hp = 1 (every head) or H: which
    // (query block, key block) pairs are attended (CSLA's block mask, CS4A's key lists).
    at::Tensor pairs;
    int64_t block_q = 1, block_k = 1;
    bool keeps_all() const { return !queries.defined() && !keys.defined() && !pairs.defined(); }
};

// The same kept set with all-true components dropped (undefined): keeps_all() is then exact.
KeepMask simplified(const KeepMask& m);

// Both masks' kept sets at once (a method stack). Two pair masks must have the same blocks.
KeepMask intersect(const KeepMask& a, const KeepMask& b);

struct MeasureOptions {
    int64_t query_chunk = 256;   // queries per pass
    int64_t sink_scales = 2;     // mass_sink: scales [0, sink_scales) (AMS-KV's condensed scales)
    bool query_maps = false;     // fill BlockMeasures::entropy_map / recall_map
    std::vector<int64_t> heads;  // heads to measure (sorted, unique); empty = all
};

struct BlockMeasures {
    std::vector<HeadMeasures> heads;  // one per measured head, in head order
    // With MeasureOptions::query_maps: float (measured heads, Lq) on the CPU, per query.
    at::Tensor entropy_map, recall_map;
};

// q (H, Lq, d), k and v (H, Lk, d): one sample's attention inputs; `scale_tokens` the token
// count of every scale up to and including the query scale `scale` (the dense cache holds them
// in order, so their sum must be Lk, and Lq the last); additive_mask (Lq, Lk) or undefined.
// std::invalid_argument naming the mismatch on shapes that do not fit.
BlockMeasures measure_block(int64_t scale, int64_t layer, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, double softmax_scale,
                            const std::vector<int64_t>& scale_tokens, const KeepMask& keep,
                            const MeasureOptions& options = {},
                            const at::Tensor& additive_mask = {});

}  // namespace varscope::analysis
