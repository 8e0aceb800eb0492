// Tensor -> plain-data conversions shared by the engine's VAR and MAR halves (LibTorch side).
#pragma once

#include <ATen/ATen.h>

#include "ui/engine/engine.h"

namespace varscope::gui {

// (3, H, W) float in [0, 1] -> 8-bit RGB.
inline RgbImage to_rgb(const at::Tensor& chw) {
    auto t = chw.detach().to(at::kCPU, at::kFloat).clamp(0, 1).mul(255).round().to(at::kByte);
    t = t.permute({1, 2, 0}).contiguous();
    RgbImage img;
    img.height = static_cast<int>(t.size(0));
    img.width = static_cast<int>(t.size(1));
    img.rgb.assign(t.data_ptr<uint8_t>(), t.data_ptr<uint8_t>() + t.numel());
    return img;
}

inline FloatArray to_array(const at::Tensor& t) {
    FloatArray a;
    if (!t.defined()) return a;
    auto c = t.detach().to(at::kCPU, at::kFloat).contiguous();
    a.shape.assign(c.sizes().begin(), c.sizes().end());
    a.values.assign(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
    return a;
}

}  // namespace varscope::gui
