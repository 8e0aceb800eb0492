// The MAR sampling loop (LTH14/mar sample_tokens): random generation order per image, cosine
// mask schedule over num_iter steps, the encoder over the known tokens, the decoder over all
// positions, and per step the DiffLoss diffusion sampler for the positions decoded in that
// step, with classifier-free guidance (linear or constant schedule) and a temperature.
// Accelerators plug in through MarSamplingHooks (mar_hooks.h); ProbeSink receives records.
//
// Random draws (one generator, seeded): class labels if none are given, then one randperm of
// the token positions per image (the official code uses numpy's shuffle here; our parity tool
// feeds the official sampler the same permutations), then per step the diffusion noise in the
// official order.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/models/mar.h"
#include "core/sampling/gaussian_diffusion.h"
#include "core/sampling/mar_cuda_graph.h"
#include "core/sampling/mar_hooks.h"
#include "core/sampling/probes.h"
#include "core/sampling/var_sampler.h"  // AttentionBackend, SamplingCancelled, synchronize_device

namespace varscope {

enum class CfgSchedule { Linear, Constant };
CfgSchedule parse_cfg_schedule(const std::string& s);  // "linear" | "constant"
std::string cfg_schedule_name(CfgSchedule s);

struct MarSampleOptions {
    std::vector<int64_t> class_ids;  // one per image (-1 = unconditional); empty = random labels
    int64_t batch = 1;               // used when class_ids is empty
    int64_t images() const {         // how many images a run makes
        return class_ids.empty() ? batch : static_cast<int64_t>(class_ids.size());
    }
    std::optional<uint64_t> seed = 0;  // nullopt = non-deterministic
    int64_t num_iter = 64;
    double cfg = 1.0;  // 1 = no guidance (the transformer then runs B rows)
    CfgSchedule cfg_schedule = CfgSchedule::Linear;
    double temperature = 1.0;
    AttentionBackend attention = AttentionBackend::Sdpa;
    bool time_steps = true;  // synchronise the device at the end of each step to time it
    bool decode = true;      // run the latent decoder (VAE) if the sampler has one
    // On CUDA, replay each step from a CUDA graph (mar_cuda_graph.h); same tokens as eager.
    // Ignored on the CPU, with probes and with feature_layers.
    bool cuda_graphs = true;
    // On CUDA with a float16/bfloat16 head, run the DiffLoss head's reverse diffusion through
    // the fused kernels (HeadPath::Auto; tokens within bf16 rounding of the module path).
    // false = the LibTorch module path everywhere (HeadPath::Modules).
    bool fused_head = true;
    // Block outputs to record per step (AccelRecord method "mar", kind "block_features"), as
    // global layer indices (encoder layers first). Empty = none.
    std::vector<int64_t> feature_layers;
    const std::atomic<bool>* cancel = nullptr;  // checked before every step
    void validate(const MarConfig& cfg) const;  // std::invalid_argument naming the field
};

struct MarSampleResult {
    at::Tensor images;   // (B, 3, H, W) in [0, 1]; undefined without a decoder / decode=false
    at::Tensor labels;   // (B) int64
    at::Tensor orders;   // (B, seq_len) int64 generation order
    at::Tensor tokens;   // (B, seq_len, token_dim) sampled latents (patchified)
    at::Tensor latents;  // (B, vae_embed_dim, h, w): tokens unpatchified (the VAE's input / 0.2325)
    std::vector<at::Tensor> decoded;   // per step: (B, k) positions decoded, ascending
    std::vector<double> step_millis;   // per step (device-synchronised when time_steps)
    std::vector<double> cfg_per_step;  // guidance used at each step (1 without CFG)
    double decode_millis = 0.0;
    double total_millis = 0.0;
    double attention_flops = 0.0;          // attention FLOPs (QK^T and PV) actually computed
    bool cuda_graphs = false;              // the steps ran as CUDA graph replays
    double graph_capture_millis = 0;       // capture time of the sampler's graphs so far
    double graph_capture_millis_call = 0;  // of which in this call (part of total_millis)
    // Spent in the probe's per-step records (e.g. a GUI decoding a preview per step): part of
    // total_millis, not of step_millis; subtract it for the model's own time.
    double probe_millis = 0.0;
    // Kernel nodes of each of the sampler's captured graphs so far ("step_<i>" whole steps,
    // "diffusion_<rows>" reverse diffusions).
    std::map<std::string, size_t> graph_kernel_nodes;
};

// Host-side schedule of one run: tokens masked before/after each step, and the guidance.
struct MarStepPlan {
    int64_t masked_before = 0, masked_after = 0;
    int64_t mask_len = 0;  // the official mask_len (>= 1; also after the last step)
    double cfg = 1.0;      // the step's guidance (float32-rounded like the original)
    int64_t decoded() const { return masked_before - masked_after; }
};
std::vector<MarStepPlan> mar_step_plan(int64_t seq_len, int64_t num_iter, double cfg,
                                       CfgSchedule schedule);

// Turns sampled latents (B, vae_embed_dim, h, w) (already divided by the latent scale) into
// images in [-1, 1]; provided by the pipeline (KL-16 VAE).
using LatentDecoder = std::function<at::Tensor(const at::Tensor& latents)>;

class MarSampler {
  public:
    explicit MarSampler(MarTransformer mar, LatentDecoder decoder = {},
                        double latent_scale = 0.2325);
    MarSampleResult sample(const MarSampleOptions& options, MarSamplingHooks* hooks = nullptr,
                           ProbeSink* probe = nullptr);

    MarTransformer transformer() const { return mar_; }
    const DiffusionSampler& diffusion() const { return diffusion_; }
    // How sampling executes (LoadOptions::exec; the DiffusionSampler holds it). Drops captured
    // graphs when it changes.
    void set_exec_policy(const ExecPolicy& exec);
    const ExecPolicy& exec_policy() const { return diffusion_.exec_policy(); }
    bool has_decoder() const { return static_cast<bool>(decoder_); }
    // Frees the captured graphs (they hold their own buffers); the next sample captures again.
    void clear_cuda_graphs() { graphs_.reset(); }
    void set_decoder(LatentDecoder decoder) { decoder_ = std::move(decoder); }

  private:
    MarTransformer mar_;
    DiffusionSampler diffusion_;
    LatentDecoder decoder_;
    double latent_scale_;
    std::shared_ptr<MarGraphs> graphs_;  // for the last shape sampled with CUDA graphs
};

// (B, C, h*p, w*p) from patchified tokens (B, h*w, C*p*p), as the official unpatchify.
at::Tensor mar_unpatchify(const at::Tensor& tokens, const MarConfig& cfg);

}  // namespace varscope
