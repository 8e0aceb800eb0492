// What each accelerator keeps, as KeepMasks in the dense run's index space (attention_measures.h),
// read from the records its hook already emits in its own run (core/accel/probe_kinds.h), so
// the method runs unchanged. One adapter per method:
//   skip     ScaleRecord::skipped          -> no query of a skipped scale is computed
//   FastVAR  "pts_kept" (scale, layer)     -> that layer computes only the kept tokens, and its
//                                             cache holds only their keys at later scales
//   LazyVAR  "lazyvar_kept" (scale)        -> the same, for every layer
//   AMS-KV   "kv_occupancy" (scale)        -> per layer and source scale, the newest `count`
//                                             tokens of that scale are in the cache (CLRU keeps a
//                                             scale's most recent rows)
//   SparVAR  "csla_block_mask" / "csla_token_mask" (CSLA layers), "cs4a_mapped" (CS4A layers)
//                                          -> attended (query block, key) pairs at sparse scales;
//                                             the decision scale is dense
// A (scale, layer) without a record keeps everything. Masks refer to the first conditional
// sample (the records' sample); the measures compare them against the dense run's attention
// of the same seed, so where the method's tokens differ from the baseline's, recall measures
// its decisions on the baseline's attention.
#pragma once

#include <map>
#include <utility>
#include <vector>

#include "core/accel/accel_config.h"
#include "core/analysis/attention_measures.h"
#include "core/sampling/probes.h"

namespace varscope::analysis {

// Token counts of the schedule's scales (side^2) and the model's sizes.
struct ScheduleLayout {
    std::vector<int64_t> sides;  // patch side per scale
    int64_t layers = 0;
    int64_t heads = 0;
    int64_t tokens(int64_t scale) const { return sides.at(scale) * sides.at(scale); }
    int64_t tokens_through(int64_t scale) const;  // scales 0..scale
};

class MaskSet {
  public:
    // Everything kept where nothing was added.
    const KeepMask& at(int64_t scale, int64_t layer) const;
    // Narrows (scale, layer) to what `m` keeps as well.
    void restrict(int64_t scale, int64_t layer, const KeepMask& m);
    bool empty() const { return masks_.empty(); }
    size_t size() const { return masks_.size(); }

  private:
    std::map<std::pair<int64_t, int64_t>, KeepMask> masks_;
};

void add_skip_masks(MaskSet& set, const std::vector<ScaleRecord>& scales,
                    const ScheduleLayout& layout);
void add_fastvar_masks(MaskSet& set, const std::vector<AccelRecord>& records,
                       const ScheduleLayout& layout);
void add_lazyvar_masks(MaskSet& set, const std::vector<AccelRecord>& records,
                       const ScheduleLayout& layout);
void add_ams_kv_masks(MaskSet& set, const std::vector<AccelRecord>& records,
                      const ScheduleLayout& layout);
void add_sparvar_masks(MaskSet& set, const std::vector<AccelRecord>& records,
                       const SparVarConfig& config, const ScheduleLayout& layout);

// The kept set of one (scale, layer) as a dense bool (Hp, lq, lk) CPU tensor, Hp = heads where
// the mask differs per head (CS4A's key lists), else 1: what the app's overlay dims (the core
// measures never materialise it). std::invalid_argument when the mask does not fit lq x lk.
at::Tensor dense_keep(const KeepMask& m, int64_t heads, int64_t lq, int64_t lk);

// Every enabled method of `config`, from one run's records.
MaskSet masks_of_run(const AccelConfig& config, const std::vector<AccelRecord>& records,
                     const std::vector<ScaleRecord>& scales, const ScheduleLayout& layout);

}  // namespace varscope::analysis
