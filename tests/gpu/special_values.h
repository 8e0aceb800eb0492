// Inputs for the element-wise kernels' bitwise tests: magnitudes from 2^-30 to 2^30, so that
// products and sums round everywhere, with signed zeros, infinities, a denormal, a value near
// the float maximum and two just above bf16 rounding ties put in at fixed places.
#pragma once

#include <ATen/ATen.h>

#include <limits>
#include <vector>

namespace varscope::testing {

// (B, L, C) float32 on the CPU from `gen`; the special values every `every` elements.
inline at::Tensor special_values_stream(int64_t B, int64_t L, int64_t C, at::Generator& gen,
                                        int64_t every = 7) {
    auto x = at::randn({B, L, C}, gen).mul(at::pow(2.0, at::randint(-30, 30, {B, L, C}, gen)));
    auto flat = x.view(-1);
    const std::vector<float> special = {0.0f,
                                        -0.0f,
                                        std::numeric_limits<float>::infinity(),
                                        -std::numeric_limits<float>::infinity(),
                                        1e-40f,
                                        3.0e38f,
                                        1.00390625f,
                                        1.005859375f};
    for (size_t i = 0; i < special.size() && static_cast<int64_t>(i) * every < flat.numel(); ++i)
        flat[static_cast<int64_t>(i) * every] = special[i];
    return x;
}

}  // namespace varscope::testing
