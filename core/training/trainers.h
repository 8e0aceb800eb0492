// `varscope-cli train vqvae|var`: training the embedded models with the same modules that run
// inference, so the weights carry the official tensor names.
#pragma once

#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>

#include "core/models/var.h"
#include "core/models/vqvae.h"
#include "core/training/train_common.h"

namespace varscope {

struct VqvaeTrainJob {
    VqvaeConfig model;
    TrainConfig train;
    std::string data_path;  // packed images (pack-emoji)
    std::string run_dir;
    int64_t restart_every = 250;  // re-seed unused codebook entries this often (0 = never)
};

struct VarTrainJob {
    VarConfig model;
    TrainConfig train;
    std::string data_path;
    std::string vae_path;  // trained VQVAE weights
    std::string run_dir;
    std::string init_path;   // optional: start from these weights (e.g. a shipped fp16 export)
    double cond_drop = 0.1;  // class dropout, so classifier-free guidance works
    // JSON for the export's "varscope.sampling" metadata (see sampling_recommendation.h); "" =
    // none.
    std::string recommended_sampling;
    // Exponential moving average of the weights (0 = off); when on, the export holds the EMA.
    double ema_rate = 0;
    bool bf16_autocast = false;  // forward pass under bf16 autocast (CUDA only; fp32 weights)
    bool export_int8 = false;    // ship large 2-D weights as int8 + per-row scales (quant_int8.h)
    // --init with fewer blocks than the model: interleave them (grow_var_from) instead of failing.
    bool grow_depth = false;
    // With max_seconds: time steps 20..80 and resize train.steps (the cosine schedule) to fit.
    bool fit_steps_to_time = false;
};

// Both return a JSON report (final metrics, timing) and write <run_dir>/final.safetensors (fp32)
// and <run_dir>/export-fp16.safetensors (what ships).
nlohmann::json train_vqvae(const VqvaeTrainJob& job, std::ostream& out);
nlohmann::json train_var(const VarTrainJob& job, std::ostream& out);

// Reconstruction PSNR (dB, images in [0, 1]) over the data set and the fraction of codebook
// entries used by any scale of any image.
nlohmann::json evaluate_vqvae(Vqvae& vae, const ImageDataset& data, int64_t batch = 256);

}  // namespace varscope
