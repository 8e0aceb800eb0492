// Training losses of MAR's DiffLoss (the IDDPM / DiT Gaussian diffusion it adopts): a token
// latent x0 is noised to x_t = sqrt(abar_t) x0 + sqrt(1 - abar_t) eps at a uniformly drawn
// timestep of the 1000-step cosine process; the MLP predicts eps and the interpolation v of
// the log variance between the posterior's clipped log variance and log beta_t ("learned
// range"). The loss per row is
//   mse = mean_C (eps - eps_pred)^2
//   vb  = KL(q(x_{t-1} | x_t, x0) || p(x_{t-1} | x_t)) / log 2      for t > 0
//       = -log p(x0 | x_1) / log 2 (discretised Gaussian, 255 bins)  for t = 0
// with the mean of p built from a stopped-gradient eps_pred, so vb trains only the variance.
#pragma once

#include <ATen/core/Tensor.h>

#include "core/sampling/gaussian_diffusion.h"

namespace varscope {

// KL(N(mean1, exp(logvar1)) || N(mean2, exp(logvar2))), elementwise.
at::Tensor normal_kl(const at::Tensor& mean1, const at::Tensor& logvar1, const at::Tensor& mean2,
                     const at::Tensor& logvar2);
// The tanh approximation of the standard normal CDF that the original uses.
at::Tensor approx_standard_normal_cdf(const at::Tensor& x);
// log-likelihood of x (data in [-1, 1], 255 bins of width 2/255, open-ended edge bins) under
// N(means, exp(log_scales)^2), elementwise.
at::Tensor discretized_gaussian_log_likelihood(const at::Tensor& x, const at::Tensor& means,
                                               const at::Tensor& log_scales);

struct DiffusionLossTerms {
    at::Tensor mse, vb, loss;  // each (N): loss = mse + vb
};

// The coefficient tables of one process, as float32 tensors on a device (the original rounds
// each float64 coefficient to float32 where it meets a tensor).
class DiffusionTrainingLoss {
  public:
    // The official training process: 1000 steps, cosine schedule.
    explicit DiffusionTrainingLoss(const at::Device& device, int64_t num_steps = 1000);
    DiffusionTrainingLoss(const DiffusionSchedule& schedule, const at::Device& device);
    int64_t num_steps() const { return num_steps_; }

    // x_start (N, C), t (N) int64 on the device, noise like x_start.
    at::Tensor q_sample(const at::Tensor& x_start, const at::Tensor& t,
                        const at::Tensor& noise) const;
    // From the network's output (N, 2C) at x_t: [eps_pred, v].
    DiffusionLossTerms terms(const at::Tensor& x_start, const at::Tensor& x_t, const at::Tensor& t,
                             const at::Tensor& noise, const at::Tensor& model_output) const;
    // The whole step: q_sample, the network on (x_t, t, c), terms.
    DiffusionLossTerms operator()(const SimpleMlpAdaLNImpl& net, const at::Tensor& x_start,
                                  const at::Tensor& t, const at::Tensor& c,
                                  const at::Tensor& noise) const;

  private:
    at::Tensor at_t(const at::Tensor& table, const at::Tensor& t) const;  // (N, 1)
    int64_t num_steps_;
    at::Tensor sqrt_abar_, sqrt_one_minus_abar_, sqrt_recip_abar_, sqrt_recipm1_abar_;
    at::Tensor post_coef1_, post_coef2_, post_log_var_clipped_, log_betas_;
};

}  // namespace varscope
