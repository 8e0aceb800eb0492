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
    // As load(), with every tensor of files.mar_path already read (core/runner reads a
    // checkpoint once to detect its family).
    static MarPipeline from_checkpoint(const StateDict& all, const MarModelFiles& files,
                                       const LoadOptions& options);
    // Official-init random weights (nonzero_head: a DiffLoss head that is not all zeros, so
    // random models sample something else than pure noise), for tests and benchmarks.
    static MarPipeline random(const MarConfig& config, uint64_t seed, const LoadOptions& options,
                              bool nonzero_head = true);

    MarSampleResult generate(const MarSampleOptions& options, MarSamplingHooks* hooks = nullptr,
                             ProbeSink* probe = nullptr);
    // Token latents (B, vae_embed_dim, h, w) as MarSampleResult::latents (or a partially
    // decoded step's) -> images (B, 3, H, W) in [0, 1] through the attached VAE. Throws
    // std::logic_error when the pipeline has no VAE.
    at::Tensor decode_latents(const at::Tensor& latents) const;
    bool has_vae() const { return static_cast<bool>(decoder_); }
    MarSampler& sampler() { return *sampler_; }
    const MarConfig& config() const { return sampler_->transformer()->config(); }
    at::Device device() const;
    const std::string& weights_source() const { return source_; }  // e.g. "model_ema"
    std::string describe() const;

  private:
    MarPipeline(std::shared_ptr<MarSampler> s, std::string source, LatentDecoder decoder = {},
                double latent_scale = 1.0)
        : sampler_(std::move(s)),
          source_(std::move(source)),
          decoder_(std::move(decoder)),
          latent_scale_(latent_scale) {}
    std::shared_ptr<MarSampler> sampler_;
    std::string source_;
    LatentDecoder decoder_;  // the sampler's VAE decoder, for previews of partial latents
    double latent_scale_;
};

}  // namespace varscope
