// Hook points of the one VAR sampling loop. Accelerators (FastVAR, SparVAR, LazyVAR, AMS-KV,
// scale skipping) implement SamplingHooks; with no hooks the loop is the official sampler.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "core/models/var.h"

namespace varscope {

class KvCache;

struct ScaleContext {
    const VarConfig& config;
    int64_t scale;       // si
    int64_t patch_num;   // pn
    int64_t batch;       // B (the model runs 2B rows with CFG)
    int64_t token_begin; // first token index of this scale in the full sequence
    at::Tensor f_hat;    // (B, Cvae, H, W) accumulated before this scale (read-only for hooks)
};

struct BlockContext {
    const ScaleContext& scale;
    int64_t layer;
    KvCache& cache;
};

class SamplingHooks {
public:
    virtual ~SamplingHooks() = default;
    virtual void on_scale_begin(ScaleContext& ctx) {}
    // Tokens of this scale that the block computes, as int64 indices into the scale's tokens;
    // an undefined tensor means all. Rows left out keep their input (zero residual update).
    virtual at::Tensor select_tokens(const BlockContext& ctx, const at::Tensor& x) { return {}; }
    // After this scale's keys/values were appended; a policy may rewrite the layer's cache.
    virtual void on_kv_append(const BlockContext& ctx) {}
    // Replaces the attention of this block; return an undefined tensor to use the default.
    virtual at::Tensor attend(const BlockContext& ctx, const at::Tensor& q, const at::Tensor& k,
                              const at::Tensor& v, double softmax_scale) {
        return {};
    }
    // Guided logits (B, l, V) before sampling.
    virtual void on_logits(const ScaleContext& ctx, at::Tensor& logits) {}
    // After the tokens of this scale were folded into f_hat.
    virtual void on_scale_end(const ScaleContext& ctx, const at::Tensor& tokens,
                              const at::Tensor& f_hat) {}
};

// Several policies in order; for attend/select_tokens the first one that answers wins.
class HookChain : public SamplingHooks {
public:
    void add(std::shared_ptr<SamplingHooks> h) { hooks_.push_back(std::move(h)); }
    bool empty() const { return hooks_.empty(); }

    void on_scale_begin(ScaleContext& ctx) override;
    at::Tensor select_tokens(const BlockContext& ctx, const at::Tensor& x) override;
    void on_kv_append(const BlockContext& ctx) override;
    at::Tensor attend(const BlockContext& ctx, const at::Tensor& q, const at::Tensor& k,
                      const at::Tensor& v, double softmax_scale) override;
    void on_logits(const ScaleContext& ctx, at::Tensor& logits) override;
    void on_scale_end(const ScaleContext& ctx, const at::Tensor& tokens,
                      const at::Tensor& f_hat) override;

private:
    std::vector<std::shared_ptr<SamplingHooks>> hooks_;
};

}  // namespace varscope
