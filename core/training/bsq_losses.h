// The BSQ quantizer's training losses, per scale of the multi-scale residual quantization, as
// Infinity's tokenizer code computes them (BitVAE's BSQ.forward in training mode, which follows
// BSQ-ViT's BinarySphericalQuantizer):
//
//   commitment = mean (z - zhat)^2                 z = l2norm_d(x), zhat = +-1/sqrt(d)
//   entropy    = gamma0 * H_sample - gamma * H_codebook   (soft, temperature 1/inv_temperature)
//   aux        = commitment_weight * commitment + zeta * entropy / inv_temperature * entropy_weight
//
// Entropies are computed on sub-groups of group_size bits (the full 2^d codebook is out of
// reach): per group a softmax over its 2^group_size sub-codes with logits
// 2 * inv_temperature * <z_group, code>; H_sample is the entropy of that distribution summed
// over groups, averaged over positions (low: each position commits to a code); H_codebook is the
// entropy of the distribution averaged over positions, summed over groups (high: all codes in
// use). group_size 1 is Infinity's "analytical" form, p = sigmoid(-4 z / sqrt(d) * inv_temp)
// per bit, computed that way; BSQ-ViT's group form takes larger groups (e.g. 9 of 18 bits).
#pragma once

#include <ATen/core/Tensor.h>

#include <nlohmann/json.hpp>

#include "core/models/bsq_quant.h"

namespace varscope {

struct BsqLossConfig {
    double commitment_weight = 0.25;  // official BSQ commitment_loss_weight
    double entropy_weight = 0.1;      // official BSQ.forward entropy_weight
    double inv_temperature = 100.0;
    double gamma0 = 1.0;  // per-sample entropy weight
    double gamma = 1.0;   // codebook entropy weight
    double zeta = 1.0;    // weight of the whole entropy penalty
    int64_t group_size = 1;

    nlohmann::json to_json() const;
    // Missing keys keep defaults; unknown keys, wrong types and bad values throw
    // std::invalid_argument naming the key. Used inside the trainer's "loss" section, so
    // `extra_keys` lists the keys that section adds.
    static BsqLossConfig from_json(const nlohmann::json& j,
                                   std::initializer_list<const char*> extra_keys = {});
    // std::invalid_argument when group_size does not divide codebook_dim or exceeds 12.
    void check_against(int64_t codebook_dim) const;
};

struct BsqScaleLosses {
    at::Tensor commitment;          // scalar
    at::Tensor per_sample_entropy;  // scalar, nats summed over groups
    at::Tensor codebook_entropy;    // scalar, nats summed over groups
    at::Tensor aux;                 // the weighted sum above
};

// Losses of one BSQ step (bsq::bsq_quantize's output; gradients flow through q.normalized).
BsqScaleLosses bsq_scale_losses(const bsq::BsqQuantized& q, const BsqLossConfig& cfg);

}  // namespace varscope
