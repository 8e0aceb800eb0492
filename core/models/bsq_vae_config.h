// Hyper-parameters of Infinity's BSQ multi-scale VAE (infinity/models/bsq_vae, the flux-VQGAN
// AutoEncoder with a MultiScaleBSQ quantizer), and how to recover them from a checkpoint.
//
// The released files and the official loader (tools/run_infinity.py load_visual_tokenizer):
//   infinity_vae_d32reg.pth (Infinity-2B): codebook_dim 32, patch 16, ch_mult 1 2 4 4 4
//   infinity_vae_d56_f8_14_patchify.pth (Infinity-8B): codebook_dim 14 (!), patch 8,
//       ch_mult 1 2 4 4; "d56" is the transformer's 4 * 14 bits per token (spatial patchify)
// both with base_ch 128, 2 res blocks, no attention (cnn_attention 'no'), no projection around
// the quantizer (dim == codebook_dim), new_quant, schedule_mode 'dynamic'.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/io/state_dict.h"
#include "core/models/bsq_quant.h"

namespace varscope {

struct BsqVaeConfig {
    int64_t codebook_dim = 32;  // z channels = bits per latent position
    int64_t base_ch = 128;
    std::vector<int64_t> encoder_ch_mult{1, 2, 4, 4, 4};
    std::vector<int64_t> decoder_ch_mult{1, 2, 4, 4, 4};
    int64_t num_res_blocks = 2;  // encoder levels; decoder levels hold one more
    int64_t patch_size = 16;     // spatial reduction, a power of two

    // Official: the encoder downsamples at levels i < log2(patch), the decoder upsamples at
    // levels 1 <= i <= log2(patch); both must give patch_size.
    int64_t log2_patch() const;
    bool encoder_downsamples_at(int64_t level) const { return level < log2_patch(); }
    bool decoder_upsamples_at(int64_t level) const { return level >= 1 && level <= log2_patch(); }
    bsq::BsqQuantConfig quant_config() const;  // spatial_patchify is the transformer's to set

    void validate() const;  // std::invalid_argument naming the bad field
    // "d32 (Infinity-2B infinity_vae_d32reg layout: ...)" and the like.
    std::string describe() const;

    // {"codebook_dim", "base_ch", "encoder_ch_mult", "decoder_ch_mult", "num_res_blocks",
    // "patch_size"}: training configs and the "varscope.config" metadata of trained files.
    nlohmann::json to_json() const;
    // Missing keys keep the d32reg defaults; unknown keys, wrong types and invalid values throw
    // std::invalid_argument naming the key (validate() runs last).
    static BsqVaeConfig from_json(const nlohmann::json& j);

    static BsqVaeConfig d32reg();              // Infinity-2B's VAE
    static BsqVaeConfig d56_f8_14_patchify();  // Infinity-8B's VAE (codebook_dim 14)

    // Architecture from tensor names and shapes (either naming, see bsq_vae.h). Throws
    // CheckpointError naming `what` and a needed tensor that is absent or inconsistent.
    static BsqVaeConfig infer_from(const StateDict& dict, const std::string& what = "checkpoint");

    bool operator==(const BsqVaeConfig& o) const;
    bool operator!=(const BsqVaeConfig& o) const { return !(*this == o); }
};

// GroupNorm groups of the official Normalize: 32 if C % 32 == 0, else 24 if C % 24 == 0, else
// the official code raises (std::invalid_argument here).
int64_t bsq_norm_groups(int64_t channels);

// The flux-style name of an official module's tensor: the official Conv / Normalize wrappers put
// the torch layer under ".conv" / ".norm" ("encoder.conv_in.conv.weight"); checkpoints may omit
// that level ("encoder.conv_in.weight") and the official load_cnn maps it back. Returns the
// name unchanged when it has no wrapper level.
std::string bsq_flux_name(const std::string& official_name);

// The tensor under the official name, or under its flux-style name; nullptr when neither.
const at::Tensor* bsq_find(const StateDict& dict, const std::string& official_name);

}  // namespace varscope
