// LazyMAR (lazymar.txt): two caches on the MAR loop (core/sampling/mar_hooks.h), each switchable,
// both refreshed on one schedule: steps before `start_step` compute everything, then every
// `period`-th step from `start_step` on is a refresh step (full computation, caches rewritten);
// the steps in between reuse the caches.
//
// * Token cache (§3.2.1). Decoder: blocks 0..ℓ (ℓ = similarity_layer) compute every position.
//   At block ℓ the cosine similarity between each position's attention values V and the values
//   it had at the previous step (averaged over heads) ranks the positions; blocks after ℓ
//   compute only the N least similar ones (N = round(keep_ratio * (buffer + seq_len)), plus
//   every position below `min_similarity` when that is set) and the positions decoded in this
//   and the previous step (`force_decoded`, as the official code). The other positions take
//   their keys, values and block outputs from the cache (Eq. 9: "C_token[I_cache] ∪
//   F(X[I_compute])"); computed ones are written back, so the cache holds each position's most
//   recent features. Encoder (`encoder_cache`, the official code's incremental encoder): only
//   the buffer slots and the tokens that became known in the previous step are computed; the
//   other known tokens reuse their cached keys, values and outputs.
//   The paper says "compute all tokens in the first three layers, then the similarity at the
//   3rd layer"; the official code (feihongyan1/LazyMAR) measures V at decoder block 3
//   (0-based) and prunes from that block's MLP on. Here block ℓ runs fully (its MLP too) and
//   pruning starts at block ℓ+1: one MLP more per step, the same selection.
// * Condition cache (§3.2.2). At refresh steps both CFG branches run and the residual
//   C_cond = X_uncond - X_cond of the last decoder block's output (before decoder_norm, as the
//   official code) is cached; in between only the conditional rows run and the unconditional
//   ones are X_cond + C_cond (Eq. 10).
//
// Defaults (lazymar.txt §4.1): 64 steps: start 5, τ = 9, ~270 of 320 positions skipped
// (keep_ratio 0.16); 32 steps: start 4, τ = 5 (~250 skipped). start_step / period = 0 pick the
// paper's setting for the run's step count (interpolated between and beyond 32 and 64).
//
// Probes (AccelRecord, method "lazymar"; the kinds' constants: core/accel/probe_kinds.h):
//   "lazymar_tokens"      scale = step, layer = global block (encoder first), no tensor;
//                         values {"computed", "cached", "total"} per row, {"refresh"} 0/1.
//   "lazymar_similarity"  scale = step, layer = ℓ (global), data (n) float: the cosine
//                         similarity of the first row's positions (decoder order), lazy steps
//                         only; values {"mean", "computed"}.
//   "lazymar_condition"   scale = step, no tensor; values {"skipped"} 0/1, and at refresh steps
//                         after the first {"drift"} = ||C_new - C_old|| / ||C_new|| (how far
//                         the residual moved over the period it was reused), {"age"} = steps
//                         since the residual was cached.
//   "lazymar_head_cache"  the DiffLoss head caches (LazyMarHeadCache; core/accel/probe_kinds.h).
//
// CUDA graphs: with no probe and min_similarity 0 the hooks have a graph signature (mar_hooks.h)
// and LazyMAR runs as whole-step graphs like the baseline: which steps refresh, which branch is
// skipped and how many positions each block computes follow from the step plan (N fixed, the
// forced count from the decode schedule), the selection (similarity, top-k) stays on the GPU,
// and the caches live in MarHookState. A threshold makes the computed count data-dependent (a
// host read per cached step): the transformer then stays eager; so do probes, which read
// tensors. LazyMarStepStats come from the plan in both cases (checked against the rows each
// block computes whenever the blocks run on the host).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/accel/mar_flops.h"
#include "core/accel/param_spec.h"
#include "core/accel/probe_kinds.h"  // kLazyMarTokens, kLazyMarSimilarity, ...
#include "core/sampling/mar_hooks.h"
#include "core/sampling/mar_sampler.h"  // MarStepPlan
#include "core/sampling/probes.h"

namespace varscope {

struct LazyMarConfig {
    bool enabled = false;
    bool token_cache = true;
    bool condition_cache = true;
    int64_t start_step = 0;        // first cached period begins here; 0 = the paper's for num_iter
    int64_t period = 0;            // τ: steps per refresh period; 0 = the paper's for num_iter
    double keep_ratio = 0.16;      // share of decoder positions computed after block ℓ
    int64_t similarity_layer = 3;  // ℓ: decoder block whose values V decide (0-based)
    double min_similarity = 0.0;   // > 0: also compute every position less similar than this
    bool force_decoded = true;     // always compute this and the previous step's positions
    bool encoder_cache = true;     // encoder: compute only buffer + newly known tokens
    // DiffLoss head side of the condition cache (released code): every this many diffusion
    // steps both CFG halves, in between the conditional half + the cached eps residual.
    // 0 = off; needs condition_cache. Applied by the LazyMarHeadCache hook.
    int64_t head_cfg_period = 0;
    // DiffLoss head MLP cache (released code, cache_threshold 7; DiffusionSampler HeadMlpStep):
    // every this many diffusion steps the head's blocks compute in full; in between blocks 1..4
    // reuse their output change and the others their MLP term. 0 = off. Independent of
    // condition_cache. Applied by the LazyMarHeadCache hook.
    int64_t head_mlp_period = 0;

    static const MethodSpec& spec();
    static LazyMarConfig from_json(const nlohmann::json& j);
    nlohmann::json to_json() const;
};

// Which steps refresh the caches.
struct LazyMarSchedule {
    int64_t start = 5, period = 9;
    // The configured values, or the paper's for `num_iter` where they are 0.
    static LazyMarSchedule resolve(const LazyMarConfig& cfg, int64_t num_iter);
    bool refresh(int64_t step) const { return step < start || (step - start) % period == 0; }
};

// Positions (decoder order: buffer slots, then image tokens) computed after block ℓ at a lazy
// step: the `count` least similar per row, with the forced positions first. similarity (R, n);
// forced (R, f) int64 or undefined. Returns (R, count) int64, ascending per row.
at::Tensor lazymar_select_positions(const at::Tensor& similarity, const at::Tensor& forced,
                                    int64_t count);

// Bookkeeping of the token cache, for tests and reports: per step, whether it refreshed and
// how many positions each block computed per row (global block index, encoder first).
struct LazyMarStepStats {
    int64_t step = 0;
    bool refresh = true;
    int64_t rows = 0;               // R
    std::vector<int64_t> computed;  // per block
    std::vector<int64_t> total;     // per block: positions in the block's sequence
};

// Positions computed after block ℓ at a lazy step: round(keep_ratio * n), at least the
// `forced` ones when force_decoded, within [1, n] (before a min_similarity threshold).
int64_t lazymar_decoder_positions(const LazyMarConfig& cfg, int64_t n, int64_t forced);

// The plan of step `step` (of plan.size() steps, mar_step_plan) for `batch` images: rows
// (2B with CFG unless the condition cache skips the unconditional branch), whether it is a
// refresh step, and the positions each block computes (min_similarity not counted). What the
// hooks record and the FLOP plan counts.
LazyMarStepStats lazymar_planned_step(const MarConfig& model, const LazyMarConfig& cfg,
                                      const std::vector<MarStepPlan>& plan, int64_t step,
                                      int64_t batch, bool guided);

// LazyMAR's DiffLoss head caches (released code) as a hook: it answers the periods the loop
// hands the head (MarSamplingHooks::head_cfg_cache_period / head_mlp_cache_period) and, for a
// probe that takes "lazymar_head_cache" records, makes one per decoding step from the head's
// statistics (core/accel/probe_kinds.h; the loop then runs eagerly). Usable alone, e.g. for
// the CLI's --head-cfg-period or in tests.
class LazyMarHeadCache : public MarSamplingHooks {
  public:
    // Periods >= 0 (0 = that cache off); std::invalid_argument otherwise.
    LazyMarHeadCache(int64_t cfg_period, int64_t mlp_period, ProbeSink* probe = nullptr);
    // The periods a LazyMAR setting asks for: head_cfg_period needs the condition cache, both
    // need the method on (0 otherwise).
    static LazyMarHeadCache from_config(const LazyMarConfig& cfg, ProbeSink* probe = nullptr);
    bool on() const { return cfg_period_ > 0 || mlp_period_ > 0; }

    // The periods (also MarGraphKey fields); std::nullopt while the probe takes the records.
    std::optional<std::string> graph_signature() const override;
    int64_t head_cfg_cache_period() const override { return cfg_period_; }
    int64_t head_mlp_cache_period() const override { return mlp_period_; }
    bool wants_head_cache_stats() const override;
    void on_head_cache_stats(int64_t step, const HeadCacheStats& stats) override;

  private:
    int64_t cfg_period_, mlp_period_;
    ProbeSink* probe_;
};

class LazyMarTokenCache;
class LazyMarConditionCache;

// The caches as hooks (each null when switched off).
struct LazyMarHooks {
    std::shared_ptr<LazyMarTokenCache> tokens;
    std::shared_ptr<LazyMarConditionCache> condition;
    std::shared_ptr<LazyMarHeadCache> head;
    std::shared_ptr<MarHookChain> chain;  // all of them, in one chain; nullptr when all are off
    const std::vector<LazyMarStepStats>& token_stats() const;
    std::vector<int64_t> skipped_unconditional_steps() const;
};

// The FLOPs (core/accel/mar_flops.h) a run would compute with `cfg` (off = the baseline),
// derived from the step plan alone: what the hooks and the loop count when min_similarity is 0
// (a threshold makes the counts data-dependent). For models too large to run here.
MarFlops lazymar_planned_flops(const MarConfig& model, const LazyMarConfig& cfg, int64_t num_iter,
                               int64_t batch, double guidance, int64_t diffusion_steps);

// Throws AccelConfigError naming the field when the setting does not fit the model.
LazyMarHooks make_lazymar_hooks(const LazyMarConfig& cfg, const MarConfig& model, ProbeSink* probe);
// The chain alone (nullptr when the method or all its caches are off).
std::shared_ptr<MarSamplingHooks> make_lazymar(const LazyMarConfig& cfg, const MarConfig& model,
                                               ProbeSink* probe);

}  // namespace varscope
