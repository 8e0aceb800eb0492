// The VAR next-scale sampling loop: one loop for the baseline and every accelerator, which
// plug in through SamplingHooks; ProbeSink receives what the inspector shows.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

#include "core/models/var.h"
#include "core/models/vqvae.h"
#include "core/sampling/hooks.h"
#include "core/sampling/probes.h"
#include "core/sampling/step_cost.h"

namespace varscope {

enum class AttentionBackend { Sdpa, Eager };

struct VarSampleOptions {
    std::vector<int64_t> class_ids;  // one per image (-1 = unconditional); empty = random labels
    int64_t batch = 1;               // used when class_ids is empty
    int64_t images() const {         // how many images a run makes
        return class_ids.empty() ? batch : static_cast<int64_t>(class_ids.size());
    }
    std::optional<uint64_t> seed = 0;  // nullopt = non-deterministic
    double cfg = 4.0;
    int64_t top_k = 900;
    double top_p = 0.95;
    bool more_smooth = false;  // official Gumbel-softmax smoothing (visualisation only)
    AttentionBackend attention = AttentionBackend::Sdpa;
    bool time_scales = true;  // synchronise the device per scale to time it
    bool decode = true;       // run the VQVAE decoder (benchmarks of the transformer skip it)
    // Replay each scale's transformer forward as a CUDA graph (captured on the first call per
    // batch / precision / schedule), on CUDA without hooks, or with probes that need no
    // per-block data; ignored elsewhere. Same tokens as without.
    bool cuda_graphs = true;
    // Time the parts of each step (VarSampleResult::step_costs[i].ms): CUDA events on a GPU,
    // which cost a little device time (graphs with event nodes are captured apart from the
    // plain ones: time clean runs without it); the host clock on the CPU, nearly free.
    bool time_parts = false;
    const std::atomic<bool>* cancel = nullptr;  // checked before every scale
    void validate(const VarConfig& cfg) const;  // std::invalid_argument naming the field
};

struct VarSampleResult {
    at::Tensor images;               // (B, 3, H, W) float in [0, 1], on the model's device
    at::Tensor labels;               // (B) int64 class ids used
    std::vector<at::Tensor> tokens;  // per scale (B, pn*pn) int64
    at::Tensor f_hat;                // (B, Cvae, H, W) final accumulated features
    std::vector<double> scale_millis;
    double decode_millis = 0.0;
    double total_millis = 0.0;
    int64_t kv_bytes = 0;               // KV-cache bytes held at the end (all layers)
    int64_t kv_bytes_peak = 0;          // the most KV bytes held after any step
    double attention_flops = 0.0;       // attention FLOPs (QK^T and PV) actually computed
    bool cuda_graphs = false;           // the transformer steps ran as CUDA graph replays
    double graph_capture_millis = 0.0;  // spent capturing graphs in this call (first call only)
    // Spent in the probe's on_scale (e.g. a GUI decoding a preview per scale): part of
    // total_millis, not of scale_millis; subtract it for the model's own time.
    double probe_millis = 0.0;
    // The cost model (step_cost.h), one entry per step: FLOPs per part, kernel launches (graph
    // runs), part times (with VarSampleOptions::time_parts).
    std::vector<StepCost> step_costs;
};

class DenseGraphCache;

class SamplingCancelled : public std::runtime_error {
  public:
    SamplingCancelled() : std::runtime_error("sampling cancelled") {}
};

class VarSampler {
  public:
    VarSampler(VarTransformer var, Vqvae vae);
    VarSampleResult sample(const VarSampleOptions& options, SamplingHooks* hooks = nullptr,
                           ProbeSink* probe = nullptr);

    // Handles share the modules (ModuleHolder is a shared pointer).
    VarTransformer transformer() const { return var_; }
    Vqvae vqvae() const { return vae_; }
    // fp32 matrix products on TF32 tensor cores while sampling on CUDA (LoadOptions::tf32);
    // the process-wide torch setting is restored after each sample(). Drops captured graphs.
    void set_tf32(bool on);
    bool tf32() const { return tf32_; }
    // How sampling executes (LoadOptions::exec); hooks see it as ScaleContext::exec. Drops
    // captured graphs when it changes.
    void set_exec_policy(const ExecPolicy& exec);
    const ExecPolicy& exec_policy() const { return exec_; }
    // Drops the captured CUDA graphs and their buffers (they are rebuilt on demand).
    void clear_cuda_graphs();
    size_t cuda_graph_sets() const;  // shapes with captured graphs held now
    // What the graph cache reads as the device's free bytes when a new shape needs room
    // (DenseGraphCache::set_memory_probe; tests).
    void set_graph_memory_probe(std::function<int64_t(int device)> probe);

  private:
    VarTransformer var_;
    Vqvae vae_;
    std::shared_ptr<DenseGraphCache> graphs_;
    bool tf32_ = false;
    ExecPolicy exec_;
};

// Synchronises `device` if it is a CUDA device (no-op on CPU).
void synchronize_device(const at::Device& device);

}  // namespace varscope
