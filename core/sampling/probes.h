// Probes: what the sampling loop reports for inspection (GUI panels, CLI timings, tests).
// Plain data and a sink interface; no UI dependency. Tensors in records are CPU copies.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace varscope {

struct ScaleRecord {
    int64_t scale = 0;      // index si
    int64_t patch_num = 0;  // the scale's side length pn
    double millis = 0.0;    // wall time of this scale (device-synchronised when timing is on)
    at::Tensor tokens;      // (B, pn*pn) sampled indices
    at::Tensor f_hat;       // (B, Cvae, H, W) accumulated features after this scale, if wanted
    int64_t step = 0;       // loop step that decoded it (scales of a LazyVAR group share one)
    bool skipped = false;   // scale not run (scale skipping); tokens undefined, millis 0
    // Attention FLOPs (QK^T and PV) the step computed, as the result's attention_flops counts
    // them; booked like millis: a grouped step's on its first scale, 0 on the others.
    double attention_flops = 0.0;
};

struct AttentionRecord {
    int64_t scale = 0;
    int64_t layer = 0;
    at::Tensor probs;  // (heads, q_tokens, k_tokens) for the first conditional sample, float
};

// What one block's attention was computed from, for analyses that need more than the
// probabilities (core/analysis/: recall of a method's mask, output error). First conditional
// sample, on the model's device, views of the loop's tensors (valid during the call only).
struct AttentionInputs {
    int64_t scale = 0;
    int64_t layer = 0;
    at::Tensor q;     // (heads, q_rows, head_dim), softmax_scale not applied
    at::Tensor k, v;  // (heads, kv_len, head_dim): the layer's cache as attention reads it
    double softmax_scale = 1.0;
    at::Tensor mask;  // additive (q_rows, kv_len) or undefined (every key visible)
};

// What an accelerator decided at one scale (and layer), for the inspector. `kind` names the
// record type (core/accel/probe_kinds.h lists them with their tensor layouts); tensors are CPU.
struct AccelRecord {
    std::string method;  // "fastvar", "sparvar", "lazyvar", "ams_kv", "skip"
    std::string kind;    // e.g. "pts_scores", "csla_block_mask", "update_index", "kv_bytes"
    int64_t scale = -1;
    int64_t layer = -1;  // -1 = not layer specific
    at::Tensor data;
    std::map<std::string, double> values;  // scalar facts, e.g. {"sparsity", 0.83}
};

// Receives records while sampling runs. Called on the sampling thread.
class ProbeSink {
  public:
    virtual ~ProbeSink() = default;
    // Return true to have attention probabilities materialised for this (scale, layer).
    virtual bool wants_attention(int64_t scale, int64_t layer) const { return false; }
    virtual bool wants_fhat() const { return false; }
    // Per-block wall time split into QKV/cache, attention and FFN parts (AccelRecord kind
    // "block_ms", method "loop"); costs a device synchronisation per part.
    virtual bool wants_block_timing() const { return false; }
    virtual void on_attention(AttentionRecord record) {}
    virtual void on_scale(ScaleRecord record) {}
    // Accelerators ask before computing costly records (e.g. dense maps) only for probes.
    virtual bool wants_accel(const std::string& method, const std::string& kind) const {
        return true;
    }
    virtual void on_accel(AccelRecord record) {}
    // The inputs of a block's attention before it is computed (after the hooks' token
    // selection and KV-cache update). Asking for them makes the run eager, like attention maps.
    // (Appended last: the vtable slots above stay where they were.)
    virtual bool wants_attention_inputs(int64_t scale, int64_t layer) const { return false; }
    virtual void on_attention_inputs(const AttentionInputs& inputs) {}
};

// Keeps every record; which attention maps to keep is chosen up front.
class ProbeRecorder : public ProbeSink {
  public:
    struct Selection {
        std::vector<int64_t> layers;  // empty = none
        std::vector<int64_t> scales;  // empty = all scales
        bool fhat = false;
        bool block_timing = false;
        // Accelerator records (false: none asked for or kept, so that accelerators whose
        // records need eager steps may run as CUDA graphs, e.g. for timing sweeps).
        bool accel = true;
    };
    ProbeRecorder() = default;
    explicit ProbeRecorder(Selection sel) : sel_(std::move(sel)) {}

    bool wants_attention(int64_t scale, int64_t layer) const override;
    bool wants_fhat() const override { return sel_.fhat; }
    bool wants_block_timing() const override { return sel_.block_timing; }
    bool wants_accel(const std::string&, const std::string&) const override { return sel_.accel; }
    void on_attention(AttentionRecord record) override;
    void on_scale(ScaleRecord record) override;
    void on_accel(AccelRecord record) override;

    std::vector<ScaleRecord> scales() const;
    std::vector<AttentionRecord> attention() const;
    std::vector<AccelRecord> accel() const;
    // Records of one kind (optionally one scale), in arrival order.
    std::vector<AccelRecord> accel(const std::string& kind, int64_t scale = -1) const;

  private:
    Selection sel_;
    mutable std::mutex mu_;
    std::vector<ScaleRecord> scales_;
    std::vector<AttentionRecord> attention_;
    std::vector<AccelRecord> accel_;
};

}  // namespace varscope
