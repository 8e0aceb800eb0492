// `varscope-cli train klvae`: trains the KL VAE that tokenizes images for MAR, with the same
// module that runs inference (official tensor names), on a packed image data set.
#pragma once

#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>

#include "core/models/kl_vae.h"
#include "core/training/train_common.h"

namespace varscope {

// loss = l1_weight * |x - x'| + mse_weight * (x - x')^2   (means over pixels)
//      + kl_weight * KL(q(z|x) || N(0, I)) / (3 H W)      (per-image KL sum, batch mean)
// The KL term is divided by the pixel-value count so that kl_weight means what it means in
// LDM, where both the reconstruction and the KL terms are per-image sums (LDM uses 1e-6).
struct KlVaeLoss {
    double l1_weight = 1.0;
    double mse_weight = 1.0;
    double kl_weight = 1e-6;
    nlohmann::json to_json() const;
    static KlVaeLoss from_json(const nlohmann::json& j);  // std::invalid_argument naming the key
};

struct KlVaeTrainJob {
    KlVaeConfig model = KlVaeConfig::emoji();
    TrainConfig train;
    KlVaeLoss loss;
    std::string data_path;  // packed images (pack-emoji)
    std::string run_dir;
    // Measure the posterior samples' std on the data after training and ship
    // scale_factor = 1 / std (MAR's 0.2325 plays this role for kl16); false keeps model's.
    bool auto_scale_factor = true;
};

// Returns a JSON report (final metrics, latent statistics, timing) and writes
// <run_dir>/final.safetensors (fp32) and <run_dir>/export-fp16.safetensors (what ships); both
// carry the model config, with the chosen scale factor, as "varscope.config" metadata.
nlohmann::json train_kl_vae(const KlVaeTrainJob& job, std::ostream& out);

// Reconstruction PSNR (dB, images in [0, 1]) from the posterior mean and from a posterior
// sample, and the statistics of the latents over the data set: mean/std of samples (what MAR
// sees before scaling), std of the means, mean posterior std, KL per image.
nlohmann::json evaluate_kl_vae(KlVae& vae, const ImageDataset& data, int64_t batch = 256,
                               uint64_t seed = 0);

}  // namespace varscope
