// Training data for the trainer tests.
#pragma once

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <string>

#include "core/io/checkpoint.h"
#include "tests/test_util.h"

namespace varscope::testing {

// 16 smooth 16x16 images (colour blobs a small autoencoder can learn quickly) with labels 0..3,
// saved as an image pack in `dir`; returns its path.
inline std::string smooth_pack(const TempDir& dir) {
    auto gen = at::detail::createCPUGenerator(7);
    const at::Tensor coarse = at::rand({16, 3, 4, 4}, gen);
    const at::Tensor img =
        at::upsample_bilinear2d(coarse, {16, 16}, false).mul(255).round().to(at::kByte);
    save_safetensors({{"images", img}, {"labels", at::arange(16, at::kLong).remainder(4)}},
                     dir.file("pack.safetensors"));
    return dir.file("pack.safetensors");
}

}  // namespace varscope::testing
