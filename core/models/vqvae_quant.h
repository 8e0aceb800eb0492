// VAR's multi-scale residual quantizer (official VectorQuantizer2) and its Phi refiners.
//
// Scale si of SN quantizes the residual at patch_nums[si]^2 tokens; each token map is looked up
// in one shared codebook, upsampled to the full latent size, refined by a Phi and accumulated
// into f_hat. Nothing here disables autograd: inference callers add their own guards.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/embedding.h>

#include <utility>
#include <vector>

#include "core/models/vqvae_config.h"

namespace varscope {

// Which of K Phis the official code uses at scale si of SN: the tick nearest to si / (SN - 1),
// ticks = numpy.linspace(1/(3K), 1-1/(3K), K) for K == 4, else linspace(1/(2K), 1-1/(2K), K),
// first index on ties. The ticks are rebuilt with numpy's exact arithmetic because some scales
// sit on mathematical ties (K=4, SN=10: si=2 and si=7) that rounding decides.
// SN == 1 is treated as position 0 (the official code would divide by zero).
int64_t phi_tick_index(int64_t K, int64_t si, int64_t SN);

namespace vqvae {

// The official `quantize.quant_resi` in any of its three layouts; the registered names follow
// the layout: "<i>.weight" (non-shared), "qresi.weight" (shared), "qresi_ls.<i>.weight"
// (partially shared). With |quant_resi| <= 1e-6 it holds nothing and Phi is the identity.
class PhiSetImpl : public torch::nn::Module {
  public:
    explicit PhiSetImpl(const VqvaeConfig& cfg);
    int64_t index_for(int64_t si, int64_t SN) const;
    // Phi_{index_for(si, SN)}(h) = (1 - r) h + r conv3x3(h).
    at::Tensor forward(const at::Tensor& h, int64_t si, int64_t SN);
    int64_t slots() const { return slots_; }
    bool identity() const { return convs_.empty(); }

  private:
    double ratio_;
    int64_t slots_;
    bool shared_;
    std::vector<torch::nn::Conv2d> convs_;
};
TORCH_MODULE(PhiSet);

struct QuantizerTrainOutput {
    at::Tensor f_hat;            // straight-through: forward value f_hat, gradient of f
    at::Tensor vq_loss;          // scalar, mean over scales of beta*commitment + codebook loss
    std::vector<double> usages;  // per scale, % of codebook entries whose EMA hit count >= margin
};

class VectorQuantizerImpl : public torch::nn::Module {
  public:
    explicit VectorQuantizerImpl(const VqvaeConfig& cfg);

    // Token indices per scale, each [B, pn*pn] int64. f must be [B, Cvae, pn_last, pn_last].
    std::vector<at::Tensor> f_to_idx(const at::Tensor& f);
    // The accumulated f_hat after each scale (copies), each [B, Cvae, H, W].
    std::vector<at::Tensor> f_to_fhats(const at::Tensor& f);
    // Sum over the given scales (a prefix of patch_nums) of Phi(bicubic-up(embedding(idx))).
    at::Tensor idx_to_fhat(const std::vector<at::Tensor>& idx);
    // Teacher-forcing input of VAR: [B, L - patch_nums[0]^2, Cvae], the running f_hat after
    // scale si area-downsampled to scale si + 1, for si < SN - 1. Needs the first SN - 1 scales.
    at::Tensor idx_to_var_input(const std::vector<at::Tensor>& idx);
    // One sampling step: adds Phi(upsampled h_BChw) to f_hat in place and returns {f_hat, f_hat
    // area-downsampled to scale si + 1}; at si == SN - 1, h is added as is and f_hat is returned
    // twice. h_BChw is [B, Cvae, pn_si, pn_si].
    std::pair<at::Tensor, at::Tensor> next_autoregressive_input(int64_t si, int64_t SN,
                                                                at::Tensor& f_hat,
                                                                const at::Tensor& h_BChw);
    int64_t phi_for_scale(int64_t si, int64_t SN) const { return quant_resi_->index_for(si, SN); }
    at::Tensor apply_phi(const at::Tensor& h, int64_t si, int64_t SN) {
        return quant_resi_(h, si, SN);
    }
    // Codebook rows of idx_Bl ([B, pn*pn]) as a [B, Cvae, pn, pn] view (channels-last strides,
    // exactly like the official transpose + view).
    at::Tensor lookup(const at::Tensor& idx_Bl, int64_t pn);
    // The official VectorQuantizer2.forward: also updates ema_vocab_hit_SV when is_training().
    QuantizerTrainOutput forward_train(const at::Tensor& f, bool with_usages = true);

    const at::Tensor& codebook() const { return embedding_->weight; }
    const std::vector<int64_t>& patch_nums() const { return patch_nums_; }

  private:
    std::vector<at::Tensor> quantize_scales(const at::Tensor& f, bool want_fhat);
    void check_latent(const at::Tensor& f) const;
    at::Tensor nearest(const at::Tensor& z_NC) const;  // argmin of squared L2 distance
    at::Tensor residual_at(const at::Tensor& f_rest, int64_t si) const;  // [N, C] rows

    int64_t vocab_size_, cvae_;
    double beta_;
    std::vector<int64_t> patch_nums_;
    int64_t record_hit_ = 0;
    PhiSet quant_resi_{nullptr};
    torch::nn::Embedding embedding_{nullptr};
    at::Tensor ema_vocab_hit_SV_;
};
TORCH_MODULE(VectorQuantizer);

}  // namespace vqvae
}  // namespace varscope
