// Hook points of the one VAR sampling loop. Accelerators (FastVAR, SparVAR, LazyVAR, AMS-KV,
// scale skipping) implement SamplingHooks; with no hooks the loop is the official sampler.
//
// The loop, per step:
//   scales_to_run()            -> scales after it are skipped (f_hat is decoded as it stands)
//   compact_kv_cache()         -> (once, before the loop) KV-cache storage: preallocated or
//                                 compact (memory follows what an eviction policy keeps)
//   group_size(ctx)            -> 1 = one scale per step; p > 1 decodes p scales in one pass
//                                 with inputs taken from the same f_hat (LazyVAR's PGD)
//   on_scale_begin(ctx)        -> may set ctx.segments[i].rows (scale-level pruning: left-out
//                                 tokens are not computed and get a zero residual)
//   per block: select_tokens -> [attention input] -> KV append -> on_kv_append -> attend
//              -> FFN -> restore_tokens -> on_block_output
//   on_logits(ctx, logits)     -> guided logits of the step's packed rows
//   per scale of the step: tokens sampled, residual folded into f_hat, on_scale_end
//
// CUDA graphs with hooks: see graph_signature() below.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/exec_policy.h"
#include "core/models/var.h"
#include "core/sampling/step_cost.h"

namespace varscope {

class KvCache;

// One scale decoded within a step.
struct ScaleSegment {
    int64_t scale = 0;        // si
    int64_t patch_num = 0;    // pn
    int64_t token_begin = 0;  // first token of this scale in the full schedule's sequence
    at::Tensor rows;          // int64 token indices (into pn*pn) that enter the transformer;
                              // undefined = all of them
    int64_t offset = 0;       // first row of this segment in the step's packed sequence
    int64_t tokens() const { return patch_num * patch_num; }
    int64_t length() const { return rows.defined() ? rows.numel() : tokens(); }
};

struct ScaleContext {
    const VarConfig& config;
    int64_t scale;        // first scale of this step (si)
    int64_t patch_num;    // its side length pn
    int64_t batch;        // B (the model runs 2B rows with CFG: conditional first)
    int64_t token_begin;  // first token index of this scale in the full sequence
    at::Tensor f_hat;     // (B, Cvae, H, W) accumulated before this step (read-only for hooks)
    std::vector<ScaleSegment> segments;  // the scales of this step, in order (usually one)
    int64_t step = 0;                    // index of this step (differs from scale once groups ran)
    // How the run executes (the sampler's LoadOptions::exec): the kernel policy hooks pass to
    // kernels/ and their own switches.
    const ExecPolicy& exec;
    // CUDA graphs: a hook with a graph signature sets false in on_scale_begin when this step's
    // block-level work depends on values (see graph_signature); the VAR loop then runs this and
    // every later step of the call eagerly.
    bool graphable = true;
    int64_t packed_length() const;  // rows of the step's packed sequence
};

struct BlockContext {
    const ScaleContext& scale;
    int64_t layer;
    KvCache& cache;
    // Grouped steps' additive mask (q_rows, kv_len), only where the loop reads it (grouped_step.h's
    // block_needs_group_mask); else undefined - a hook reads the group from scale.segments.
    at::Tensor mask = {};
    // An attend() override that computes less than dense attention sets the multiply-add
    // FLOPs it spent here (the loop counts 4*B*H*Lq*Lk*d otherwise), for the benchmarks. The
    // one output attend() writes through its const context, hence mutable.
    mutable double attention_flops = -1.0;
    // The cost model's recorder (step_cost.h), null when nothing is recorded. An attend()
    // override marks its own work: mark(CostPart::Overhead) before scoring, gathers or index
    // maps, mark(CostPart::Attention) before its attention kernel.
    const CostRecorder* cost = nullptr;
    void mark(CostPart part) const {
        if (cost) cost->mark(part);
    }
};

class SamplingHooks {
  public:
    SamplingHooks();
    SamplingHooks(const SamplingHooks&) : SamplingHooks() {}  // a copy is another object
    SamplingHooks& operator=(const SamplingHooks&) { return *this; }
    virtual ~SamplingHooks() = default;
    // Unique per hooks object for the process's lifetime (never reused, unlike an address):
    // captured CUDA graphs belong to the hooks object they were captured with (its device
    // buffers are what they replay on, its step-level calls fill them), so the loop keys its
    // graphs by it and recaptures for another object. Reuse one object across runs to reuse
    // its graphs (core/runner/var_runner.cpp does, per accelerator config).
    uint64_t instance_id() const { return instance_id_; }
    // CUDA graphs. A hook that returns a signature (std::nullopt = no, the default) lets the
    // loop capture each step's transformer forward, its block-level calls included, as a CUDA
    // graph and replay it on later calls with the same signature, shape, precision and weights.
    // Contract for a hook that does:
    //  * Block-level calls (select_tokens, on_kv_append, attend, restore_tokens,
    //    on_block_output) are made only while a step is captured (first call); replays repeat
    //    the device work they enqueued then, on the same tensors. There they must not
    //    synchronise with the host (.item(), .cpu(), nonzero(), a value-sized output), copy from
    //    the host to the device, or decide anything from tensor values: what they enqueue may
    //    depend only on the config, the scale, the layer and the shapes (Top-K with K fixed by
    //    the config, masks and index lists prepared before the step: see on_scale_begin).
    //  * Block-level calls must not read ScaleContext::f_hat (a per-call copy); the step's input
    //    tensors are the graph's own.
    //  * Tensors carried from one block call to a later one (a cache taken at one scale and read
    //    at a later scale) are created or last written inside a captured step and must be kept
    //    (not replaced) while the hook lives: the later captured step reads their address.
    //  * Step-level calls (scales_to_run, group_size, on_scale_begin, on_logits, on_scale_end)
    //    run eagerly on every call, as without graphs; they may sync and read values. Rows they
    //    put in ScaleSegment::rows may change from call to call, but not their count (it must
    //    follow from the signature and the scale): the loop copies them into the graph's fixed
    //    buffer. on_scale_begin is the place to move per-scale constants to the device (it runs
    //    before the step is captured).
    //  * The signature names what changes the captured work (method and settings); probes that
    //    want per-block records from the hook: return std::nullopt. compact_kv_cache() is
    //    honoured (the graphs then own a compact cache whose host-side state, lengths and
    //    buffers, advances only while capturing), grouped steps too. attention_flops and KV
    //    bytes reported at capture are repeated for every replay.
    //  * A policy whose decisions become value-dependent from some step on (AMS-KV's promotion)
    //    clears ScaleContext::graphable in on_scale_begin of that step: the VAR loop replays the
    //    graphs of the steps before it and runs it and the rest of the call eagerly, block-level
    //    calls included, on the graphs' KV cache as the captured steps left it (a copy of its
    //    host-side state over the buffers the replays just wrote). The answer must be the same
    //    for a step on every call (it may depend only on the signature, the scale and the
    //    layout); host-side state the hook advanced in the block-level calls of the graphed
    //    steps is advanced only on the capturing call, so the hook keeps what it needs from
    //    that call (core/accel/ams_kv.cpp). The Infinity loop runs eager tails the same way.
    // GPU tests (tests/gpu/var_graph_test.cpp, infinity_graph_test.cpp) check graphed == eager
    // tokens per method.
    virtual std::optional<std::string> graph_signature(const VarConfig& config) {
        return std::nullopt;
    }
    // Scales [0, n) are run; the rest are skipped. Default: all.
    virtual int64_t scales_to_run(const VarConfig& config) { return config.num_scales(); }
    // true = the loop uses KvCache::compact (each layer holds exactly the tokens it keeps), for
    // policies that bound the cache (AMS-KV); false = one buffer per layer for the whole
    // schedule, the baseline's fast path.
    virtual bool compact_kv_cache(const VarConfig& config) { return false; }
    // The most tokens one layer's KV cache holds per sequence at any time of a run, for the
    // memory estimate (Runner::estimate_memory). Default: every token of the schedule.
    virtual int64_t kv_tokens_bound(const VarConfig& config) { return config.total_tokens(); }
    // The fewest a layer may need: below kv_tokens_bound when what is kept depends on the
    // image (AMS-KV promotes a layer to a larger budget only where its keys call for it).
    // The pre-run check refuses a batch only when even this does not fit.
    virtual int64_t kv_tokens_least(const VarConfig& config) { return kv_tokens_bound(config); }
    // Number of scales decoded together starting at ctx.scale (ctx.segments is still empty).
    virtual int64_t group_size(const ScaleContext& ctx) { return 1; }
    virtual void on_scale_begin(ScaleContext& ctx) {}
    // Rows of the step's packed sequence that this block computes (int64); undefined = all.
    // (K): the same rows for every batch row; (2B, K): per batch row (not in grouped steps).
    virtual at::Tensor select_tokens(const BlockContext& ctx, const at::Tensor& x) { return {}; }
    // Builds the block output from its input x (2B, n, C) and the computed rows h; undefined
    // = the default: left-out rows keep their input (zero residual update).
    virtual at::Tensor restore_tokens(const BlockContext& ctx, const at::Tensor& x,
                                      const at::Tensor& rows, const at::Tensor& h) {
        return {};
    }
    // The block's full output (2B, n, C), after restoration.
    virtual void on_block_output(const BlockContext& ctx, const at::Tensor& x) {}
    // After this step's keys/values were appended; a policy may rewrite the layer's cache.
    virtual void on_kv_append(const BlockContext& ctx) {}
    // Replaces the attention of this block; return an undefined tensor to use the default.
    virtual at::Tensor attend(const BlockContext& ctx, const at::Tensor& q, const at::Tensor& k,
                              const at::Tensor& v, double softmax_scale) {
        return {};
    }
    // Attention FLOPs of this step that attend() could not count on the host without a sync
    // (value-dependent sparse sets inside a CUDA graph): kept on the device by the hook and
    // read here, once per step after its tokens were sampled (may sync). The loop adds them to
    // the step's attention FLOPs. Default: none.
    virtual double take_deferred_attention_flops(const ScaleContext& ctx) { return 0.0; }
    // Guided logits (B, packed rows, V) before sampling.
    virtual void on_logits(const ScaleContext& ctx, at::Tensor& logits) {}
    // After the tokens of `seg` were folded into f_hat. tokens: (B, pn*pn), -1 where the
    // scale's token was not computed (pruned).
    virtual void on_scale_end(const ScaleContext& ctx, const ScaleSegment& seg,
                              const at::Tensor& tokens, const at::Tensor& f_hat) {}

  private:
    uint64_t instance_id_;
};

// Several policies in order. scales_to_run takes the minimum, group_size the maximum,
// compact_kv_cache is true if any policy asks, graph_signature is the policies' signatures
// joined (std::nullopt if any has none; "" for an empty chain); for select_tokens /
// restore_tokens / attend the first one that answers wins.
class HookChain : public SamplingHooks {
  public:
    void add(std::shared_ptr<SamplingHooks> h) { hooks_.push_back(std::move(h)); }
    bool empty() const { return hooks_.empty(); }
    size_t size() const { return hooks_.size(); }

    std::optional<std::string> graph_signature(const VarConfig& config) override;
    int64_t scales_to_run(const VarConfig& config) override;
    bool compact_kv_cache(const VarConfig& config) override;
    int64_t kv_tokens_bound(const VarConfig& config) override;  // the smallest bound
    int64_t kv_tokens_least(const VarConfig& config) override;  // the smallest least
    int64_t group_size(const ScaleContext& ctx) override;
    void on_scale_begin(ScaleContext& ctx) override;
    at::Tensor select_tokens(const BlockContext& ctx, const at::Tensor& x) override;
    at::Tensor restore_tokens(const BlockContext& ctx, const at::Tensor& x, const at::Tensor& rows,
                              const at::Tensor& h) override;
    void on_block_output(const BlockContext& ctx, const at::Tensor& x) override;
    void on_kv_append(const BlockContext& ctx) override;
    at::Tensor attend(const BlockContext& ctx, const at::Tensor& q, const at::Tensor& k,
                      const at::Tensor& v, double softmax_scale) override;
    void on_logits(const ScaleContext& ctx, at::Tensor& logits) override;
    double take_deferred_attention_flops(const ScaleContext& ctx) override;
    void on_scale_end(const ScaleContext& ctx, const ScaleSegment& seg, const at::Tensor& tokens,
                      const at::Tensor& f_hat) override;

  private:
    std::vector<std::shared_ptr<SamplingHooks>> hooks_;
};

}  // namespace varscope
