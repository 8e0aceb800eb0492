// A tiny random Infinity on the CPU with the official 2B's level embeddings (so the papers'
// 13-scale presets' schedules exist): the accelerator-preset and cost-model tests sample it.
#pragma once

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "core/sampling/infinity_sampler.h"
#include "tests/tiny_models.h"

namespace varscope::testing {

inline InfinityConfig tiny_preset_infinity_config() {
    auto c = InfinityConfig::infinity_2b();  // 13+ level embeddings: the presets' schedule
    c.depth = 2, c.embed_dim = 32, c.num_heads = 2, c.mlp_hidden = 64, c.text_channels = 128;
    c.text_maxlen = 8, c.pool_heads = 1, c.codebook_dim = 4;
    return c;
}

inline InfinitySampler tiny_preset_infinity_sampler() {
    auto m = random_infinity(tiny_preset_infinity_config(), 5);
    randomise(*m, 6);
    bsq::BsqQuantConfig q;
    q.codebook_dim = 4;
    return InfinitySampler(m, q);
}

// One prompt of 5 text tokens (seeded features of width 128).
inline InfinityText tiny_preset_infinity_text() {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
    return {at::randn({5, 128}, gen), {5}};
}

}  // namespace varscope::testing
