#include "core/sampling/diffusion_losses.h"

#include <ATen/ATen.h>

#include <cmath>

#include "core/models/diffloss.h"

namespace varscope {
namespace {

// float64 coefficients -> float32 tensor on the device.
at::Tensor table(const std::vector<double>& v, const at::Device& device) {
    return at::tensor(v, at::TensorOptions(at::kDouble)).to(device, at::kFloat);
}

std::vector<double> map(const std::vector<double>& v, double (*f)(double)) {
    std::vector<double> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = f(v[i]);
    return out;
}

}  // namespace

at::Tensor normal_kl(const at::Tensor& mean1, const at::Tensor& logvar1, const at::Tensor& mean2,
                     const at::Tensor& logvar2) {
    return 0.5 * (-1.0 + logvar2 - logvar1 + at::exp(logvar1 - logvar2) +
                  (mean1 - mean2).pow(2) * at::exp(-logvar2));
}

at::Tensor approx_standard_normal_cdf(const at::Tensor& x) {
    return 0.5 * (1.0 + at::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x.pow(3))));
}

at::Tensor discretized_gaussian_log_likelihood(const at::Tensor& x, const at::Tensor& means,
                                               const at::Tensor& log_scales) {
    const auto centered = x - means;
    const auto inv_stdv = at::exp(-log_scales);
    const auto cdf_plus = approx_standard_normal_cdf(inv_stdv * (centered + 1.0 / 255.0));
    const auto cdf_min = approx_standard_normal_cdf(inv_stdv * (centered - 1.0 / 255.0));
    const auto log_cdf_plus = at::log(cdf_plus.clamp_min(1e-12));
    const auto log_one_minus_cdf_min = at::log((1.0 - cdf_min).clamp_min(1e-12));
    const auto log_cdf_delta = at::log((cdf_plus - cdf_min).clamp_min(1e-12));
    return at::where(x.lt(-0.999), log_cdf_plus,
                     at::where(x.gt(0.999), log_one_minus_cdf_min, log_cdf_delta));
}

DiffusionTrainingLoss::DiffusionTrainingLoss(const at::Device& device, int64_t num_steps)
    : DiffusionTrainingLoss(DiffusionSchedule::respaced(std::to_string(num_steps), num_steps),
                            device) {}

DiffusionTrainingLoss::DiffusionTrainingLoss(const DiffusionSchedule& s, const at::Device& device)
    : num_steps_(s.num_steps()) {
    std::vector<double> one_minus(s.alphas_cumprod.size()), recip(one_minus.size()),
        recipm1(one_minus.size());
    for (size_t i = 0; i < one_minus.size(); ++i) {
        one_minus[i] = std::sqrt(1.0 - s.alphas_cumprod[i]);
        recip[i] = std::sqrt(1.0 / s.alphas_cumprod[i]);
        recipm1[i] = std::sqrt(1.0 / s.alphas_cumprod[i] - 1.0);
    }
    sqrt_abar_ = table(map(s.alphas_cumprod, [](double v) { return std::sqrt(v); }), device);
    sqrt_one_minus_abar_ = table(one_minus, device);
    sqrt_recip_abar_ = table(recip, device);
    sqrt_recipm1_abar_ = table(recipm1, device);
    post_coef1_ = table(s.posterior_mean_coef1, device);
    post_coef2_ = table(s.posterior_mean_coef2, device);
    post_log_var_clipped_ = table(s.posterior_log_variance_clipped, device);
    log_betas_ = table(s.log_betas, device);
}

at::Tensor DiffusionTrainingLoss::at_t(const at::Tensor& tab, const at::Tensor& t) const {
    return tab.index_select(0, t).unsqueeze(1);
}

at::Tensor DiffusionTrainingLoss::q_sample(const at::Tensor& x0, const at::Tensor& t,
                                           const at::Tensor& noise) const {
    return at_t(sqrt_abar_, t) * x0 + at_t(sqrt_one_minus_abar_, t) * noise;
}

DiffusionLossTerms DiffusionTrainingLoss::terms(const at::Tensor& x0, const at::Tensor& x_t,
                                                const at::Tensor& t, const at::Tensor& noise,
                                                const at::Tensor& out) const {
    const int64_t C = x0.size(1);
    const auto eps = out.narrow(1, 0, C);
    const auto v = out.narrow(1, C, C);
    // The variance term sees the mean with a stopped gradient (the original's frozen_out).
    const auto eps_frozen = eps.detach();
    const auto min_log = at_t(post_log_var_clipped_, t), max_log = at_t(log_betas_, t);
    const auto frac = (v + 1.0) / 2.0;
    const auto model_log_var = frac * max_log + (1.0 - frac) * min_log;
    const auto coef1 = at_t(post_coef1_, t), coef2 = at_t(post_coef2_, t);
    const auto pred_x0 = at_t(sqrt_recip_abar_, t) * x_t - at_t(sqrt_recipm1_abar_, t) * eps_frozen;
    const auto model_mean = coef1 * pred_x0 + coef2 * x_t;
    const auto true_mean = coef1 * x0 + coef2 * x_t;
    const auto kl =
        normal_kl(true_mean, min_log, model_mean, model_log_var).mean(1) / std::log(2.0);
    const auto nll =
        -discretized_gaussian_log_likelihood(x0, model_mean, 0.5 * model_log_var).mean(1) /
        std::log(2.0);
    DiffusionLossTerms r;
    r.vb = at::where(t.eq(0), nll, kl);
    r.mse = (noise - eps).pow(2).mean(1);
    r.loss = r.mse + r.vb;
    return r;
}

DiffusionLossTerms DiffusionTrainingLoss::operator()(const SimpleMlpAdaLNImpl& net,
                                                     const at::Tensor& x0, const at::Tensor& t,
                                                     const at::Tensor& c,
                                                     const at::Tensor& noise) const {
    const auto x_t = q_sample(x0, t, noise);
    return terms(x0, x_t, t, noise, net.forward(x_t, t, c));
}

}  // namespace varscope
