// MAR's counterpart of VarPipeline: load an official MAR checkpoint (or build one with random
// weights) and generate. The KL-16 VAE that turns latents into images is attached when given.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>

#include "core/io/state_dict.h"
#include "core/models/mar.h"
#include "core/pipeline.h"  // LoadOptions, Precision, parse_device
#include "core/sampling/mar_sampler.h"

namespace varscope {

struct MarModelFiles {
    std::string mar_path;  // checkpoint-last.pth (or a raw state dict / .safetensors)
    std::string vae_path;  // kl16.ckpt; empty = no image decoding (latents only)
    // Which weights of a training checkpoint: the EMA ones (as the official evaluation), or
    // the raw "model" ones.
    bool prefer_ema = true;
    // Diffusion respacing of the DiffLoss sampler (not stored in checkpoints; the official
    // evaluation passes --num_sampling_steps 100).
    std::string num_sampling_steps = "100";
};

// The MAR weights inside a checkpoint's flattened tensors: "model_ema.<name>" (preferred when
// prefer_ema), "model.<name>", or the names at top level (a raw state dict). `source` receives
// "model_ema", "model" or "state dict". Throws CheckpointError saying what the file holds
// when none of these is a MAR state dict.
StateDict select_mar_weights(const StateDict& all, bool prefer_ema, std::string* source,
                             const std::string& what = "checkpoint");

class MarPipeline {
public:
    static MarPipeline load(const MarModelFiles& files, const LoadOptions& options);
    // Official-init random weights (nonzero_head: a DiffLoss head that is not all zeros, so
    // random models sample something else than pure noise), for tests and benchmarks.
    static MarPipeline random(const MarConfig& config, uint64_t seed, const LoadOptions& options,
                              bool nonzero_head = true);

    MarSampleResult generate(const MarSampleOptions& options, MarSamplingHooks* hooks = nullptr,
                             ProbeSink* probe = nullptr);
    MarSampler& sampler() { return *sampler_; }
    const MarConfig& config() const { return sampler_->transformer()->config(); }
    at::Device device() const;
    const std::string& weights_source() const { return source_; }  // e.g. "model_ema"
    std::string describe() const;

private:
    MarPipeline(std::shared_ptr<MarSampler> s, std::string source)
        : sampler_(std::move(s)), source_(std::move(source)) {}
    std::shared_ptr<MarSampler> sampler_;
    std::string source_;
};

}  // namespace varscope
