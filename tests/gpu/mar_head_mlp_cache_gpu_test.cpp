// LazyMAR's head MLP cache on CUDA: the fused head kernels have no such cache, so Auto falls
// back to the module path (same values as asking for it); CUDA graphs (whole steps without
// hooks, the diffusion per row count with LazyMAR's hooks) give the eager tokens; float32 on
// the GPU agrees with the CPU. Skipped without CUDA.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <vector>

#include "core/accel/lazymar.h"
#include "core/mar_pipeline.h"
#include "core/pipeline.h"
#include "core/sampling/token_sampling.h"
#include "kernels/cuda_graph.h"
#include "tests/tiny_mar.h"

using namespace varscope;

namespace {

// Blocks 0 and 5 keep their MLP term, 1..4 their change.
MarConfig head_cache_config() {
    return varscope::testing::small_mar_with_head(256, 6, "50");
}

MarSampleOptions options(bool graphs) {
    MarSampleOptions o;
    o.class_ids = {3, 7};
    o.seed = 11;
    o.num_iter = 8;
    o.cfg = 3.0;
    o.temperature = 0.95;
    o.time_steps = false;
    o.cuda_graphs = graphs;
    o.head_cfg_cache_period = 7;
    o.head_mlp_cache_period = 7;
    return o;
}

}  // namespace

TEST(HeadMlpCacheGpu, AutoFallsBackToTheModulePath) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    auto pipe = MarPipeline::random(head_cache_config(), 3, {"cuda", Precision::Bf16});
    c10::InferenceMode guard;
    const auto& net = *pipe.sampler().transformer()->diffloss->net;
    const auto& diffusion = pipe.sampler().diffusion();
    const auto dev = at::TensorOptions(at::kCUDA);
    const auto z = at::randn({8, 64}, dev).to(at::kBFloat16);
    std::string why;
    EXPECT_FALSE(DiffusionSampler::uses_fused_head(net, z, true, HeadPath::Auto, &why, 7));
    EXPECT_NE(why.find("head MLP cache"), std::string::npos) << why;
    const auto cfg = at::full({}, 3.0, dev.dtype(at::kFloat));
    auto g1 = seeded_generator(at::kCUDA, 2), g2 = seeded_generator(at::kCUDA, 2);
    const auto automatic = diffusion.sample(net, z, cfg, 1.0, g1, 7, HeadPath::Auto, 7);
    const auto modules = diffusion.sample(net, z, cfg, 1.0, g2, 7, HeadPath::Modules, 7);
    EXPECT_TRUE(at::equal(automatic, modules));
    EXPECT_TRUE(at::isfinite(automatic).all().item<bool>());
}

TEST(HeadMlpCacheGpu, Fp32MatchesTheCpu) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    auto cpu = MarPipeline::random(head_cache_config(), 5, {});
    auto gpu = MarPipeline::random(head_cache_config(), 5, {"cuda", Precision::Fp32});
    c10::InferenceMode guard;
    // Constant small betas: MAR's cosine schedule lets a random head's samples grow to ~1e7,
    // where a device comparison would only see rounding.
    const DiffusionSampler diffusion(DiffusionSchedule::from_betas(std::vector<double>(50, 0.02)));
    const int64_t N = 4, C = 16, S = diffusion.schedule().num_steps();
    const auto z = at::randn({2 * N, 64});
    auto start = at::empty({N, C});
    auto noise = at::empty({S, 2 * N, C});
    DiffusionSampler::draw_noise(start, noise, seeded_generator(at::kCPU, 4));
    const auto cfg = at::full({}, 3.0);
    auto run = [&](MarPipeline& p, const at::Device& d) {
        return diffusion
            .sample_with_noise(*p.sampler().transformer()->diffloss->net, z.to(d), cfg.to(d), 1.0,
                               start.to(d), noise.to(d), {}, 7, HeadPath::Auto, 7)
            .cpu();
    };
    const auto a = run(cpu, at::kCPU), b = run(gpu, at::Device(at::kCUDA));
    const double rel = ((a - b).norm() / a.norm()).item<double>();
    EXPECT_LT(rel, 1e-3) << "CPU vs CUDA float32 with the head MLP cache";
}

TEST(HeadMlpCacheGpu, GraphedEqualsEager) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    if (!kernels::cuda_graphs_built()) GTEST_SKIP() << "built without CUDA kernels";
    const MarConfig c = head_cache_config();
    auto pipe = MarPipeline::random(c, 3, {"cuda", Precision::Bf16});
    // Whole-step graphs (no hooks).
    const auto eager = pipe.generate(options(false));
    const auto graphed = pipe.generate(options(true));
    ASSERT_TRUE(graphed.cuda_graphs);
    EXPECT_EQ((graphed.tokens.cpu() - eager.tokens.cpu()).abs().max().item<double>(), 0.0);
    // The cache is on: the tokens differ from the uncached ones.
    auto plain = options(false);
    plain.head_mlp_cache_period = 0;
    EXPECT_GT((pipe.generate(plain).tokens.cpu() - eager.tokens.cpu()).abs().max().item<double>(),
              0.0);
    // LazyMAR's hooks: the diffusion graphed per row count.
    LazyMarConfig lc;
    lc.enabled = true;
    lc.start_step = 2;
    lc.period = 3;
    lc.keep_ratio = 0.3;
    lc.similarity_layer = 0;
    auto run = [&](bool graphs) {
        auto hooks = make_lazymar(lc, c, nullptr);
        return pipe.generate(options(graphs), hooks.get());
    };
    const auto lazy_eager = run(false);
    const auto lazy_graphed = run(true);
    EXPECT_TRUE(lazy_graphed.cuda_graphs);
    EXPECT_EQ((lazy_graphed.tokens.cpu() - lazy_eager.tokens.cpu()).abs().max().item<double>(),
              0.0);
}
