// CUDA graphs for the VAR sampling loop's transformer steps. At batch 1 the loop is bound by
// kernel launches (depth x ~12 kernels per scale, ~10 ms per scale for VAR-d30 on an H200), so
// each scale's transformer forward (scale input, all blocks, head) is captured once and replayed:
// one launch per scale. Token sampling, guidance and the VQVAE's f_hat update stay eager (they
// draw from the sampler's torch generator, exactly as without graphs).
//
// What depends only on the class condition (every block's AdaLN modulation, 1 + scale, the head
// temperatures) is computed once per call by a prologue graph instead of once per scale: at batch
// 1 the AdaLN weights are a third of the bytes each scale would stream, and each constant hoisted
// out of the steps is one kernel less per block and scale. The VQVAE decode is a graph too.
//
// Replays need fixed addresses, so a DenseStepGraphs owns the step's inputs (f_hat, the class
// condition, rows of pruned scales, step masks) and the KV cache for one shape (batch,
// precision, schedule, weights, accelerator signature); the sampler copies each call's inputs
// in and reads the logits out. Captured on the first call for that shape (timed:
// capture_millis), replayed on every later one.
//
// Accelerators: hooks that declare a signature (SamplingHooks::graph_signature, whose comment
// is the contract) are captured inside the steps; the step-level hooks and sampling stay eager.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/models/var.h"
#include "core/sampling/kv_cache.h"
#include "core/sampling/step_cost.h"

namespace varscope {

namespace kernels {
class CudaGraph;
class PartTimer;
}  // namespace kernels

// What a set of graphs was captured for: any difference needs new graphs.
struct DenseGraphKey {
    int device = 0;
    int64_t batch = 0;  // B (2B rows with CFG)
    at::ScalarType dtype = at::kFloat;
    int attention = 0;  // AttentionBackend
    std::vector<int64_t> patch_nums;
    size_t weights = 0;        // fingerprint of the weights' addresses (a reload moves them)
    std::string hooks;         // the hooks' graph signature ("" = none)
    bool compact_kv = false;   // the hooks asked for a compact KV cache
    bool part_timing = false;  // the steps record CUDA events between their parts
    // SamplingHooks::instance_id() of the hooks captured with (0 = none): another hooks object
    // with the same signature has other buffers, so its graphs are captured anew.
    uint64_t hooks_instance = 0;
    // What else the family's captured steps bake in (Infinity: text length, guidance and
    // temperature per scale); "" for VAR.
    std::string step_settings;
    // The step graphs share one memory pool (ExecPolicy::var_chained_graph_pool).
    bool chained_pool = true;
    bool operator==(const DenseGraphKey& o) const;
};

class SamplingHooks;
class ProbeSink;
// The transformer steps can run as CUDA graph replays when asked (`enabled`), on CUDA with the
// graph code built, when the hooks allow it (a graph signature: hooks.h) and no probe wants
// per-block data. Returns the hooks' signature ("" without hooks), or nullopt.
std::optional<std::string> graphs_apply(bool enabled, const VarConfig& config,
                                        const at::Device& device, SamplingHooks* hooks,
                                        ProbeSink* probe);

// Hash of the addresses (and shapes) of every parameter and buffer of `m`: graphs read the
// weights where they were at capture time.
size_t weights_fingerprint(const torch::nn::Module& m);

class DenseStepGraphs {
  public:
    // The step's forward: reads the static inputs (f_hat(), condition(), step_input()),
    // appends to `cache`, adds its attention FLOPs to `flops`, records its cost into `rec`
    // (null in the warm-up) and returns the raw (2B, l, V) logits. warmup: the eager run of the
    // dense first scale before any capture (no hooks).
    using Forward = std::function<at::Tensor(int64_t si, KvCache& cache, double& flops,
                                             const CostRecorder* rec, bool warmup)>;
    // Work outside the steps (prologue, decode): reads static tensors, returns its outputs.
    using Tensors = std::function<std::vector<at::Tensor>()>;

    DenseStepGraphs(const VarConfig& config, const DenseGraphKey& key,
                    const at::Tensor& condition_prototype);
    ~DenseStepGraphs();

    at::Tensor& f_hat() { return f_hat_; }          // (B, Cvae, H, W) float
    at::Tensor& condition() { return condition_; }  // (2B, D): class embeddings, CFG pairs
    // Raw logits of the step starting at scale si (a tensor owned by the graph, valid until the
    // next replay of that step). Captures `forward` the first time for si (warming up before
    // the first capture), then replays; adds the step's attention FLOPs to `flops`. layout:
    // what the step computes (scales and row counts); a replay with another layout throws.
    // cost (optional): the step's FLOPs per part (recorded at capture) and kernel launches.
    at::Tensor step(int64_t si, const std::vector<int64_t>& layout, const Forward& forward,
                    double& flops, StepCost* cost = nullptr);
    // The events between the parts of step si (key.part_timing; null otherwise), recorded
    // again by every replay: read them once the replay has finished.
    const kernels::PartTimer* part_timer(int64_t si) const;
    // A static input of step si (rows of a pruned scale, a step mask): made by `make` on the
    // first call (outside any capture), the same tensor afterwards; the caller copies each
    // call's values in.
    at::Tensor step_input(int64_t si, const std::string& name,
                          const std::function<at::Tensor()>& make);
    // KV bytes held after step si (recorded at capture).
    int64_t kv_bytes_after(int64_t si) const;
    // The KV cache for the steps that run eagerly after the graphed ones, from scale si on (a
    // hook cleared ScaleContext::graphable, hooks.h): a copy of the graphs' cache as the captured
    // steps left it. The copy shares the buffers, which this call's replays have just written;
    // the eager steps write into them in place or replace them in the copy only, and the next
    // call's replays rewrite every slot they read. Throws unless the captured steps end right
    // before scale si.
    KvCache eager_tail_cache(int64_t si) const;
    // Replays the graph named `name` (captured from fn, after an eager warm-up, on its first
    // use) and returns the tensors fn returned at capture, now holding this replay's values.
    // The prologue runs once per sample after condition() is filled, before the steps.
    const std::vector<at::Tensor>& run(const std::string& name, const Tensors& fn);
    double capture_millis() const { return capture_ms_; }
    bool fully_captured() const;
    int64_t kv_bytes() const { return cache_.total_bytes(); }
    std::mutex& mutex() { return mutex_; }  // held by the one sample() using the buffers

  private:
    struct Scale;
    const VarConfig config_;
    DenseGraphKey key_;
    at::Tensor f_hat_, condition_;
    KvCache cache_;
    std::vector<std::unique_ptr<Scale>> scales_;
    struct Extra;
    std::map<std::string, std::unique_ptr<Extra>> extras_;
    bool warmed_up_ = false;
    int64_t last_captured_ = -1;                      // steps are captured in order, on one call
    const kernels::CudaGraph* chain_pool_ = nullptr;  // the first step's graph, owns the pool
    double capture_ms_ = 0.0;
    std::mutex mutex_;
};

// Bytes a new set of graphs for `key` is expected to hold: its full KV cache (a compact cache
// holds less; this is the bound) and half as much again for the graphs' own memory pools.
int64_t graph_set_bytes(const VarConfig& config, const DenseGraphKey& key);

// How many of the least recently used graph sets (bytes each, least recent first) to release
// before a new set of `need` bytes is made with `available` bytes free: the fewest that make
// room; all of them when even that does not (the new set's best chance); none when the free
// memory is unknown (available < 0).
size_t graph_sets_to_release(int64_t available, int64_t need,
                             const std::vector<int64_t>& lru_bytes);

// The sampler's graphs, a few shapes at most (each holds a KV cache and its graphs' memory).
// A new set first releases the least recently used sets on its device when the device could not
// hold it beside them (a batch that fits alone must not fail because an earlier shape's KV cache
// is still cached, e.g. the benchmark's event-timed graphs after the timed ones).
class DenseGraphCache {
  public:
    static constexpr size_t kMaxEntries = 3;
    std::shared_ptr<DenseStepGraphs> get(const VarConfig& config, const DenseGraphKey& key,
                                         const at::Tensor& condition_prototype);
    void erase(const std::shared_ptr<DenseStepGraphs>& graphs);
    void clear();
    size_t size() const;
    // What the release rule reads as the device's available bytes (default: CUDA tensors'
    // kernels::cuda_available_memory, unknown elsewhere). For tests: a fixed answer exercises
    // the rule without running a device out of memory.
    using MemoryProbe = std::function<int64_t(int device)>;
    void set_memory_probe(MemoryProbe probe);

  private:
    MemoryProbe memory_probe_;
    mutable std::mutex mutex_;
    std::vector<std::pair<DenseGraphKey, std::shared_ptr<DenseStepGraphs>>> entries_;  // LRU last
};

}  // namespace varscope
