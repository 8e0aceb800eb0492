// LazyMAR's head MLP cache on CUDA: the fused head kernels run it within 2x the module path's
// bf16 error; CUDA graphs (whole steps with the head-cache hook alone and with LazyMAR's
// hooks) give the eager tokens; float32 on the GPU agrees with the CPU. Skipped
// without CUDA.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <string>
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
    return o;
}

}  // namespace

namespace {

// The same random head in float32 (the truth) and bf16 (under test), on a schedule of constant
// small betas that keeps a random head's samples O(1) (see Fp32MatchesTheCpu), and the cases
// the tests compare: N latents, with CFG (cfg_period >= 0, its head condition cache period) or
// without (-1), always with the head MLP cache at period 7.
struct HeadCachePair {
    MarPipeline p32 = MarPipeline::random(head_cache_config(), 3, {"cuda", Precision::Fp32});
    MarPipeline p16 = MarPipeline::random(head_cache_config(), 3, {"cuda", Precision::Bf16});
    const SimpleMlpAdaLNImpl& n32 = *p32.sampler().transformer()->diffloss->net;
    const SimpleMlpAdaLNImpl& n16 = *p16.sampler().transformer()->diffloss->net;
    const DiffusionSampler diffusion{DiffusionSchedule::from_betas(std::vector<double>(50, 0.02))};

    struct Case {
        at::Tensor z, cfg, start, steps, truth;  // bf16 inputs, float32 result
        int64_t period = 0;
    };
    Case make(int64_t N, int64_t cfg_period) const {
        const bool guided = cfg_period >= 0;
        const int64_t C = 16, S = diffusion.schedule().num_steps();
        const auto o = at::TensorOptions(at::kCUDA).dtype(at::kFloat);
        Case k;
        k.period = std::max<int64_t>(cfg_period, 0);
        const auto z = at::randn({guided ? 2 * N : N, 64}, o);
        k.cfg = guided ? at::full({}, 3.0, o) : at::Tensor();
        const auto start = at::randn({N, C}, o);
        const auto steps = at::randn({S, guided ? 2 * N : N, C}, o);
        k.truth = diffusion.sample_with_noise(n32, z, k.cfg, 1.0, start, steps, {}, k.period,
                                              HeadPath::Modules, 7);
        k.z = z.to(at::kBFloat16);
        k.start = start.to(at::kBFloat16);
        k.steps = steps.to(at::kBFloat16);
        return k;
    }
    // hybrid: ExecPolicy::mar_hybrid_cached_step (default on).
    at::Tensor run(const Case& k, HeadPath path, bool hybrid = true) const {
        ExecPolicy exec;
        exec.mar_hybrid_cached_step = hybrid;
        const DiffusionSampler d(diffusion.schedule(), exec);
        return d.sample_with_noise(n16, k.z, k.cfg, 1.0, k.start, k.steps, {}, k.period, path, 7);
    }
    static double err(const Case& k, const at::Tensor& t) {
        return ((t.to(at::kFloat) - k.truth).norm() / k.truth.norm()).item<double>();
    }
};

}  // namespace

// Auto runs the fused kernels with the cache (kernels::diff_cached_step on the steps that
// replay every block); against float32, their bf16 error stays within 2x the module path's,
// with and without CFG and the head condition cache; the same noise gives the same bits again.
TEST(HeadMlpCacheGpu, FusedKernelsWithinTwiceTheModulePathError) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    const HeadCachePair pair;
    c10::InferenceMode guard;
    std::string why;
    const auto like = at::zeros({8, 64}, at::TensorOptions(at::kCUDA).dtype(at::kBFloat16));
    if (!pair.diffusion.uses_fused_head(pair.n16, like, true, HeadPath::Auto, &why, 7))
        GTEST_SKIP() << "fused head unavailable: " << why;
    for (int64_t N : {1, 4, 8})
        for (int64_t cfg_period : {-1, 0, 7}) {  // -1: no CFG
            SCOPED_TRACE("N " + std::to_string(N) + " cfg period " + std::to_string(cfg_period));
            const auto k = pair.make(N, cfg_period);
            const auto modules = pair.run(k, HeadPath::Modules);
            const auto fused = pair.run(k, HeadPath::FusedCuda);
            EXPECT_TRUE(at::isfinite(fused).all().item<bool>());
            const double e_mod = pair.err(k, modules), e_fused = pair.err(k, fused);
            std::cout << "  [head MLP cache N " << N << " cfg period " << cfg_period
                      << "] rel err vs fp32: module bf16 " << e_mod << ", fused " << e_fused
                      << "\n";
            EXPECT_LE(e_fused, 2.0 * e_mod + 1e-3);
            EXPECT_TRUE(at::equal(fused, pair.run(k, HeadPath::FusedCuda)));
            EXPECT_TRUE(at::equal(fused, pair.run(k, HeadPath::Auto)));
        }
}

// Auto's module path (more rows than the fused chain takes) with its reuse steps through the
// one-kernel cached step (ExecPolicy::mar_hybrid_cached_step): within 2x the module path's
// bf16 error of float32, and not the module path's bits (so the kernel ran); an explicit
// HeadPath::Modules is untouched.
TEST(HeadMlpCacheGpu, HybridCachedStepWithinTwiceTheModulePathError) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    const HeadCachePair pair;
    c10::InferenceMode guard;
    const auto like = at::zeros({64, 64}, at::TensorOptions(at::kCUDA).dtype(at::kBFloat16));
    if (!pair.diffusion.hybrid_cached_step_runs(pair.n16, like, true))
        GTEST_SKIP() << "the cached-step kernel does not run here";
    for (int64_t N : {32, 100})
        for (int64_t cfg_period : {-1, 0, 7}) {
            SCOPED_TRACE("N " + std::to_string(N) + " cfg period " + std::to_string(cfg_period));
            const auto k = pair.make(N, cfg_period);
            auto run = [&](bool hybrid, HeadPath path) { return pair.run(k, path, hybrid); };
            const auto modules = run(false, HeadPath::Auto);  // > 16 rows: the module path
            EXPECT_TRUE(at::equal(modules, run(true, HeadPath::Modules)))
                << "an explicit module path must stay LibTorch";
            const auto hybrid = run(true, HeadPath::Auto);
            const double e_mod = pair.err(k, modules), e_hyb = pair.err(k, hybrid);
            std::cout << "  [hybrid cached step N " << N << " cfg period " << cfg_period
                      << "] rel err vs fp32: module bf16 " << e_mod << ", hybrid " << e_hyb << "\n";
            EXPECT_TRUE(at::isfinite(hybrid).all().item<bool>());
            EXPECT_LE(e_hyb, 2.0 * e_mod + 1e-3);
            EXPECT_FALSE(at::equal(hybrid, modules)) << "the cached-step kernel did not run";
        }
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
    // A random head's gates are ~N(0, 0.02)-sized: its blocks barely move the samples and the
    // cache's effect rounds away in bf16. Scaled up, the cache visibly changes the tokens.
    {
        at::NoGradGuard no_grad;
        for (auto& p : pipe.sampler().transformer()->diffloss->net->named_parameters())
            if (p.key().find("adaLN_modulation") != std::string::npos) p.value().mul_(25.0);
    }
    // Whole-step graphs (the head-cache hook alone: both head caches at period 7).
    LazyMarHeadCache head(7, 7);
    const auto eager = pipe.generate(options(false), &head);
    const auto graphed = pipe.generate(options(true), &head);
    ASSERT_TRUE(graphed.cuda_graphs);
    EXPECT_EQ((graphed.tokens.cpu() - eager.tokens.cpu()).abs().max().item<double>(), 0.0);
    // The cache is on: the tokens differ from the uncached ones.
    LazyMarHeadCache no_mlp(7, 0);
    EXPECT_GT((pipe.generate(options(false), &no_mlp).tokens.cpu() - eager.tokens.cpu())
                  .abs()
                  .max()
                  .item<double>(),
              0.0);
    // LazyMAR's hooks, its head caches included.
    LazyMarConfig lc = varscope::testing::graph_test_lazymar();
    lc.similarity_layer = 0;
    lc.head_cfg_period = lc.head_mlp_period = 7;
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
