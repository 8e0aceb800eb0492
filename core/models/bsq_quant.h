// Sampler-side operations of Infinity's multi-scale BSQ quantizer (FoundationVision/Infinity
// infinity/models/bsq_vae/multiscale_bsq.py), as Infinity.autoregressive_infer_cfg uses them.
//
// Per scale si of a schedule [(1,h_0,w_0) ... (1,H,W)] (vae sizes; see spatial patchify below)
// the sampler draws one bit per channel and position and then does:
//
//   codes = bits_to_codes(bits, cfg)                  // (B,d,1,h_si,w_si), entries +-1/sqrt(d)
//   if si != last:
//       summed += interpolate_up(codes, {1,H,W})      // accumulated f_hat at the final size
//       next   = interpolate_up(summed, schedule[si+1])   // yes, "up" mode to a SMALLER size
//       next   = next.squeeze(-3)                     // (B,d,h,w) [-> patchify_codes]
//       tokens = next.flatten(2).transpose(1, 2)      // (B,h*w,d) -> word_embed
//   else:
//       summed += codes                               // already (1,H,W)
//   image = vae.decode(summed.squeeze(-3))
//
// Teacher forcing (official trainer: BitwiseSelfCorrection.flip_requant, without its label
// noise) is teacher_forcing() below: labels from the encoder features with area-down residuals,
// and next-scale inputs built exactly like the sampler's (trilinear "up" mode of the running sum).
// MultiScaleBSQ.forward (the VAE's own encode) differs: its var_inputs use area.
//
// Spatial patchify (Infinity-8B, VAE infinity_vae_d56_f8_14_patchify: codebook_dim 14, each
// transformer token covers 2x2 latent positions, so 56 bits per token and the vae schedule is
// the token schedule with h and w doubled): bits arrive as (B,h,w,4d) and go through
// unpatchify_bits first; the next-scale input goes through patchify_codes.
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <cstdint>
#include <functional>
#include <vector>

namespace varscope::bsq {

// F.interpolate modes the official quantizer uses (z_interplote_up / z_interplote_down).
enum class Interp { Trilinear, Area };

using Size3 = std::array<int64_t, 3>;  // (t, h, w)

struct BsqQuantConfig {
    int64_t codebook_dim = 32;      // bits per latent position = the VAE's z channels
    bool spatial_patchify = false;  // a transformer property, not in the VAE's weights
    Interp up = Interp::Trilinear;  // official z_interplote_up
    Interp down = Interp::Area;     // official z_interplote_down

    // Bits per transformer token: codebook_dim, or 4 * codebook_dim with spatial patchify.
    int64_t token_bits() const { return spatial_patchify ? 4 * codebook_dim : codebook_dim; }
    // The BSQ codebook_scale 1/sqrt(codebook_dim) (the level before l2 normalisation).
    double codebook_scale() const;
    void validate() const;  // std::invalid_argument naming the bad field
};

// lfq.indices_to_codes(bits, label_type='bit_label'): bits (B,1,h,w,d) or (B,h,w,d) of any
// integer, bool or floating type holding 0/1 -> float32 codes (B,d,1,h,w) =
// l2normalize(bits * 2s - s) over d with s = codebook_scale(), i.e. +-1/sqrt(d), computed in the
// official order so that results are bit-identical.
at::Tensor bits_to_codes(const at::Tensor& bits, const BsqQuantConfig& cfg);

// F.interpolate(x, size, mode) of a (B,C,T,H,W) tensor with the quantizer's modes
// (trilinear with align_corners=False, or area = adaptive average pooling).
at::Tensor interpolate(const at::Tensor& x, const Size3& size, Interp mode);
inline at::Tensor interpolate_up(const at::Tensor& x, const Size3& size,
                                 const BsqQuantConfig& cfg) {
    return interpolate(x, size, cfg.up);
}
inline at::Tensor interpolate_down(const at::Tensor& x, const Size3& size,
                                   const BsqQuantConfig& cfg) {
    return interpolate(x, size, cfg.down);
}

// Spatial patchify: (B,h,w,4d) bits -> (B,2h,2w,d) (official permute + pixel_shuffle(2)).
at::Tensor unpatchify_bits(const at::Tensor& bits);
// (B,d,2h,2w) -> (B,4d,h,w) (official pixel_unshuffle(2)).
at::Tensor patchify_codes(const at::Tensor& x);

// ---- encode side (MultiScaleBSQ.forward with the inference settings: new_quant, no projection,
// no layer norm, no decay factor, no dropped or flipped scales) --------------------------------

struct BsqQuantized {
    // (B,d,t,h,w): z + (zhat - z).detach(), zhat = +-1/sqrt(d), z = l2norm_d(x): the values of
    // zhat with the gradient of z (the straight-through estimator).
    at::Tensor quantized;
    at::Tensor bits;        // (B,t,h,w,d) int64, quantized > 0 (official bit_indices)
    at::Tensor normalized;  // z, (B,t,h,w,d) float32, channels last: what the BSQ losses take
};
// One BSQ step (the official lfq forward) on x (B,d,t,h,w).
BsqQuantized bsq_quantize(const at::Tensor& x, const BsqQuantConfig& cfg);

struct MultiScaleCodes {
    // Per scale (B,t,h,w,d) int64: the teacher labels. The sampler's (B,1,h,w,d) layout, so
    // bits_to_codes takes them as they are (with spatial patchify, the transformer's (B,h/2,w/2,4d)
    // labels are pixel_unshuffle(2) of these, the inverse of unpatchify_bits).
    std::vector<at::Tensor> bits;
    // Sum of the quantized scales at the input size: (B,d,H,W) when T == 1 (official
    // squeeze(2)), else (B,d,T,H,W). What decode takes.
    at::Tensor f_hat;
    // Teacher-forcing inputs, for si < last: the running f_hat area-downsampled to
    // schedule[si+1], (B,d,t,h,w) (official var_inputs).
    std::vector<at::Tensor> var_inputs;
};
// Residual multi-scale quantization of the encoder output h ((B,d,H,W) or (B,d,T,H,W)) for a
// schedule of (t,h,w) sizes: per scale, area-down the residual (unless the size is the input's),
// BSQ-quantize, trilinear-up to the input size, subtract, accumulate.
// Differentiable as the official training runs it: f_hat carries the straight-through gradient
// of every scale, the residual subtracts the quantized scale detached (remove_residual_detach
// False), so each scale's gradient reaches h directly. on_scale, when set, sees every scale's
// BSQ step (training computes the quantizer losses there).
using OnBsqScale = std::function<void(size_t si, const BsqQuantized& q)>;
MultiScaleCodes quantize_multiscale(const at::Tensor& h, const std::vector<Size3>& schedule,
                                    const BsqQuantConfig& cfg, const OnBsqScale& on_scale = {});

// ---- teacher forcing (trainer.py -> BitwiseSelfCorrection.flip_requant, no label noise) ------

struct TeacherForcing {
    std::vector<at::Tensor> bits;         // per scale (B,1,h,w,d) int64, vae-side layout
    std::vector<at::Tensor> next_inputs;  // per si < last: (B,d,1,h,w) at vae_schedule[si+1]
    at::Tensor summed;                    // (B,d,1,H,W): sum of trilinear-up(quantized)
};
// For encoder features h ((B,d,H,W) or (B,d,1,H,W)) and the vae-side schedule: residual = h -
// summed, area-down to the scale (all but the last), BSQ-quantize, summed += up(quantized).
TeacherForcing teacher_forcing(const at::Tensor& h, const std::vector<Size3>& vae_schedule,
                               const BsqQuantConfig& cfg);
// The transformer's view of one scale. Labels (B,1,h,w,d) -> (B,h*w,d), or with spatial
// patchify (B,h*w/4,4d) (pixel_unshuffle(2)); inputs (B,d,1,h,w) -> (B,h*w,d) or (B,h*w/4,4d).
at::Tensor token_labels(const at::Tensor& bits, const BsqQuantConfig& cfg);
at::Tensor token_inputs(const at::Tensor& x, const BsqQuantConfig& cfg);

// Vae-side size of a token-side scale: (t, 2h, 2w) with spatial patchify, else unchanged.
Size3 vae_scale(const Size3& token_scale, const BsqQuantConfig& cfg);

}  // namespace varscope::bsq
