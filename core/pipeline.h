// VARScope's narrow library API: load a VAR model pair (or build one with random weights) and
// generate. The CLI is its first user; the GUI uses the same calls.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "core/exec_policy.h"
#include "core/io/state_dict.h"
#include "core/models/var.h"
#include "core/models/vqvae.h"
#include "core/sampling/var_sampler.h"

namespace varscope {

enum class Precision { Fp32, Fp16, Bf16 };
Precision parse_precision(const std::string& s);  // "fp32" | "fp16" | "bf16"
// "cpu", "cuda", "cuda:N"; throws std::invalid_argument when CUDA is asked for but absent.
at::Device parse_device(const std::string& s);
bool cuda_available();

struct VarModelFiles {
    std::string var_path;             // VAR transformer checkpoint (.pth / .safetensors)
    std::string vae_path;             // multi-scale VQVAE checkpoint
    std::vector<int64_t> patch_nums;  // empty = infer from the checkpoint
};

struct LoadOptions {
    std::string device = "cpu";
    Precision precision = Precision::Fp32;  // transformer weights; the VQVAE stays fp32
    // With Bf16: compute what the official model computes under torch.autocast(bfloat16) from
    // fp32 weights (fp32 residual stream, bf16 matrix products and attention, the VQVAE's Phi
    // convolutions in bf16 too): VarTransformerImpl::use_autocast_bf16. Same tokens as the
    // official bf16 sampler where the two run the same kernels.
    bool autocast = false;
    // With Fp32 on CUDA: fp32 weights and stream, fp32 matrix products on TF32 tensor cores
    // (torch.backends.cuda.matmul.allow_tf32), as the official demo_sample sets `tf32 = True`.
    // Same cuBLAS calls as the official fp32 sampler under that setting. No-op on the CPU.
    bool tf32 = false;
    // How the pipeline's sampler (and its hooks and kernels) execute (core/exec_policy.h): the
    // defaults, or what the program read from the VARSCOPE_* variables (app/exec_env).
    ExecPolicy exec = {};
};
// precision "fp32", "fp16", "bf16", "bf16-autocast" (Bf16 with autocast) or "tf32" (Fp32 with
// TF32 matrix products).
LoadOptions load_options(const std::string& device, const std::string& precision);

class VarPipeline {
  public:
    static VarPipeline load(const VarModelFiles& files, const LoadOptions& options);
    // As load(), with the transformer's weights already read from files.var_path (the family
    // detection read them: core/runner reads a checkpoint once).
    static VarPipeline from_weights(StateDict var_weights, const VarModelFiles& files,
                                    const LoadOptions& options);
    // Official-init random weights, for benchmarks and tests (no checkpoint needed).
    static VarPipeline random(const VarConfig& var, const VqvaeConfig& vae, uint64_t seed,
                              const LoadOptions& options);

    VarSampleResult generate(const VarSampleOptions& options, SamplingHooks* hooks = nullptr,
                             ProbeSink* probe = nullptr);
    VarSampler& sampler() { return *sampler_; }
    const VarConfig& var_config() const { return sampler_->transformer()->config(); }
    const VqvaeConfig& vae_config() const { return sampler_->vqvae()->config(); }
    at::Device device() const;
    std::string describe() const;  // one line per model: architecture and size

  private:
    explicit VarPipeline(std::shared_ptr<VarSampler> s) : sampler_(std::move(s)) {}
    std::shared_ptr<VarSampler> sampler_;
};

// Parameters of a module (for reports).
int64_t count_parameters(const torch::nn::Module& m);

}  // namespace varscope
