// VAR's multi-scale VQVAE (FoundationVision/VAR models/vqvae.py) in LibTorch. Its
// named_parameters() + named_buffers() are exactly the official state-dict names and shapes,
// so official checkpoints (e.g. vae_ch160v4096z32.pth) load unchanged.
//
//   img [B,3,H,W] in [-1,1] --encode--> f [B,Cvae,H/16,W/16] --f_to_idx--> token maps per scale
//   token maps --idx_to_fhat--> f_hat --decode--> img
//
// Nothing here disables autograd so that training can reuse it; inference callers add
// at::NoGradGuard / c10::InferenceMode themselves.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>

#include <string>
#include <utility>
#include <vector>

#include "core/io/state_dict.h"
#include "core/models/vqvae_blocks.h"
#include "core/models/vqvae_config.h"
#include "core/models/vqvae_quant.h"

namespace varscope {

struct VqvaeTrainOutput {
    at::Tensor reconstruction;   // decoder output, not clamped
    at::Tensor vq_loss;          // scalar
    std::vector<double> usages;  // per scale, % of the codebook in use (EMA, see quantizer)
};

class VqvaeImpl : public torch::nn::Module {
  public:
    explicit VqvaeImpl(VqvaeConfig cfg = {});

    const VqvaeConfig& config() const { return cfg_; }

    // Copies an official state dict in, reporting every missing/unexpected/mis-shaped tensor
    // at once (CheckpointError mentioning `what`). Like the official load_state_dict, an
    // ema_vocab_hit_SV recorded for a different number of scales is ignored, as is its absence.
    void load(const StateDict& dict, const std::string& what);
    using torch::nn::Module::load;  // keeps the archive overload visible

    at::Tensor encode(const at::Tensor& img);    // quant_conv(encoder(img))
    at::Tensor decode(const at::Tensor& f_hat);  // decoder(post_quant_conv(f_hat)) in [-1,1]
    at::Tensor fhat_to_img(const at::Tensor& f_hat) { return decode(f_hat); }
    std::vector<at::Tensor> img_to_idx(const at::Tensor& img) { return f_to_idx(encode(img)); }
    at::Tensor idx_to_img(const std::vector<at::Tensor>& idx) { return decode(idx_to_fhat(idx)); }

    // Quantizer entry points; see vqvae_quant.h for the exact semantics.
    std::vector<at::Tensor> f_to_idx(const at::Tensor& f) { return quantize_->f_to_idx(f); }
    std::vector<at::Tensor> f_to_fhats(const at::Tensor& f) { return quantize_->f_to_fhats(f); }
    at::Tensor idx_to_fhat(const std::vector<at::Tensor>& idx) {
        return quantize_->idx_to_fhat(idx);
    }
    at::Tensor idx_to_var_input(const std::vector<at::Tensor>& idx) {
        return quantize_->idx_to_var_input(idx);
    }
    std::pair<at::Tensor, at::Tensor> next_autoregressive_input(int64_t si, int64_t SN,
                                                                at::Tensor& f_hat,
                                                                const at::Tensor& h_BChw) {
        return quantize_->next_autoregressive_input(si, SN, f_hat, h_BChw);
    }
    int64_t phi_for_scale(int64_t si, int64_t SN) const { return quantize_->phi_for_scale(si, SN); }

    // The official VQVAE.forward used in VAE training: encoder -> quantizer (straight-through,
    // beta-weighted commitment loss) -> decoder.
    VqvaeTrainOutput forward_train(const at::Tensor& img, bool with_usages = true);

    vqvae::Encoder& encoder() { return encoder_; }
    vqvae::Decoder& decoder() { return decoder_; }
    vqvae::VectorQuantizer& quantizer() { return quantize_; }

  private:
    VqvaeConfig cfg_;
    vqvae::Encoder encoder_{nullptr};
    vqvae::Decoder decoder_{nullptr};
    vqvae::VectorQuantizer quantize_{nullptr};
    torch::nn::Conv2d quant_conv_{nullptr}, post_quant_conv_{nullptr};
};
TORCH_MODULE(Vqvae);

}  // namespace varscope
