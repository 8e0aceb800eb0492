// LazyMAR's head MLP cache on CUDA: the fused head kernels run it within 2x the module path's
// bf16 error; CUDA graphs (whole steps without hooks, the diffusion per row count with
// LazyMAR's hooks) give the eager tokens; float32 on the GPU agrees with the CPU. Skipped
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
    o.head_cfg_cache_period = 7;
    o.head_mlp_cache_period = 7;
    return o;
}

}  // namespace

// Auto runs the fused kernels with the cache (kernels::diff_cached_step on the steps that
// replay every block); against float32, their bf16 error stays within 2x the module path's,
// with and without CFG and the head condition cache; the same noise gives the same bits again.
TEST(HeadMlpCacheGpu, FusedKernelsWithinTwiceTheModulePathError) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    auto p32 = MarPipeline::random(head_cache_config(), 3, {"cuda", Precision::Fp32});
    auto p16 = MarPipeline::random(head_cache_config(), 3, {"cuda", Precision::Bf16});
    c10::InferenceMode guard;
    const auto& n32 = *p32.sampler().transformer()->diffloss->net;
    const auto& n16 = *p16.sampler().transformer()->diffloss->net;
    const auto dev = at::TensorOptions(at::kCUDA);
    std::string why;
    if (!DiffusionSampler::uses_fused_head(n16, at::zeros({8, 64}, dev.dtype(at::kBFloat16)), true,
                                           HeadPath::Auto, &why, 7))
        GTEST_SKIP() << "fused head unavailable: " << why;
    // Constant small betas keep a random head's samples O(1) (see Fp32MatchesTheCpu).
    const DiffusionSampler diffusion(DiffusionSchedule::from_betas(std::vector<double>(50, 0.02)));
    const int64_t C = 16, S = diffusion.schedule().num_steps();
    for (int64_t N : {1, 4, 8})
        for (int64_t cfg_period : {-1, 0, 7}) {  // -1: no CFG
            const bool guided = cfg_period >= 0;
            const int64_t per = std::max<int64_t>(cfg_period, 0);
            SCOPED_TRACE("N " + std::to_string(N) + " cfg period " + std::to_string(cfg_period));
            const auto o = dev.dtype(at::kFloat);
            const auto z = at::randn({guided ? 2 * N : N, 64}, o);
            const auto cfg = guided ? at::full({}, 3.0, o) : at::Tensor();
            const auto start = at::randn({N, C}, o);
            const auto steps = at::randn({S, guided ? 2 * N : N, C}, o);
            const auto truth = diffusion.sample_with_noise(n32, z, cfg, 1.0, start, steps, {}, per,
                                                           HeadPath::Modules, 7);
            const auto zb = z.to(at::kBFloat16);
            const auto sb = start.to(at::kBFloat16), nb = steps.to(at::kBFloat16);
            auto run = [&](HeadPath path) {
                return diffusion.sample_with_noise(n16, zb, cfg, 1.0, sb, nb, {}, per, path, 7);
            };
            const auto modules = run(HeadPath::Modules);
            const auto fused = run(HeadPath::FusedCuda);
            EXPECT_TRUE(at::isfinite(fused).all().item<bool>());
            auto err = [&](const at::Tensor& t) {
                return ((t.to(at::kFloat) - truth).norm() / truth.norm()).item<double>();
            };
            const double e_mod = err(modules), e_fused = err(fused);
            std::cout << "  [head MLP cache N " << N << " cfg period " << cfg_period
                      << "] rel err vs fp32: module bf16 " << e_mod << ", fused " << e_fused << "\n";
            EXPECT_LE(e_fused, 2.0 * e_mod + 1e-3);
            EXPECT_TRUE(at::equal(fused, run(HeadPath::FusedCuda)));
            EXPECT_TRUE(at::equal(fused, run(HeadPath::Auto)));
        }
}

// Auto's module path (more rows than the fused chain takes) with its reuse steps through the
// one-kernel cached step (DiffusionSampler::set_hybrid_cached_step): within 2x the module path's
// bf16 error of float32, and not the module path's bits (so the kernel ran); an explicit
// HeadPath::Modules is untouched.
TEST(HeadMlpCacheGpu, HybridCachedStepWithinTwiceTheModulePathError) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    auto p32 = MarPipeline::random(head_cache_config(), 3, {"cuda", Precision::Fp32});
    auto p16 = MarPipeline::random(head_cache_config(), 3, {"cuda", Precision::Bf16});
    c10::InferenceMode guard;
    const auto& n32 = *p32.sampler().transformer()->diffloss->net;
    const auto& n16 = *p16.sampler().transformer()->diffloss->net;
    const auto dev = at::TensorOptions(at::kCUDA);
    if (!DiffusionSampler::hybrid_cached_step_runs(n16, at::zeros({64, 64}, dev.dtype(at::kBFloat16)),
                                                   true))
        GTEST_SKIP() << "the cached-step kernel does not run here";
    const bool before = DiffusionSampler::hybrid_cached_step_enabled();
    const DiffusionSampler diffusion(DiffusionSchedule::from_betas(std::vector<double>(50, 0.02)));
    const int64_t C = 16, S = diffusion.schedule().num_steps();
    for (int64_t N : {32, 100})
        for (int64_t cfg_period : {-1, 0, 7}) {
            const bool guided = cfg_period >= 0;
            const int64_t per = std::max<int64_t>(cfg_period, 0);
            SCOPED_TRACE("N " + std::to_string(N) + " cfg period " + std::to_string(cfg_period));
            const auto o = dev.dtype(at::kFloat);
            const auto z = at::randn({guided ? 2 * N : N, 64}, o);
            const auto cfg = guided ? at::full({}, 3.0, o) : at::Tensor();
            const auto start = at::randn({N, C}, o);
            const auto steps = at::randn({S, guided ? 2 * N : N, C}, o);
            const auto truth = diffusion.sample_with_noise(n32, z, cfg, 1.0, start, steps, {}, per,
                                                           HeadPath::Modules, 7);
            const auto zb = z.to(at::kBFloat16);
            const auto sb = start.to(at::kBFloat16), nb = steps.to(at::kBFloat16);
            auto run = [&](bool hybrid, HeadPath path) {
                DiffusionSampler::set_hybrid_cached_step(hybrid);
                return diffusion.sample_with_noise(n16, zb, cfg, 1.0, sb, nb, {}, per, path, 7);
            };
            const auto modules = run(false, HeadPath::Auto);  // > 16 rows: the module path
            EXPECT_TRUE(at::equal(modules, run(true, HeadPath::Modules)))
                << "an explicit module path must stay LibTorch";
            const auto hybrid = run(true, HeadPath::Auto);
            auto err = [&](const at::Tensor& t) {
                return ((t.to(at::kFloat) - truth).norm() / truth.norm()).item<double>();
            };
            const double e_mod = err(modules), e_hyb = err(hybrid);
            std::cout << "  [hybrid cached step N " << N << " cfg period " << cfg_period
                      << "] rel err vs fp32: module bf16 " << e_mod << ", hybrid " << e_hyb << "\n";
            EXPECT_TRUE(at::isfinite(hybrid).all().item<bool>());
            EXPECT_LE(e_hyb, 2.0 * e_mod + 1e-3);
            EXPECT_FALSE(at::equal(hybrid, modules)) << "the cached-step kernel did not run";
        }
    DiffusionSampler::set_hybrid_cached_step(before);
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
