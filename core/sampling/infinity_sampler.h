// Infinity's next-scale sampling loop (the official Infinity.autoregressive_infer_cfg with
// inference_mode): per scale, the transformer with a KV cache over the earlier scales and
// cross-attention to the text, CFG (per-scale cfg list, at a layer's output and/or on the
// logits), temperature tau, top-k / top-p per bit with the official draw order, and the
// summed-codes update through the BSQ quantizer's operations (core/models/bsq_quant.h).
//
// Design (issue #32): the accelerators plug in through the VAR loop's SamplingHooks
// (core/sampling/hooks.h), called here at the same points and in the same order as
// var_sampler.cpp's run_block: scales_to_run, compact_kv_cache, on_scale_begin (scale-level
// token pruning via ScaleSegment::rows), per block select_tokens -> KV append -> on_kv_append ->
// attend -> (cross-attention, FFN) -> restore_tokens -> on_block_output, then on_logits and
// on_scale_end. This is a second loop rather than a model kind of the VAR loop because the step
// differs in every part (text condition and cross-attention, RoPE per scale, bit sampling,
// codes instead of a codebook) and the VAR loop's step and autocast are written against
// VarTransformer; what both loops share is shared code (the graph cache, cuda_graph.h; the
// grouping rule, grouped_step.h).
// What a hook sees: ScaleContext::config is a VarConfig view of the Infinity model (depth,
// width, heads, patch_nums = the scales' sides), which only exists for square schedules (h/w
// = 1, the 1024 x 1024 default): on other aspect ratios hooks are refused (the hooks' API
// knows square scales only). Tokens handed to on_scale_end / probes are the bits of a token
// packed into an int64 (bit i -> 2^i; -1 where a scale-level policy pruned the token).
// Spatial patchify (Infinity-8B: 4 x 14 bits per token) follows the official unpatchify /
// patchify around the codes update (checked against the official loop on the tiny fixture).
// CUDA graphs as in the VAR loop (cuda_graph.h; see InfinitySampleOptions::cuda_graphs) and the
// official bf16 mode (InfinityTransformerImpl::use_autocast_bf16). Grouped steps (group_size >
// 1, LazyVAR's PGD) follow the VAR loop's rule (core/sampling/grouped_step.h): the group's
// scales take their inputs from the same summed codes, each with its own level embedding and
// RoPE positions, block-causal among them, guidance and tau per scale; graphed too.
// The cost model (step_cost.h, `bench e2e`) marks the same parts as the VAR loop, and the
// attention over the text as a part of its own (cross_attention); guidance, at the logits or
// at a layer's output, is left outside the parts like the VAR loop's.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <memory>
#include <optional>
#include <vector>

#include "core/exec_policy.h"
#include "core/models/bsq_quant.h"
#include "core/models/infinity.h"
#include "core/models/infinity_block_stream.h"
#include "core/sampling/hooks.h"
#include "core/sampling/probes.h"
#include "core/sampling/step_cost.h"
#include "core/sampling/var_sampler.h"  // AttentionBackend, SamplingCancelled

namespace varscope {

class DenseGraphCache;

struct InfinitySampleOptions {
    std::optional<uint64_t> seed = 0;  // the official g_seed; nullopt = the global generator
    // Guidance per scale (the official cfg_list); empty = `cfg` at every scale. A scale with
    // guidance 1 is unguided; when every scale is, the unconditional rows are not run at all.
    std::vector<double> cfg_list;
    double cfg = 3.0;
    std::vector<double> tau_list;  // logit temperature per scale; empty = `tau` everywhere
    double tau = 1.0;
    int64_t top_k = 900;  // per bit (V = 2: top-k only acts for k = 1); 0 = off
    double top_p = 0.97;  // 0 = off
    // Where guidance mixes the two halves: 0 = on the logits (tools/run_infinity.py's default),
    // a negative i = at the output of layer depth + i (autoregressive_infer_cfg's default is
    // {-5}); both may be given. 1 (on probabilities) is not implemented officially either.
    std::vector<int64_t> cfg_insertion_layer{0};
    AttentionBackend attention = AttentionBackend::Sdpa;
    bool time_scales = true;
    // Time the parts of each step (InfinitySampleResult::step_costs[i].ms): CUDA events on a
    // GPU (graphed steps get a graph set of their own; the events cost a little device time,
    // so timed runs leave it off), the host clock on the CPU. Same bits.
    bool time_parts = false;
    // Replay each scale's transformer forward as a CUDA graph (captured on the first call per
    // batch, text length, guidance / temperature list, precision, schedule and hooks object),
    // on CUDA, with guidance, on square schedules, with hooks that have a graph signature and
    // probes that need no per-block data; eager elsewhere. Same bits as eager.
    bool cuda_graphs = true;
    bool tf32 = false;  // fp32 matrix products on TF32 tensor cores (LoadOptions::tf32)
    const std::atomic<bool>* cancel = nullptr;  // checked before every scale
    // std::invalid_argument naming the field.
    void validate(const InfinityConfig& c, const InfinitySchedule& s) const;
};

struct InfinitySampleResult {
    // Per scale run (B, h, w, d) uint8 bits; per scale the bits packed into int64 token ids
    // (B, h*w) as the hooks and probes see them (-1 pruned).
    std::vector<at::Tensor> bits, tokens;
    at::Tensor summed_codes;  // (B, d, H, W) float: what the BSQ VAE decodes
    std::vector<double> scale_millis;
    double total_millis = 0.0;
    bool cuda_graphs = false;           // the scales ran as CUDA graph replays
    double graph_capture_millis = 0.0;  // spent capturing in this call (first call per shape)
    double attention_flops = 0.0;
    int64_t kv_bytes = 0, kv_bytes_peak = 0;
    // The cost model (step_cost.h), one entry per step: FLOPs per part (the text's attention
    // kernel as cross_attention), kernel launches (graphed steps), part times (time_parts).
    std::vector<StepCost> step_costs;
};

// A VarConfig describing an Infinity model for the hooks, or nullopt when the schedule has a
// non-square scale.
std::optional<VarConfig> infinity_hook_view(const InfinityConfig& c, const InfinitySchedule& s);

class InfinitySampler {
  public:
    InfinitySampler(InfinityTransformer model, bsq::BsqQuantConfig quant);
    // `text`: one row per image (the unconditional rows are added here, or given as `negative`).
    InfinitySampleResult sample(const InfinityText& text, const InfinitySchedule& schedule,
                                const InfinitySampleOptions& options,
                                SamplingHooks* hooks = nullptr, ProbeSink* probe = nullptr,
                                const InfinityText* negative = nullptr);
    InfinityTransformer transformer() const { return model_; }
    void set_exec_policy(const ExecPolicy& exec) { exec_ = exec; }
    // Frees the captured graphs and their buffers (a few shapes are kept: cuda_graph.h).
    void release_graphs();
    // The low-memory mode's block streaming (infinity_block_stream.h) for every later call, or
    // none; copies of the sampler share it. Its calls run eagerly (no CUDA graphs).
    void set_block_stream(std::shared_ptr<InfinityBlockStream> stream) {
        stream_ = std::move(stream);
    }
    const InfinityBlockStream* block_stream() const { return stream_.get(); }
    InfinityBlockStream* block_stream() { return stream_.get(); }
    size_t cuda_graph_sets() const;

  private:
    InfinityTransformer model_;
    bsq::BsqQuantConfig quant_;
    ExecPolicy exec_;
    std::shared_ptr<DenseGraphCache> graphs_;  // shared by copies of the sampler
    std::shared_ptr<InfinityBlockStream> stream_;
};

}  // namespace varscope
