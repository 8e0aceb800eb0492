// Quality of an accelerated result against the baseline for the same seed: PSNR and SSIM of the
// images, and how many tokens per scale are identical. LibTorch only (runs wherever the images
// are), so core-only builds (the GPU machine) report the same numbers as the desktop app.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace varscope {

// Images (B, C, H, W) or (C, H, W), float in [0, 1]. Returns one value per image.
// PSNR in dB (infinity for identical images); data range 1.
std::vector<double> psnr(const at::Tensor& a, const at::Tensor& b);
// SSIM (Wang et al. 2004): 11x11 Gaussian window (sigma 1.5), K1 = 0.01, K2 = 0.03, data
// range 1, computed per channel on the valid region and averaged.
std::vector<double> ssim(const at::Tensor& a, const at::Tensor& b);
// |a - b| averaged over channels: (B, H, W) float, for diff heatmaps.
at::Tensor abs_diff_map(const at::Tensor& a, const at::Tensor& b);

struct TokenAgreement {
    int64_t scale = 0;
    int64_t total = 0;      // tokens compared (B * pn * pn)
    int64_t identical = 0;  // equal and both decoded (-1 marks a token not decoded)
    int64_t undecoded = 0;  // tokens the accelerated run did not decode (pruned or skipped)
    double fraction() const { return total ? static_cast<double>(identical) / total : 1.0; }
};
// Per scale; both lists as VarSampleResult::tokens ((B, pn*pn) int64 per scale).
std::vector<TokenAgreement> token_agreement(const std::vector<at::Tensor>& baseline,
                                            const std::vector<at::Tensor>& accelerated);

}  // namespace varscope
