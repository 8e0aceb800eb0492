// Infinity's BSQ multi-scale VAE (FoundationVision/Infinity infinity/models/bsq_vae: the
// flux-VQGAN AutoEncoder with MultiScaleBSQ) in LibTorch, as the official inference builds it.
// The official .pth files ({"vae": state_dict}) load unchanged, in either tensor naming (see
// load()).
//
//   img [B,3,H,W] in [-1,1] --encoder--> h [B,d,H/p,W/p] --quantize_multiscale(schedule)-->
//       bit labels per scale (B,1,h,w,d) + f_hat [B,d,H/p,W/p]
//   bits --bsq::bits_to_codes, summed with trilinear up (bsq_quant.h)--> f_hat
//   f_hat --decoder, clamp--> img in [-1,1]; decode_01 gives [0,1] like the other VAEs' users
//
// Decoding runs in chunks of images (core/sampling/chunked_decode.h: one image at 1024²): the
// decoder's full-resolution activations of a 1024x1024 image are 128 x 1024 x 1024 floats
// (0.5 GiB fp32) each, several alive at once, so a whole batch would multiply that peak.
//
// Nothing here disables autograd so that training can reuse it; inference callers add
// at::NoGradGuard / c10::InferenceMode themselves.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <string>
#include <vector>

#include "core/io/state_dict.h"
#include "core/models/bsq_quant.h"
#include "core/models/bsq_vae_blocks.h"
#include "core/models/bsq_vae_config.h"

namespace varscope {

struct BsqEncodeOutput {
    at::Tensor h;  // encoder output [B,d,h,w] (official encode's h)
    bsq::MultiScaleCodes codes;
};

class BsqVaeImpl : public torch::nn::Module {
  public:
    explicit BsqVaeImpl(BsqVaeConfig cfg = BsqVaeConfig::d32reg());

    // Well-conditioned random weights (for benchmarks and shape checks), reproducible by seed.
    static std::shared_ptr<BsqVaeImpl> random(const BsqVaeConfig& cfg, uint64_t seed);

    const BsqVaeConfig& config() const { return cfg_; }
    bsq::BsqQuantConfig quant_config() const { return cfg_.quant_config(); }
    std::string describe() const { return cfg_.describe(); }

    // Copies a state dict in (official names, or the flux-style names without the wrappers'
    // ".conv"/".norm" level, which the official load_cnn accepts too), reporting every missing
    // or mis-shaped tensor at once (CheckpointError mentioning `what` and the tensor). Like the
    // official loader, tensors the inference model has no place for are ignored when they are
    // outside encoder./decoder. (quantizer.lfq.mask, training state) or the unused mid
    // attention; other unexpected encoder./decoder. tensors are errors.
    void load(const StateDict& dict, const std::string& what);
    using torch::nn::Module::load;  // keeps the archive overload visible

    at::Tensor encode_h(const at::Tensor& img) { return encoder_(img); }
    // Official AutoEncoder.encode: encoder, then the residual multi-scale BSQ over `schedule`
    // ((t,h,w) sizes, the last one the latent size).
    BsqEncodeOutput encode(const at::Tensor& img, const std::vector<bsq::Size3>& schedule);

    // f_hat [B,d,h,w] or [B,d,1,h,w] -> decoder output clamped to [-1,1] (official decode).
    at::Tensor decode(const at::Tensor& f_hat);
    at::Tensor decode_01(const at::Tensor& f_hat) { return decode(f_hat).add_(1).mul_(0.5); }
    at::Tensor decode_unclamped(const at::Tensor& f_hat);  // what training and parity compare
    // Official decode_from_indices with bit labels: per-scale bits -> summed codes -> decode.
    at::Tensor decode_bits(const std::vector<at::Tensor>& bits,
                           const std::vector<bsq::Size3>& schedule);
    // Sum over scales of trilinear-up(codes) to schedule.back() (the last one added as is when
    // it already has that size), [B,d,1,H,W].
    at::Tensor summed_codes(const std::vector<at::Tensor>& bits,
                            const std::vector<bsq::Size3>& schedule) const;

    bsq_vae::Encoder& encoder() { return encoder_; }
    bsq_vae::Decoder& decoder() { return decoder_; }

  private:
    at::Tensor decode_chunked(const at::Tensor& f_hat, bool clamp);

    BsqVaeConfig cfg_;
    bsq_vae::Encoder encoder_{nullptr};
    bsq_vae::Decoder decoder_{nullptr};
};
TORCH_MODULE(BsqVae);

// The state dict a BSQ VAE file holds: the official files nest it under "vae" (the loader
// flattens that to "vae.<name>"), "ema." is accepted when "vae." is absent, a raw dict or a
// safetensors file as is. Throws CheckpointError naming `what` when no BSQ VAE tensors are found.
StateDict bsq_vae_state_dict(const StateDict& file_contents, const std::string& what);

// Loads a .pth/.safetensors BSQ VAE, architecture inferred from the tensor shapes.
BsqVae load_bsq_vae(const std::string& path);

}  // namespace varscope
