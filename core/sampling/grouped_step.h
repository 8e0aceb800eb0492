// The grouping rule of the sampling loops (LazyVAR's parallel group decoding, hooks.h's
// group_size), written once for the VAR loop (var_sampler.cpp) and the Infinity loop
// (infinity_sampler.cpp): which scales a step decodes, where their rows go in the step's packed
// sequence (and in the CUDA graphs' fixed buffers), and the block-causal mask among them.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "core/sampling/hooks.h"

namespace varscope {

class DenseStepGraphs;

// The scales of the step that starts at ctx.scale, as ctx.segments (empty before): the hooks'
// group size, at least 1 and at most the scales left to run (scales [ctx.scale, scales_run)).
// Without hooks one scale.
void plan_step_segments(ScaleContext& ctx, SamplingHooks* hooks, int64_t scales_run);

// After on_scale_begin: each segment's rows (if a policy set them) as int64 on `device`,
// checked (one-dimensional, not empty), and its offset in the step's packed sequence. With
// `graphs` (the step is replayed), the rows go into the step's fixed buffers. Returns the
// step's layout for DenseStepGraphs::step: (scale, row count or -1 = all) per segment.
std::vector<int64_t> place_step_segments(ScaleContext& ctx, const at::Device& device,
                                         DenseStepGraphs* graphs);

// Additive mask (L, L) over a grouped step's packed rows: a row sees the rows of its own and of
// earlier scales of the group (the training-time block-causal mask restricted to the group).
at::Tensor group_mask(const std::vector<ScaleSegment>& segs, const at::TensorOptions& options);

// The step's group mask (undefined for a step of one scale); with `graphs`, the step's fixed
// buffer (made once: it follows from the layout).
at::Tensor step_group_mask(const ScaleContext& ctx, const at::TensorOptions& options,
                           DenseStepGraphs* graphs);

// A block's additive mask (q rows, kv_len) in a grouped step: the rows the block computes
// (`rows` from select_tokens, undefined = all; per-row selections are refused) see every key of
// the earlier steps and, among the step's own keys (the newest kv entries), what the step mask
// allows.
at::Tensor block_group_mask(const at::Tensor& step_mask, const at::Tensor& rows, int64_t kv_len);

// Whether a block of a grouped step (`step_mask` defined) builds its additive mask
// (block_group_mask): only where something reads it - eager attention, a probe (the inspector's
// attention and its inputs), or a block that computes some rows only (step_attention_sdpa then
// masks). grouped_attention_sdpa needs none; building it anyway cost two (rows x kv_len) kernels
// per block, captured into the graphs too.
bool block_needs_group_mask(const at::Tensor& step_mask, const at::Tensor& rows, bool eager,
                            bool probe);

// SDPA over a grouped step's rows without the additive mask: one call per segment, its queries
// (B, H, length, d) seeing the cached keys up to the segment's own last row - the prefix that
// block_group_mask leaves visible - so each call may take the fused (flash) kernels, which a
// mask rules out (LazyVAR's grouped step ran its attention at a third of the dense step's
// FLOP rate with the mask: bench/results/2026-11-29-h200/session30). The same softmax over the
// same keys as attention_sdpa(q, k, v, scale, block_group_mask(...)), rounded by another
// kernel. For a block that computes every row of the step (no block-level token selection).
at::Tensor grouped_attention_sdpa(const std::vector<ScaleSegment>& segs, const at::Tensor& q,
                                  const at::Tensor& k, const at::Tensor& v, double scale);

// A block's SDPA in the loops (VAR and Infinity): grouped_attention_sdpa for a grouped step
// (`step_mask` defined) whose block computes every row (`rows` undefined), else attention_sdpa
// with the block's additive mask `block_mask` (undefined outside groups).
at::Tensor step_attention_sdpa(const ScaleContext& ctx, const at::Tensor& step_mask,
                               const at::Tensor& rows, const at::Tensor& block_mask,
                               const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               double scale);

}  // namespace varscope
