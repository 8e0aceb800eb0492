// `varscope-cli train mar`: trains a MAR transformer + DiffLoss head (LTH14/mar's recipe) on the
// latents of a frozen KL VAE, with the same modules that run inference (official tensor names).
//
// One step: posterior sample of the cached VAE moments x scale factor -> tokens (B, L, D); a
// random order per image and a mask ratio from a normal(1, 0.25) truncated to
// [mask_ratio_min, 1] mask ceil(L * ratio) tokens (the same count for the batch); labels
// dropped to the unconditional embedding with label_drop_prob; encoder over buffer + known
// tokens, decoder over all positions; every token's condition vector repeated
// diffusion_batch_mul times with its own timestep and noise; the diffusion loss (eps MSE +
// variational bound of the learned variance) averaged over masked tokens only.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>

#include "core/models/mar.h"
#include "core/sampling/diffusion_losses.h"
#include "core/training/train_common.h"

namespace varscope {

// The recipe's knobs besides TrainConfig (official defaults, except the EMA rate: 0.9999 is
// an average over ~10k steps, longer than a short run; 0 = no EMA, export the raw weights).
struct MarRecipe {
    double mask_ratio_min = 0.7;
    double label_drop_prob = 0.1;
    int64_t diffusion_batch_mul = 4;
    double grad_clip = 3.0;  // max global gradient norm, 0 = off
    double ema_rate = 0.999;
    bool latent_sample = true;  // posterior sample per step (official); false = posterior mean
    nlohmann::json to_json() const;
    // Missing keys keep defaults; wrong types, ranges or unknown keys throw
    // std::invalid_argument naming the key.
    static MarRecipe from_json(const nlohmann::json& j);
};

struct MarTrainJob {
    MarConfig model;
    TrainConfig train;
    MarRecipe recipe;
    std::string data_path;  // packed images (pack-emoji)
    std::string vae_path;   // the KL VAE (its file carries the scale factor)
    std::string run_dir;
    std::string init_path;  // optional: start from these MAR weights
    // Sampling settings the export recommends ("varscope.mar_sampling" metadata); null = none.
    nlohmann::json recommended_sampling;
};

// A draw of the truncated normal(1, 0.25) on [min_ratio, 1] (rejection sampling).
double sample_mask_ratio(double min_ratio, at::Generator& gen);

struct MarMasking {
    at::Tensor mask;   // (B, L) float, 1 = masked (predicted)
    at::Tensor known;  // (B, L - num_masked) int64, ascending positions of the known tokens
    int64_t num_masked = 0;
};
// Random generation orders (one per row); the first ceil(L * ratio) positions of each are
// masked. Draws from the device's default generator; never synchronises.
MarMasking random_masking(int64_t batch, int64_t seq_len, double ratio, const at::Device& device);

struct MarLoss {
    at::Tensor loss, mse, vb;  // scalars: masked means over the repeated rows
};
// The training loss of one batch. tokens (B, L, D); labels (B), -1 = unconditional.
MarLoss mar_training_loss(const MarTransformerImpl& mar, const DiffusionTrainingLoss& diffusion,
                          const at::Tensor& tokens, const at::Tensor& labels,
                          const MarMasking& masking, int64_t diffusion_batch_mul);

// Scales the gradients of `m` to a global L2 norm of at most max_norm (as torch's
// clip_grad_norm_) and returns the norm before clipping (0-dim), without synchronising.
at::Tensor clip_gradients(torch::nn::Module& m, double max_norm);

// (B, L, C p^2) tokens from latents (B, C, h p, w p), the official patchify.
at::Tensor mar_patchify(const at::Tensor& latents, int64_t patch_size);

// Returns a JSON report and writes <run_dir>/final.safetensors ("model.*" and "model_ema.*",
// fp32, as an official checkpoint) and <run_dir>/export-fp16.safetensors (the EMA weights as
// a raw state dict: what ships; MarPipeline::load reads both).
nlohmann::json train_mar(const MarTrainJob& job, std::ostream& out);

}  // namespace varscope
