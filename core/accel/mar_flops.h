// FLOPs a MAR sampling run computes, counted from what the loop actually runs: the transformer
// blocks' linear layers for the rows each block computes (so token caches count as saved), the
// loop's own attention count (MarSampleResult::attention_flops: QK^T and PV of the keys each
// block attended to), and the DiffLoss head's reverse process for the decoded tokens (both CFG
// rows). Embedding projections and norms are left out (< 0.1 % at MAR-B and up).
// One multiply-add = 2 FLOPs.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>

#include "core/sampling/mar_hooks.h"

namespace varscope {

struct MarFlops {
    double linear = 0.0;     // qkv, proj, fc1, fc2 of the computed rows
    double attention = 0.0;  // from the loop
    double diffusion = 0.0;  // DiffLoss MLP over all reverse steps
    double total() const { return linear + attention + diffusion; }
    nlohmann::json to_json() const;
};

// Linear FLOPs of one block computing `rows` positions of width `dim` (mlp_ratio from config).
double mar_block_linear_flops(const MarConfig& c, int64_t dim, int64_t rows);
// DiffLoss FLOPs of sampling `rows` conditions (2x the tokens with CFG) over `steps` steps.
double mar_diffusion_flops(const MarConfig& c, int64_t rows, int64_t steps);
// DiffLoss FLOPs of sampling `tokens` tokens, with or without guidance, under the head-side
// condition cache (cfg_cache_period > 0 with guidance: only the full steps of
// DiffusionSampler::full_cfg_step run both CFG halves, the others the conditional half) and the
// head MLP cache (mlp_cache_period > 0, DiffusionSampler::head_mlp_step: the skipped blocks
// count nothing outside refresh steps, the others only their AdaLN linear on reusing steps).
double mar_head_flops(const MarConfig& c, int64_t tokens, bool guided, int64_t steps,
                      int64_t cfg_cache_period, int64_t mlp_cache_period = 0);

// Counts the rows each block computes through on_keys_values, so it must come FIRST in a chain
// (before policies that replace the keys by full cached sets). Answers nothing itself. The
// head's work follows the run's head caches, which the step context carries (the periods the
// chain's hooks answered, e.g. LazyMarHeadCache).
class MarFlopCounter : public MarSamplingHooks {
  public:
    MarFlopCounter(const MarConfig& c, int64_t diffusion_steps)
        : config_(c), diffusion_steps_(diffusion_steps) {}
    void on_keys_values(const MarBlockContext& ctx, const at::Tensor& rows, at::Tensor& k,
                        at::Tensor& v) override;
    void on_step_end(const MarStepContext& ctx, const at::Tensor& sampled,
                     const at::Tensor& tokens) override;
    // Counted so far; `attention_flops` is the loop's MarSampleResult::attention_flops.
    MarFlops flops(double attention_flops) const;
    void reset() { linear_ = diffusion_ = 0.0; }

  private:
    MarConfig config_;
    int64_t diffusion_steps_;
    double linear_ = 0.0, diffusion_ = 0.0;
};

// A chain with `counter` first, then `inner` (may be null).
std::shared_ptr<MarHookChain> chain_with_counter(std::shared_ptr<MarFlopCounter> counter,
                                                 std::shared_ptr<MarSamplingHooks> inner);

}  // namespace varscope
