// Image quality of the accelerated picture against the baseline: PSNR and SSIM on 8-bit RGB
// images (own implementation; Gaussian-window SSIM of Wang et al. 2004, per channel, averaged).
#pragma once

#include <QImage>

namespace varscope::viz {

// dB; +inf for identical images. The second image is scaled to the first's size if needed.
double psnr(const QImage& a, const QImage& b);
// In [-1, 1]; 1 for identical images. 11x11 Gaussian window, sigma 1.5, K1 0.01, K2 0.03.
double ssim(const QImage& a, const QImage& b);

}  // namespace varscope::viz
