// Hook points of the one MAR sampling loop (core/sampling/mar_sampler.h). Accelerators for MAR
// (LazyMAR's token cache and condition cache, ...) implement MarSamplingHooks; with no hooks,
// or hooks that answer every call with the default, the loop is the official sampler exactly.
//
// Terms. B images; with CFG (cfg != 1) the transformer runs 2B rows, conditional rows first,
// then the unconditional ones (fake_latent class embedding), unless skip_unconditional() says
// otherwise for a step. "Position" = index into the buffer + image sequence the encoder and
// decoder see: buffer slots 0..buffer_size-1 (class embedding), image token p at
// buffer_size + p. The image order of decoding is a random permutation per image ("orders");
// at step s the cosine schedule keeps mask_len(s) tokens masked, and the tokens at
// orders[:, mask_len(s+1) : mask_len(s)] are decoded (all remaining ones at the last step).
//
// The loop, per step s (0 .. num_iter-1):
//   ctx = MarStepContext (masks, positions known / decoded this step, guidance of the step)
//   on_step_begin(ctx)
//   ctx.skip_unconditional = cfg && skip_unconditional(ctx)   -> rows R = 2B, or B when skipped
//   encoder: x = encoder_input (R, buffer + known, Ce)
//            per block: run_block(Encoder, layer)             [see below]
//            encoder_norm
//   decoder: x = decoder_input (R, buffer + seq_len, Cd)       (mask tokens at unknown places)
//            per block: run_block(Decoder, layer)
//            CFG only: skipped  -> x = [x ; unconditional_rows(ctx, x)]  (hook must answer)
//                      computed -> on_cfg_branches(ctx, x)       (2B rows, e.g. to cache the
//                                                                 uncond - cond residual)
//            z = decoder_norm, drop buffer, + diffusion positions   (2B or B, seq_len, Cd)
//   on_condition(ctx, z)        -> may rewrite z (rows stay 2B with CFG)
//   diffusion: the z rows of the decoded positions -> DiffLoss sampler (temperature, CFG of
//              the step) -> token latents written into tokens
//   on_step_end(ctx, sampled, tokens)
//   wants_head_cache_stats() only: on_head_cache_stats(step, stats)   (after the step's records)
//
// The DiffLoss head's caches (LazyMAR's released code; DiffusionSampler::sample's
// cfg_cache_period / mlp_cache_period) are the hooks' decision too: the loop asks
// head_cfg_cache_period() and head_mlp_cache_period() once per run, hands the answers to the
// diffusion sampler of every step, and tells the hooks through MarStepContext.
//
// run_block(stage, layer), the per-block token selection (like VAR's hooks.h):
//   rows = select_tokens(bctx, x)        -> indices into x's sequence dim that this block
//                                           computes; undefined = all
//   q, k, v of those rows; on_keys_values(bctx, rows, k, v)   -> may replace k/v by a full set
//                                           (e.g. cached keys of rows it did not compute, fresh
//                                           ones scattered in); by default queries attend to the
//                                           computed rows' keys only
//   o = attend(bctx, q, k, v, scale) or dense attention
//   h = x_rows + proj(o); h = h + mlp(norm2(h))
//   out = restore_tokens(bctx, x, rows, h)   -> full block output; undefined = the default:
//                                           rows not computed keep their input
//   on_block_output(bctx, out)
//
// Everything the loop passes lives on the model's device; the loop itself never synchronises
// inside a step (masks and positions are derived from the orders on the device), so hooks that
// want the same should avoid .item() and data-dependent shapes too.
//
// CUDA graphs with hooks (mar_cuda_graph.h). Hooks whose graph_signature() has a value are run
// inside whole-step graphs, like the loop without hooks; others keep the transformer eager and
// only the reverse diffusion is graphed. A signature promises:
//  * Host-side calls (on_step_begin, skip_unconditional, on_step_end) run on every step, as
//    without graphs, but see a context whose known / decoded / decoded_prev are undefined (the
//    step's tensors exist only inside the graph); their answers follow from the step index, the
//    plan and the settings alone (never from what the per-block calls saw), so a replay with a
//    fresh hook object of the same signature agrees with the capture.
//  * The other calls run only while a step is captured (and once for a warm-up of the first
//    step); they must not synchronise, and every shape they make follows from the step index.
//    Their context's tensors are static buffers of the graph set (mask is undefined there).
//  * State kept from step to step lives in MarHookState (at stable addresses, in the graph set
//    while ctx.graphs is set) and is updated in place, so replays read and write the memory the
//    capture saw.
//  * The signature names the method and every setting that changes the captured work.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/models/mar.h"

namespace varscope {

class MarGraphs;
struct HeadCacheStats;  // core/sampling/gaussian_diffusion.h

enum class MarStage { Encoder, Decoder };

// One decoding step.
struct MarStepContext {
    const MarConfig& config;
    int64_t step = 0;           // s in [0, num_iter)
    int64_t num_iter = 0;       // decoding steps of the run
    int64_t batch = 0;          // B images
    bool cfg = false;           // classifier-free guidance on (the transformer runs 2B rows)
    double cfg_scale = 1;       // guidance of this step after the schedule (linear / constant)
    int64_t masked_before = 0;  // image tokens still masked when the step starts
    int64_t masked_after = 0;   // ... after it (0 after the last step)
    at::Tensor labels;          // (B) int64 class ids (-1 = unconditional)
    at::Tensor orders;          // (B, seq_len) int64 generation order (a permutation per image)
    at::Tensor mask;            // (B, seq_len) bool, true = masked before this step
    at::Tensor known;           // (B, seq_len - masked_before) int64 image positions known
                                // before the step, ascending (the encoder's rows after the
                                // buffer, in this order)
    at::Tensor decoded;         // (B, masked_before - masked_after) int64 image positions
                                // decoded in this step, ascending
    at::Tensor decoded_prev;    // the previous step's `decoded` (undefined at step 0)
    at::Tensor tokens;          // (B, seq_len, token_dim) latents before the step (read-only)
    bool skip_unconditional = false;  // set by the loop after asking the hooks
    // Set while the step is captured as a whole-step CUDA graph (hooks with a graph signature):
    // MarHookState keeps its tensors there. nullptr when the step runs eagerly.
    MarGraphs* graphs = nullptr;
    // The DiffLoss head caches of this run (the hooks' answers; 0 = off), e.g. for counting
    // the head's work. The condition cache acts only with CFG.
    int64_t head_cfg_cache_period = 0;
    int64_t head_mlp_cache_period = 0;

    int64_t rows() const { return cfg && !skip_unconditional ? 2 * batch : batch; }
    int64_t known_count() const { return config.seq_len() - masked_before; }
    int64_t decoded_count() const { return masked_before - masked_after; }
};

// One transformer block of one step.
struct MarBlockContext {
    const MarStepContext& step;
    MarStage stage;
    int64_t layer;  // index within the stage
    // (R, n) int64: position (see above) of each row of the block input x. Encoder: the buffer
    // slots then the known image positions; decoder: 0 .. buffer + seq_len - 1 for every row.
    at::Tensor positions;
    // An attend() override that computes less than dense attention sets the multiply-add FLOPs
    // it spent (the loop counts 4*R*H*Lq*Lk*d otherwise), for the benchmarks.
    double attention_flops = -1.0;
    // Layer index over both stages (encoder layers first), as probes and records number them.
    int64_t global_layer() const {
        return stage == MarStage::Encoder ? layer : step.config.encoder_depth + layer;
    }
};

class MarSamplingHooks {
  public:
    virtual ~MarSamplingHooks() = default;

    // What the captured work of a step depends on (method and settings) when the hook may run
    // inside whole-step CUDA graphs (see the top of this file); std::nullopt = it may not (the
    // transformer then stays eager), e.g. probes that read tensors or data-dependent shapes.
    virtual std::optional<std::string> graph_signature() const { return std::nullopt; }

    virtual void on_step_begin(MarStepContext& ctx) {}
    // CFG steps only: true = run only the B conditional rows through encoder and decoder this
    // step; unconditional_rows() must then supply the unconditional rows.
    virtual bool skip_unconditional(const MarStepContext& ctx) { return false; }
    // The unconditional rows (B, buffer + seq_len, Cd) of the last decoder block's output
    // (before decoder_norm) from the conditional ones x_cond (B, ...), e.g. x_cond + cached
    // residual. Called only when skip_unconditional() returned true; must return a tensor.
    virtual at::Tensor unconditional_rows(const MarStepContext& ctx, const at::Tensor& x_cond) {
        return {};
    }
    // CFG steps that computed both branches: the last decoder block's output (2B, ...).
    virtual void on_cfg_branches(const MarStepContext& ctx, const at::Tensor& x) {}

    // Indices into x's sequence dim (dim 1) that this block computes (int64, on x's device);
    // (K) = the same for every row, (R, K) = per row. Undefined = all rows.
    virtual at::Tensor select_tokens(const MarBlockContext& ctx, const at::Tensor& x) { return {}; }
    // Keys and values (R, H, Lk, d) of the computed rows; a policy may replace them (e.g. by
    // full-length keys from its cache with the fresh ones written in). `rows` as selected.
    virtual void on_keys_values(const MarBlockContext& ctx, const at::Tensor& rows, at::Tensor& k,
                                at::Tensor& v) {}
    // Replaces the attention of this block (q (R, H, Lq, d)); undefined = the default.
    virtual at::Tensor attend(const MarBlockContext& ctx, const at::Tensor& q, const at::Tensor& k,
                              const at::Tensor& v, double softmax_scale) {
        return {};
    }
    // Builds the block output (R, n, C) from its input x and the computed rows h (R, K, C);
    // undefined = the default (rows not computed keep their input).
    virtual at::Tensor restore_tokens(const MarBlockContext& ctx, const at::Tensor& x,
                                      const at::Tensor& rows, const at::Tensor& h) {
        return {};
    }
    // The block's full output (R, n, C), after restoration.
    virtual void on_block_output(const MarBlockContext& ctx, const at::Tensor& x) {}

    // z (2B or B rows, seq_len, Cd) before the diffusion head reads the decoded positions.
    virtual void on_condition(const MarStepContext& ctx, at::Tensor& z) {}
    // sampled (B, decoded_count, token_dim) latents of this step's positions (ctx.decoded);
    // tokens (B, seq_len, token_dim) after they were written in.
    virtual void on_step_end(const MarStepContext& ctx, const at::Tensor& sampled,
                             const at::Tensor& tokens) {}

    // DiffLoss head caches (asked once per run, before the first step). > 0 with CFG: every
    // this many diffusion steps run both CFG halves, in between the conditional half and the
    // cached eps residual. 0 = off.
    virtual int64_t head_cfg_cache_period() const { return 0; }
    // > 0: every this many diffusion steps the head's blocks compute in full, in between they
    // reuse cached terms (DiffusionSampler HeadMlpStep). 0 = off.
    virtual int64_t head_mlp_cache_period() const { return 0; }
    // true = on_head_cache_stats() wants the caches' statistics. Measuring them reads the
    // device inside the reverse diffusion, so the loop then runs every step eagerly.
    virtual bool wants_head_cache_stats() const { return false; }
    // After a step that decoded tokens, when wants_head_cache_stats(): the refreshes and drift
    // of the head caches over that step's reverse diffusion.
    virtual void on_head_cache_stats(int64_t step, const HeadCacheStats& stats) {}
};

// Tensors a hook keeps from step to step (caches), at stable addresses and updated in place.
// While the step is captured (ctx.graphs set) they are buffers of the graph set, named
// prefix + name, so every replay, and a later hook object with the same signature, uses the
// memory the capture saw; otherwise this object holds them.
class MarHookState {
  public:
    explicit MarHookState(std::string prefix) : prefix_(std::move(prefix)) {}
    // The tensor `name` of these sizes and options, made (uninitialised) if missing. Eagerly a
    // tensor of other sizes or options is replaced; in a graph set that is an error (its
    // captures hold the old one).
    at::Tensor get(const MarStepContext& ctx, const std::string& name, at::IntArrayRef sizes,
                   const at::TensorOptions& options);
    // The tensor `name`, which must exist.
    at::Tensor get(const MarStepContext& ctx, const std::string& name);

  private:
    std::string prefix_;
    std::map<std::string, at::Tensor> own_;
};

// Several policies in order: skip_unconditional is true if any asks, and then the first one
// that answers unconditional_rows wins; for select_tokens / restore_tokens / attend the first
// one that answers wins; on_keys_values runs them all in order; notifications go to all.
// graph_signature: the policies' signatures joined, std::nullopt if any has none or if empty.
// head_cfg_cache_period / head_mlp_cache_period: the first non-zero answer in chain order
// (the head has one cache of each kind); wants_head_cache_stats if any wants them.
class MarHookChain : public MarSamplingHooks {
  public:
    void add(std::shared_ptr<MarSamplingHooks> h) { hooks_.push_back(std::move(h)); }
    bool empty() const { return hooks_.empty(); }
    size_t size() const { return hooks_.size(); }

    std::optional<std::string> graph_signature() const override;

    void on_step_begin(MarStepContext& ctx) override;
    bool skip_unconditional(const MarStepContext& ctx) override;
    at::Tensor unconditional_rows(const MarStepContext& ctx, const at::Tensor& x_cond) override;
    void on_cfg_branches(const MarStepContext& ctx, const at::Tensor& x) override;
    at::Tensor select_tokens(const MarBlockContext& ctx, const at::Tensor& x) override;
    void on_keys_values(const MarBlockContext& ctx, const at::Tensor& rows, at::Tensor& k,
                        at::Tensor& v) override;
    at::Tensor attend(const MarBlockContext& ctx, const at::Tensor& q, const at::Tensor& k,
                      const at::Tensor& v, double softmax_scale) override;
    at::Tensor restore_tokens(const MarBlockContext& ctx, const at::Tensor& x,
                              const at::Tensor& rows, const at::Tensor& h) override;
    void on_block_output(const MarBlockContext& ctx, const at::Tensor& x) override;
    void on_condition(const MarStepContext& ctx, at::Tensor& z) override;
    void on_step_end(const MarStepContext& ctx, const at::Tensor& sampled,
                     const at::Tensor& tokens) override;
    int64_t head_cfg_cache_period() const override;
    int64_t head_mlp_cache_period() const override;
    bool wants_head_cache_stats() const override;
    void on_head_cache_stats(int64_t step, const HeadCacheStats& stats) override;

  private:
    std::vector<std::shared_ptr<MarSamplingHooks>> hooks_;
};

}  // namespace varscope
