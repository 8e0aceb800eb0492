// LazyVAR (lazyvar.txt): scale-wise token pruning guided by the update index, and parallel
// group decoding of the last scales.
//
// * Update index of scale k: 1 - cos(f̂_{k-1}, f̂_k) per position of the final latent grid,
//   the cosine taken over the latent channels. Small = the scale barely changed that position.
// * Pruning (UIGTP): from `start_scale` on, scale k computes only the tokens with the highest
//   update index of the previous scale (area-downsampled to pn_k); the others get a zero
//   residual. The rows are shared by the batch, so the index is averaged over the samples.
// * Group decoding (PGD): the last `group_size` scales run in one forward pass, each with its
//   input taken from the same f̂ (the loop does this). With the cumulative retention index the
//   scales of the group take disjoint ranks of the update index: the largest scale the top
//   ones, each smaller scale the ranks after those the larger scales claimed (see
//   lazyvar_select_rows).
//
// Probes (AccelRecord, method "lazyvar"; see also core/accel/probe_kinds.h):
//   "update_index"  scale = si, data (H, W) float: the update index of scale si for the first
//                   sample (H, W = the final latent grid); values {"mean"}.
//   "lazyvar_kept"  scale = si of a pruned scale, data (pn, pn) bool: tokens computed;
//                   values {"kept", "ratio", "rank_begin"} (rank_begin = first rank taken).
//   "lazyvar_group" scale = first scale of the group, data int64 (p): the scales of the group;
//                   values {"first_scale", "size"}.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "core/accel/param_spec.h"
#include "core/sampling/hooks.h"
#include "core/sampling/probes.h"

namespace varscope {

struct LazyVarConfig {
    bool enabled = false;
    int64_t start_scale = 7;  // first pruned scale (0-based; scales before it run intact)
    int64_t group_size = 2;   // last p scales decoded in one pass; 1 = no grouping
    // Retention per scale from start_scale on; a shorter list repeats its last entry.
    std::vector<double> ratios{0.5, 0.4, 0.4};
    bool cumulative = true;  // disjoint ranks for the scales of a group

    static const MethodSpec& spec();
    static LazyVarConfig from_json(const nlohmann::json& j);
    nlohmann::json to_json() const;

    // Retention ratio of scale si (1 before start_scale).
    double ratio_at(int64_t si) const;
};

// Update index (B, H, W) = 1 - cos over channels of two (B, C, H, W) maps. A zero vector has
// cosine 0 (index 1).
at::Tensor lazyvar_update_index(const at::Tensor& f_prev, const at::Tensor& f_next);

// Rows (int64, ascending, on the index's device) that each scale of a step keeps, given the
// update index (H, W) that guides them. patch_nums / ratios: one entry per scale of the step,
// smallest first. Scale j keeps n_j = round(ratio_j * pn_j^2) tokens (at least one) of the
// index area-downsampled to pn_j, ranked high to low; a ratio of 1 gives an undefined tensor
// (all rows). With `cumulative`, scale j starts at rank cum_j = sum over the pruned larger
// scales k of the step of n_k * pn_j^2 / pn_k^2: the share of the grid the larger scales
// already claimed, counted in scale j's tokens (clamped so that n_j ranks remain).
struct LazyVarSelection {
    at::Tensor rows;         // undefined = all
    int64_t rank_begin = 0;  // first rank taken
};
std::vector<LazyVarSelection> lazyvar_select_rows(const at::Tensor& update_index,
                                                  const std::vector<int64_t>& patch_nums,
                                                  const std::vector<double>& ratios,
                                                  bool cumulative);

// Throws AccelConfigError naming the field when the setting does not fit the model.
// The setting moved onto a schedule of `scales` scales that it does not fit (a preset written for
// 10 or 13 scales on the 7-scale embedded text-to-image model): its pruned scales keep their
// place at the end of the schedule - start_scale lowered so that the ratios cover the same last
// scales, ratios beyond the schedule dropped from the front, group_size at most scales - 1. A
// setting that fits, is off, or meets fewer than 2 scales is returned as it is. Appends one
// note per change to `notes` (may be null). For the app, which shows the notes; a config given
// to make_lazyvar is checked as it is (an index is not clipped silently).
LazyVarConfig fit_to_schedule(const LazyVarConfig& cfg, int64_t scales,
                              std::vector<std::string>* notes);

std::shared_ptr<SamplingHooks> make_lazyvar(const LazyVarConfig& cfg, const VarConfig& model,
                                            ProbeSink* probe);

}  // namespace varscope
