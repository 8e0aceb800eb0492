// The sampling loop's cost model (`varscope-cli bench e2e`): per step, the device time and
// FLOPs of each part of the transformer forward and the kernels it launches, so a report shows
// where each millisecond goes and what an accelerator's own work costs.
//
// Parts (CostPart):
//   input      the scale's input: f_hat pooled to the scale, word embedding, positions
//   projection each block's AdaLN-modulated LayerNorm, QKV projection, KV-cache append and
//              output projection
//   attention  the attention itself (softmax(QK^T)V, dense or the method's sparse kernel)
//   ffn        each block's residual adds, second LayerNorm and FFN
//   overhead   the method's own work in the blocks: token selection, gathers and scatters,
//              cache eviction, scoring, Top-K and index maps inside attend()
//   head       the head's AdaLN and the logits
//   cross_attention  Infinity: the attention kernel over the text's keys (its LayerNorm, query
//              and output projections are projection); always 0 in the VAR loop
// Hooks mark their own stretches inside attend() (BlockContext::mark): what they enqueue before
// their attention kernel is overhead, the kernel is attention. What runs outside the step's
// forward (token sampling, guidance, the f_hat update, step-level hooks) is the step's time
// minus the parts: the bench reports it as "outside". The Infinity loop ends the parts before
// guidance, wherever guidance mixes (logits or a layer's output), so it is outside there too.
//
// FLOPs are counted from the shapes (2 per multiply-add): projections 2*N*C*(3C + C), FFN
// 2*N*C*hidden*2, head 2*N*C*V, input 2*N*Cvae*C (N rows, C width); attention as the loop
// counts it (4*B*H*Lq*Lk*d or the hook's report). Infinity: projections add the cross-attention's
// query and output projections, 2*N*C*(3C + C + 2C); cross_attention 4*B*H*Lq*Lt*d over the
// (padded) text; input 2*B*l*d*C, the word embedding of the codes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

namespace varscope {

namespace kernels {
class PartTimer;
}

// Appended parts keep the earlier labels (JSON names come from cost_part_name).
enum class CostPart : int { Input = 0, Projection, Attention, Ffn, Overhead, Head, CrossAttention };
constexpr int kCostParts = 7;
const char* cost_part_name(CostPart part);

struct StepCost {
    int64_t scale = 0;   // first scale of the step
    int64_t scales = 1;  // scales decoded in the step (grouped steps: more than one)
    std::array<double, kCostParts> flops{};
    // Device milliseconds per part (CUDA events between the parts); valid when timed.
    std::array<double, kCostParts> ms{};
    bool timed = false;
    // Kernels the step's forward launches: the kernel nodes of its CUDA graph; -1 when it ran
    // eagerly (not counted without a profiler).
    int64_t launches = -1;
};

// What the loop's forward writes to while a step runs: FLOPs into `cost`, timestamps into
// `timer` (null when the parts are not timed).
struct CostRecorder {
    StepCost* cost = nullptr;
    kernels::PartTimer* timer = nullptr;
    void mark(CostPart part) const;  // starts `part` on the device's stream (timer only)
    void end() const;                // ends the last part
    void add_flops(CostPart part, double flops) const {
        if (cost) cost->flops[static_cast<int>(part)] += flops;
    }
};

// After the steps (the device synchronised: their events are complete), each step's part times
// from its eager timer (`eager`, by step index) or else from its scale's graph timer
// (`graph_timer`, null where none); a step with neither stays untimed.
void read_part_times(std::vector<StepCost>& costs,
                     const std::map<size_t, std::unique_ptr<kernels::PartTimer>>& eager,
                     const std::function<const kernels::PartTimer*(int64_t scale)>& graph_timer);

}  // namespace varscope
