#include "core/training/bsq_losses.h"

#include <ATen/ATen.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "core/io/json_fields.h"

namespace varscope {
namespace {

// -(p * log(p + 1e-8)) summed over the last dimension (official get_entropy, normalize=False).
at::Tensor entropy(const at::Tensor& p) {
    return p.mul(p.add(1e-8).log()).sum(-1).neg();
}

// (2^g, g) sub-codes of g bits, +-1/sqrt(d); row k has bit j set when k's bit (g-1-j) is.
at::Tensor group_codebook(int64_t g, int64_t d, const at::TensorOptions& options) {
    const at::Tensor k = at::arange(int64_t{1} << g, options.dtype(at::kLong)).unsqueeze(1);
    const at::Tensor shift = at::arange(g - 1, -1, -1, options.dtype(at::kLong));
    const at::Tensor bits = k.bitwise_right_shift(shift).bitwise_and(1).to(options.dtype());
    return bits.mul(2).sub(1).div(std::sqrt(static_cast<double>(d)));
}

}  // namespace

nlohmann::json BsqLossConfig::to_json() const {
    return {{"commitment_weight", commitment_weight},
            {"entropy_weight", entropy_weight},
            {"inv_temperature", inv_temperature},
            {"gamma0", gamma0},
            {"gamma", gamma},
            {"zeta", zeta},
            {"group_size", group_size}};
}

BsqLossConfig BsqLossConfig::from_json(const nlohmann::json& j,
                                       std::initializer_list<const char*> extra_keys) {
    if (!j.is_object()) throw std::invalid_argument("loss config: expected a JSON object");
    BsqLossConfig c;
    require_known_fields(j, c.to_json(), "loss config", extra_keys);
    for (auto [key, value] :
         {std::pair{"commitment_weight", &c.commitment_weight},
          std::pair{"entropy_weight", &c.entropy_weight},
          std::pair{"inv_temperature", &c.inv_temperature}, std::pair{"gamma0", &c.gamma0},
          std::pair{"gamma", &c.gamma}, std::pair{"zeta", &c.zeta}}) {
        if (!j.contains(key)) continue;
        if (!j.at(key).is_number())
            throw std::invalid_argument(std::string("loss config: '") + key + "' must be a number");
        *value = j.at(key).get<double>();
        if (!(*value >= 0) || !std::isfinite(*value))
            throw std::invalid_argument(std::string("loss config: '") + key + "' must be >= 0");
    }
    if (!(c.inv_temperature > 0))
        throw std::invalid_argument("loss config: 'inv_temperature' must be > 0");
    if (j.contains("group_size")) {
        if (!j.at("group_size").is_number_integer() || j.at("group_size").get<int64_t>() < 1)
            throw std::invalid_argument("loss config: 'group_size' must be a whole number >= 1");
        c.group_size = j.at("group_size").get<int64_t>();
    }
    return c;
}

void BsqLossConfig::check_against(int64_t codebook_dim) const {
    if (group_size < 1 || group_size > 12 || codebook_dim % group_size != 0)
        throw std::invalid_argument("loss config: 'group_size' " + std::to_string(group_size) +
                                    " must divide codebook_dim " + std::to_string(codebook_dim) +
                                    " and be at most 12 (2^group_size sub-codes per group)");
}

BsqScaleLosses bsq_scale_losses(const bsq::BsqQuantized& q, const BsqLossConfig& cfg) {
    const at::Tensor& z = q.normalized;  // (B,t,h,w,d), differentiable
    const int64_t d = z.size(-1);
    cfg.check_against(d);
    const at::Tensor zhat = q.quantized.detach().permute({0, 2, 3, 4, 1});
    BsqScaleLosses out;
    out.commitment = (z - zhat).pow(2).mean();

    const at::Tensor flat = z.reshape({-1, d});
    at::Tensor prob;  // (N, groups, sub-codes)
    if (cfg.group_size == 1) {
        const at::Tensor p = at::sigmoid(
            flat.mul(-4).div(std::sqrt(static_cast<double>(d))).mul(cfg.inv_temperature));
        prob = at::stack({p, 1 - p}, -1);
    } else {
        const int64_t g = cfg.group_size;
        const at::Tensor codes = group_codebook(g, d, flat.options());
        const at::Tensor logits = at::matmul(flat.reshape({flat.size(0), d / g, g}), codes.t())
                                      .mul(2 * cfg.inv_temperature);
        prob = logits.softmax(-1);
    }
    out.per_sample_entropy = entropy(prob).sum(-1).mean();
    out.codebook_entropy = entropy(prob.mean(0)).sum();
    const at::Tensor penalty =
        out.per_sample_entropy.mul(cfg.gamma0) - out.codebook_entropy.mul(cfg.gamma);
    out.aux = out.commitment.mul(cfg.commitment_weight) +
              penalty.mul(cfg.zeta / cfg.inv_temperature * cfg.entropy_weight);
    return out;
}

}  // namespace varscope
