// The noise the CUDA-graph path pre-draws (DiffusionSampler::draw_noise) is the stream the
// eager sampler draws inline: sample_with_noise on it equals sample() with the same generator.
// LazyMAR's head-side condition cache (DiffusionSampler cfg_cache_period).
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include "core/accel/lazymar.h"
#include "core/mar_pipeline.h"
#include "core/sampling/token_sampling.h"

using namespace varscope;

TEST(MarGraphNoise, PreDrawnNoiseEqualsInlineDraws) {
    MarConfig c;
    c.img_size = 64;
    c.vae_stride = 16;
    c.encoder_embed_dim = c.decoder_embed_dim = 32;
    c.encoder_depth = c.decoder_depth = 1;
    c.encoder_num_heads = c.decoder_num_heads = 2;
    c.vae_embed_dim = 4;
    c.class_num = 10;
    c.buffer_size = 4;
    c.diffloss_d = 2;
    c.diffloss_w = 32;
    c.num_sampling_steps = "10";
    auto pipe = MarPipeline::random(c, 2, {});
    c10::InferenceMode guard;
    const auto& net = *pipe.sampler().transformer()->diffloss->net;
    const auto& diffusion = pipe.sampler().diffusion();
    const int64_t N = 3, C = net.in_channels(), S = diffusion.schedule().num_steps();
    const auto z = at::randn({2 * N, c.decoder_embed_dim});
    const auto cfg = at::full({}, 2.5);
    auto g1 = seeded_generator(at::kCPU, 42);
    const auto inline_draws = diffusion.sample(net, z, cfg, 0.9, g1);
    auto g2 = seeded_generator(at::kCPU, 42);
    auto start = at::empty({N, C});
    auto steps = at::empty({S, 2 * N, C});
    DiffusionSampler::draw_noise(start, steps, g2);
    const auto pre_drawn = diffusion.sample_with_noise(net, z, cfg, 0.9, start, steps);
    EXPECT_TRUE(at::equal(inline_draws, pre_drawn));
    // The generators end in the same state too (the next draw agrees).
    EXPECT_TRUE(at::equal(at::randn({4}, g1), at::randn({4}, g2)));
    // And the noise matters (a different seed differs).
    auto g3 = seeded_generator(at::kCPU, 43);
    DiffusionSampler::draw_noise(start, steps, g3);
    EXPECT_FALSE(
        at::equal(inline_draws, diffusion.sample_with_noise(net, z, cfg, 0.9, start, steps)));
}

// LazyMAR's head-side condition cache: exactly off at period 0, and at period 1 (every step
// refreshes); at period 7 it runs the conditional half only between refreshes, which changes
// the samples a little, and the planned FLOPs count the halves skipped.
TEST(MarHeadCfgCache, OffIsExactAndCachedStepsSkipTheUnconditionalHalf) {
    MarConfig c;
    c.img_size = 64;
    c.vae_stride = 16;
    c.encoder_embed_dim = c.decoder_embed_dim = 32;
    c.encoder_depth = c.decoder_depth = 1;
    c.encoder_num_heads = c.decoder_num_heads = 2;
    c.vae_embed_dim = 4;
    c.class_num = 10;
    c.buffer_size = 4;
    c.diffloss_d = 2;
    c.diffloss_w = 32;
    c.num_sampling_steps = "20";
    auto pipe = MarPipeline::random(c, 4, {});
    MarSampleOptions o;
    o.class_ids = {1, 2};
    o.seed = 9;
    o.num_iter = 4;
    o.cfg = 3.0;
    o.time_steps = false;
    const auto base = pipe.generate(o);
    o.head_cfg_cache_period = 1;
    EXPECT_TRUE(at::equal(pipe.generate(o).tokens, base.tokens));
    o.head_cfg_cache_period = 7;
    const auto cached = pipe.generate(o);
    const double rel = ((cached.tokens - base.tokens).norm() / base.tokens.norm()).item<double>();
    EXPECT_GT(rel, 0.0);
    EXPECT_LT(rel, 2.0);
    // Without guidance the period changes nothing.
    o.cfg = 1.0;
    o.head_cfg_cache_period = 0;
    const auto plain = pipe.generate(o);
    o.head_cfg_cache_period = 7;
    EXPECT_TRUE(at::equal(pipe.generate(o).tokens, plain.tokens));

    EXPECT_TRUE(DiffusionSampler::full_cfg_step(19, 20, 7));
    EXPECT_TRUE(DiffusionSampler::full_cfg_step(14, 20, 7));
    EXPECT_FALSE(DiffusionSampler::full_cfg_step(13, 20, 7));
    LazyMarConfig lc;
    lc.enabled = true;
    lc.token_cache = false;
    const auto without = lazymar_planned_flops(c, lc, 8, 2, 3.0, 100);
    lc.head_cfg_period = 7;
    EXPECT_EQ(lazymar_head_period(lc), 7);
    const auto with = lazymar_planned_flops(c, lc, 8, 2, 3.0, 100);
    // 16 of 100 steps run both halves: the head's step FLOPs fall to 116 / 200.
    EXPECT_LT(with.diffusion, 0.6 * without.diffusion);
    EXPECT_GT(with.diffusion, 0.55 * without.diffusion);
    EXPECT_EQ(with.linear, without.linear);
    lc.condition_cache = false;
    EXPECT_EQ(lazymar_head_period(lc), 0);
    // JSON round trip and range check.
    lc.condition_cache = true;
    EXPECT_EQ(LazyMarConfig::from_json(lc.to_json()).head_cfg_period, 7);
    EXPECT_EQ(LazyMarConfig::from_json({{"head_cfg_period", 5}}).head_cfg_period, 5);
    EXPECT_ANY_THROW(LazyMarConfig::from_json({{"head_cfg_period", -1}}));
}
