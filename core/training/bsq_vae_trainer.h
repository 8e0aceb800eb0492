// `varscope-cli train bsq-vae`: trains Infinity's BSQ multi-scale VAE (core/models/bsq_vae.h,
// official tensor names, so the export loads with load_bsq_vae) on a packed image data set,
// with multi-scale residual quantization on an Infinity-style square schedule.
//
// loss = l1_weight * |x - x'| + mse_weight * (x - x')^2      (means over pixels, x in [-1, 1])
//      + mean over scales of the BSQ aux loss (bsq_losses.h: commitment + entropy penalty)
// x' = decoder(f_hat) unclamped, f_hat the straight-through sum of all scales. No perceptual or
// adversarial term: LPIPS needs VGG weights that cannot be downloaded here.
//
// Held-out images: image i of the pack is held out when i % holdout_every == 0 (the pack's
// order is pack-emoji's, fixed), never trained on; the report's psnr_db is measured on them.
#pragma once

#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/models/bsq_vae.h"
#include "core/training/bsq_losses.h"
#include "core/training/train_common.h"

namespace varscope {

struct BsqVaeLoss {
    double l1_weight = 1.0;
    double mse_weight = 1.0;
    BsqLossConfig quantizer;
    nlohmann::json to_json() const;                        // one flat object
    static BsqVaeLoss from_json(const nlohmann::json& j);  // std::invalid_argument naming the key
};

// The emoji model: 64 px -> 16x16 latent (patch 4, three levels like emoji-vqvae's ch_mult
// (1, 2, 2)), 16 bits per position.
BsqVaeConfig emoji_bsq_vae_config();

struct BsqVaeTrainJob {
    BsqVaeConfig model = emoji_bsq_vae_config();
    TrainConfig train;
    BsqVaeLoss loss;
    // Side of each square scale (t = 1), coarse to fine; the last is the latent side.
    std::vector<int64_t> scales{1, 2, 3, 4, 6, 8, 10, 13, 16};
    int64_t holdout_every = 10;  // 0 = no held-out images (psnr_db is then on training images)
    std::string data_path;       // packed images (pack-emoji)
    std::string run_dir;
    // Stop at this step as an interrupted run would (checkpoint, export, report); 0 = run to
    // train.steps. A later call with the same run folder resumes.
    int64_t stop_at_step = 0;
};

// (t, s, s) per scale; std::invalid_argument naming "scales" unless strictly increasing,
// >= 1 and ending at latent_side.
std::vector<bsq::Size3> bsq_square_schedule(const std::vector<int64_t>& scales,
                                            int64_t latent_side);

// (training images, held-out images): image i is held out when i % every == 0 (every 0: none).
std::pair<ImageDataset, ImageDataset> split_holdout(const ImageDataset& data, int64_t every);

// Returns a JSON report (held-out and training metrics, timing) and writes
// <run_dir>/final.safetensors (fp32) and <run_dir>/export-fp16.safetensors (what ships), both
// with "varscope.config" (the model) and "varscope.bsq_scales" (the schedule) metadata.
nlohmann::json train_bsq_vae(const BsqVaeTrainJob& job, std::ostream& out);

// Over a data set: reconstruction PSNR (dB, images in [0, 1], decode of the full multi-scale
// f_hat, clamped as inference decodes), and how the bits are used over all scales' tokens: the
// fraction of ones per bit (min, max), the sum over bits of their binary entropy (bits; at most
// codebook_dim), the number of distinct codes and the entropy of the code distribution (bits).
nlohmann::json evaluate_bsq_vae(BsqVae& vae, const ImageDataset& data,
                                const std::vector<bsq::Size3>& schedule, int64_t batch = 256);

}  // namespace varscope
