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
// Teacher forcing (training, bsq_vae encode) builds the next-scale input with the other mode:
// interpolate_down(f_hat so far, schedule[si+1]) (area), as MultiScaleBSQ.forward's var_inputs.
//
// Spatial patchify (Infinity-8B, VAE infinity_vae_d56_f8_14_patchify: codebook_dim 14, each
// transformer token covers 2x2 latent positions, so 56 bits per token and the vae schedule is
// the token schedule with h and w doubled): bits arrive as (B,h,w,4d) and go through
// unpatchify_bits first; the next-scale input goes through patchify_codes.
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <cstdint>

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

// Vae-side size of a token-side scale: (t, 2h, 2w) with spatial patchify, else unchanged.
Size3 vae_scale(const Size3& token_scale, const BsqQuantConfig& cfg);

}  // namespace varscope::bsq
