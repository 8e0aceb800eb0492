// CUDA graphs for the MAR sampling loop. At batch 1 the loop is bound by kernel launches: each
// of num_iter steps runs the transformer (~20 kernels per block) and the DiffLoss head's whole
// reverse diffusion (100 steps x ~30 kernels), i.e. hundreds of thousands of launches per image.
// Each step is therefore replayed from a graph captured once per shape:
//  * without hooks, the whole step (known/decoded positions from the order, encoder, decoder,
//    condition gather, the full reverse diffusion, the token update) is one graph per step index
//    (its shapes depend only on the step index for a fixed batch);
//  * with hooks that have a graph signature (mar_hooks.h; LazyMAR without probes and without a
//    similarity threshold) the same, the hooks' per-block work captured with the step and their
//    caches kept in this set's buffers; the signature is part of the key;
//  * with other hooks (probes, data-dependent row counts), the transformer stays eager and only
//    the reverse diffusion is a graph, one per decoded-row count.
//    ExecPolicy::mar_hook_step_graphs off (VARSCOPE_MAR_HOOK_GRAPHS=diffusion) keeps this path for
//    every hook (to measure it).
// The diffusion noise is drawn eagerly, before each replay, from the sampler's generator in
// the eager loop's order and shapes (start (N, C), then one (rows, C) per diffusion step) into
// static buffers, so graphed and eager runs consume the same random stream and give the same
// tokens. Nothing inside a step synchronises with the host.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace varscope {

namespace kernels {
class CudaGraph;
}

// What a set of MAR graphs was captured for: any difference needs new graphs.
struct MarGraphKey {
    int device = 0;
    int64_t batch = 0;
    at::ScalarType dtype = at::kFloat;
    int64_t num_iter = 0;
    double cfg = 1.0;
    int schedule = 0;  // CfgSchedule
    double temperature = 1.0;
    int attention = 0;   // AttentionBackend
    size_t weights = 0;  // weights_fingerprint of the transformer (a reload moves them)
    int64_t head_cfg_cache_period = 0;  // the hooks' MarSamplingHooks::head_cfg_cache_period
    bool fused_head = true;             // MarSampleOptions::fused_head
    int64_t head_mlp_cache_period = 0;  // the hooks' head_mlp_cache_period
    std::string hooks;         // graph signature of hooks run inside the step graphs ("" = none)
    bool chained_pool = true;  // ExecPolicy::mar_chained_graph_pool (Pool::Chained below)
    bool operator==(const MarGraphKey& o) const;
};

class MarGraphs {
  public:
    using Tensors = std::function<std::vector<at::Tensor>()>;
    explicit MarGraphs(const MarGraphKey& key);
    ~MarGraphs();
    const MarGraphKey& key() const { return key_; }

    // Where a graph's intermediates live. Chained: one memory pool for every graph run this
    // way (the whole-step graphs, one per step index: replayed one after another, each step's
    // outputs copied out before the next replays), so 64 steps hold one step's intermediates
    // rather than 64 sets (MAR-B at batch 64 ran out of memory with a pool per graph). Own:
    // a private pool (graphs replayed in no fixed order, e.g. the diffusion per row count).
    // MarGraphKey::chained_pool false (VARSCOPE_MAR_GRAPH_POOL=own) turns chaining off (to
    // measure it).
    enum class Pool { Own, Chained };
    // Replays the graph `name`, captured from fn on its first use (after one eager warm-up of
    // the first graph of this set on the capture stream). fn must only read static tensors
    // (buffer(), weights) and return its outputs, which the replay refreshes in place; with
    // Pool::Chained the caller reads them before running another chained graph. Static
    // tensors fn writes (hook state) must be ones the replay rewrites before reading, as the
    // warm-up runs fn once more (with hooks the first graph is step 0, a full refresh).
    const std::vector<at::Tensor>& run(const std::string& name, const Tensors& fn,
                                       Pool pool = Pool::Own);
    // A static tensor (made by `make` on first use, outside any capture).
    at::Tensor buffer(const std::string& name, const std::function<at::Tensor()>& make);
    double capture_millis() const { return capture_ms_; }
    size_t graph_count() const { return graphs_.size(); }
    // Attention FLOPs each captured graph computes (counted once, at capture).
    std::map<std::string, double> flops;
    // Kernel nodes of each captured graph (counted at capture).
    std::map<std::string, size_t> kernel_nodes;

  private:
    struct Graph;
    MarGraphKey key_;
    std::map<std::string, std::unique_ptr<Graph>> graphs_;
    std::map<std::string, at::Tensor> buffers_;
    const kernels::CudaGraph* chain_pool_ = nullptr;  // the first chained graph, owns the pool
    bool warmed_up_ = false;
    double capture_ms_ = 0.0;
};

}  // namespace varscope
