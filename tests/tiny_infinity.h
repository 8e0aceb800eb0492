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

// A random one-block Infinity (width 64, 2 heads of 32) for the block-level kernel dispatch tests
// on the CPU, and the cos/sin (2, L, 16) of random angles its 2-D RoPE takes.
inline InfinityTransformer tiny_block_infinity() {
    InfinityConfig cfg;
    cfg.depth = 1;
    cfg.embed_dim = 64;
    cfg.num_heads = 2;
    cfg.mlp_hidden = 128;
    cfg.text_channels = 32;
    cfg.text_maxlen = 8;
    cfg.pool_heads = 1;
    cfg.codebook_dim = 4;
    auto m = random_infinity(cfg, 7);
    randomise(*m, 8);
    return m;
}

inline at::Tensor tiny_block_rope(int64_t L, at::Generator& gen) {
    const auto angles = at::rand({L, 16}, gen).mul(9.0);
    return at::stack({angles.cos(), angles.sin()}, 0);
}

}  // namespace varscope::testing
