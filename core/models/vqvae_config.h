// Hyper-parameters of VAR's multi-scale VQVAE, and how to recover them from a checkpoint.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <vector>

#include "core/io/state_dict.h"

namespace varscope {

struct VqvaeConfig {
    int64_t vocab_size = 4096;
    int64_t z_channels = 32;  // Cvae: channels of f, f_hat and of each codebook entry
    int64_t ch = 160;
    std::vector<int64_t> ch_mult{1, 1, 2, 2, 4};
    int64_t num_res_blocks = 2;
    bool using_sa = true;      // attention blocks at the lowest resolution of encoder/decoder
    bool using_mid_sa = true;  // attention block in the middle of encoder/decoder
    // Phi(h) = (1 - |quant_resi|) h + |quant_resi| conv3x3(h); |quant_resi| <= 1e-6 makes every
    // Phi the identity (and the checkpoint then holds no quant_resi tensors).
    double quant_resi = 0.5;
    // 0: one Phi per scale, 1: one Phi for all scales, K > 1: K Phis picked by scale position.
    int64_t share_quant_resi = 4;
    // Number of Phis when share_quant_resi == 0; 0 means one per entry of patch_nums.
    int64_t qresi_counts = 0;
    std::vector<int64_t> patch_nums{1, 2, 3, 4, 5, 6, 8, 10, 13, 16};
    int64_t quant_conv_ks = 3;
    double beta = 0.25;  // commitment-loss weight, only used by training

    // Spatial reduction of the encoder: 2^(levels - 1), 16 for the official model.
    int64_t downsample() const;
    // How many Phi convolutions the quantizer holds (0 when Phi is the identity).
    int64_t phi_count() const;
    // Throws std::invalid_argument naming the first inconsistent field.
    void validate() const;

    // Reads every architectural field from tensor names and shapes. quant_resi cannot be seen in
    // the weights: it stays 0.5 unless the checkpoint has no Phi tensors, which means identity.
    // Throws CheckpointError naming a tensor that is needed but absent.
    static VqvaeConfig infer_from(const StateDict& dict, std::vector<int64_t> patch_nums);

    nlohmann::json to_json() const;
    // Missing keys keep their defaults, so a partial object describes a variant of the default.
    static VqvaeConfig from_json(const nlohmann::json& j);  // unknown keys and types named

    bool operator==(const VqvaeConfig& o) const;
    bool operator!=(const VqvaeConfig& o) const { return !(*this == o); }

  private:
    static VqvaeConfig from_json_fields(const nlohmann::json& j);
};

}  // namespace varscope
