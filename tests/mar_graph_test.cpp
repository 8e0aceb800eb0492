// The noise the CUDA-graph path pre-draws (DiffusionSampler::draw_noise) is the stream the
// eager sampler draws inline: sample_with_noise on it equals sample() with the same generator.
// LazyMAR's head-side condition cache (DiffusionSampler cfg_cache_period). Hook state
// (MarHookState): stable tensors, in the graph set while a step is captured.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include "core/accel/lazymar.h"
#include "core/mar_pipeline.h"
#include "core/sampling/mar_cuda_graph.h"
#include "core/sampling/token_sampling.h"
#include "tests/tiny_mar.h"

using namespace varscope;

TEST(MarGraphNoise, PreDrawnNoiseEqualsInlineDraws) {
    const MarConfig c = varscope::testing::tiny_cpu_mar_config();
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

// LazyMAR's head-side condition cache (a LazyMarHeadCache hook): exactly off at period 0, and
// at period 1 (every step refreshes); at period 7 it runs the conditional half only between
// refreshes, which changes the samples a little, and the planned FLOPs count the halves skipped.
TEST(MarHeadCfgCache, OffIsExactAndCachedStepsSkipTheUnconditionalHalf) {
    MarConfig c = varscope::testing::tiny_cpu_mar_config();
    c.num_sampling_steps = "20";
    auto pipe = MarPipeline::random(c, 4, {});
    auto o = varscope::testing::mar_options({1, 2}, 9, 4, 3.0);
    const auto base = pipe.generate(o);
    LazyMarHeadCache off(0, 0), every(1, 0), period7(7, 0);
    EXPECT_TRUE(at::equal(pipe.generate(o, &off).tokens, base.tokens));
    EXPECT_TRUE(at::equal(pipe.generate(o, &every).tokens, base.tokens));
    const auto cached = pipe.generate(o, &period7);
    const double rel = ((cached.tokens - base.tokens).norm() / base.tokens.norm()).item<double>();
    EXPECT_GT(rel, 0.0);
    EXPECT_LT(rel, 2.0);
    // Without guidance the period changes nothing.
    o.cfg = 1.0;
    const auto plain = pipe.generate(o);
    EXPECT_TRUE(at::equal(pipe.generate(o, &period7).tokens, plain.tokens));

    EXPECT_TRUE(DiffusionSampler::full_cfg_step(19, 20, 7));
    EXPECT_TRUE(DiffusionSampler::full_cfg_step(14, 20, 7));
    EXPECT_FALSE(DiffusionSampler::full_cfg_step(13, 20, 7));
    LazyMarConfig lc;
    lc.enabled = true;
    lc.token_cache = false;
    const auto without = lazymar_planned_flops(c, lc, 8, 2, 3.0, 100);
    lc.head_cfg_period = 7;
    EXPECT_EQ(LazyMarHeadCache::from_config(lc).head_cfg_cache_period(), 7);
    EXPECT_EQ(make_lazymar(lc, c, nullptr)->head_cfg_cache_period(), 7);  // LazyMAR's hooks
    const auto with = lazymar_planned_flops(c, lc, 8, 2, 3.0, 100);
    // 16 of 100 steps run both halves: the head's step FLOPs fall to 116 / 200.
    EXPECT_LT(with.diffusion, 0.6 * without.diffusion);
    EXPECT_GT(with.diffusion, 0.55 * without.diffusion);
    EXPECT_EQ(with.linear, without.linear);
    lc.condition_cache = false;
    EXPECT_EQ(LazyMarHeadCache::from_config(lc).head_cfg_cache_period(), 0);
    // JSON round trip and range check.
    lc.condition_cache = true;
    EXPECT_EQ(LazyMarConfig::from_json(lc.to_json()).head_cfg_period, 7);
    EXPECT_EQ(LazyMarConfig::from_json({{"head_cfg_period", 5}}).head_cfg_period, 5);
    EXPECT_ANY_THROW(LazyMarConfig::from_json({{"head_cfg_period", -1}}));
}

// Eagerly the hook object holds its state: the same tensor from step to step, replaced only
// when a step asks for other sizes. While a step is captured (ctx.graphs) the graph set holds
// it under prefix + name, so another hook object (a later run) finds the tensor the capture
// wrote; there other sizes are an error, and reading a tensor nobody wrote is one everywhere.
TEST(MarHookState, StableTensorsOwnedByTheHookOrTheGraphSet) {
    MarConfig c;
    MarStepContext eager{c, 0, 8, 1, false, 1.0, 0, 0, {}, {}, {}, {}, {}, {}, {}, false};
    MarHookState a("test.");
    const auto f32 = at::TensorOptions().dtype(at::kFloat);
    auto t = a.get(eager, "k", {2, 3}, f32);
    t.fill_(1.0f);
    EXPECT_EQ(a.get(eager, "k", {2, 3}, f32).data_ptr(), t.data_ptr());
    EXPECT_TRUE(a.get(eager, "k").equal(at::ones({2, 3})));
    EXPECT_EQ(a.get(eager, "k", {4, 3}, f32).size(0), 4);  // replaced
    EXPECT_EQ(a.get(eager, "k", {4, 3}, f32.dtype(at::kDouble)).scalar_type(), at::kDouble);
    EXPECT_THROW(a.get(eager, "missing"), c10::Error);

    MarGraphs graphs(MarGraphKey{});
    MarStepContext captured = eager;
    captured.graphs = &graphs;
    auto g = a.get(captured, "k", {2, 3}, f32);
    g.fill_(2.0f);
    MarHookState b("test.");  // a fresh hook object of the same kind
    EXPECT_EQ(b.get(captured, "k").data_ptr(), g.data_ptr());
    EXPECT_EQ(graphs.buffer("test.k", [] { return at::Tensor(); }).data_ptr(), g.data_ptr());
    EXPECT_THROW(b.get(captured, "k", {4, 3}, f32), c10::Error);
    EXPECT_THROW(b.get(captured, "v"), c10::Error);
    MarHookState other("other.");
    EXPECT_THROW(other.get(captured, "k"), c10::Error);
    // The eager tensor of `a` is its own, not the graph set's.
    EXPECT_NE(a.get(eager, "k").data_ptr(), g.data_ptr());
}
