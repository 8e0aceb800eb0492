// LazyMAR's head MLP cache (DiffusionSampler mlp_cache_period, LazyMarConfig::head_mlp_period,
// the LazyMarHeadCache hook):
// the step schedule; exactly the uncached samples when off or when every step refreshes; equal
// to a plain re-implementation of the released code's rule (written here from its description,
// per step, without the sampler's windows); the fused loop on its references equals the module
// path exactly; the FLOP counter and the plan count it.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "core/accel/lazymar.h"
#include "core/accel/mar_flops.h"
#include "core/accel/probe_kinds.h"
#include "core/mar_pipeline.h"
#include "core/models/diffloss.h"
#include "core/sampling/token_sampling.h"
#include "kernels/diffloss_ops.h"
#include "tests/tiny_mar.h"

using namespace varscope;

namespace {

// A head of depth 6 (blocks 0 and 5 keep their MLP term, 1..4 their output change) and 50
// diffusion steps (with period 7: refreshes at 49, 42, ..., 0; warm-up steps 48..46).
MarConfig head_config(int64_t depth = 6, const char* steps = "50") {
    MarConfig c = varscope::testing::tiny_cpu_mar_config();
    c.diffloss_d = depth;
    c.num_sampling_steps = steps;
    return c;
}

// MarPipeline::random's head modulation/output layers are N(0, 0.02): the blocks' gated MLP
// terms then barely reach the samples (relative changes ~1e-7, float rounding). Scaled up, the
// cache has a visible effect the tests can compare.
MarPipeline strong_head_mar(const MarConfig& c, uint64_t seed) {
    auto pipe = MarPipeline::random(c, seed, {});
    at::NoGradGuard no_grad;
    const auto& net = *pipe.sampler().transformer()->diffloss->net;
    int64_t scaled = 0;
    for (auto& p : net.named_parameters()) {
        const auto& name = p.key();
        if (name.find("adaLN_modulation") != std::string::npos ||
            name.rfind("final_layer.linear", 0) == 0) {
            p.value().mul_(25.0);
            ++scaled;
        }
    }
    // Two tensors per block, two for the final modulation, two for the output layer.
    EXPECT_EQ(scaled, 2 * net.depth() + 4);
    return pipe;
}

// MAR's cosine schedule divides by sqrt(alpha_bar) ~ 1e-3 at its first step: with a random
// head (no trained eps) the samples reach 1e7 and the cache's effect drowns in their rounding.
// Constant small betas keep them O(1), so the tests can see what the cache changes.
DiffusionSampler mild_schedule(int64_t steps) {
    return DiffusionSampler(
        DiffusionSchedule::from_betas(std::vector<double>(size_t(steps), 0.02)));
}

// A head's inputs for N rows: the conditions of both CFG halves (2N x 32, from the global
// generator) and the start and per-step noise drawn from `seed`.
struct HeadInputs {
    at::Tensor z, start, noise;
};

HeadInputs head_inputs(const SimpleMlpAdaLNImpl& net, const DiffusionSampler& diffusion, int64_t N,
                       uint64_t seed) {
    const int64_t C = net.in_channels(), S = diffusion.schedule().num_steps();
    HeadInputs in{at::randn({2 * N, 32}), at::empty({N, C}), at::empty({S, 2 * N, C})};
    DiffusionSampler::draw_noise(in.start, in.noise, seeded_generator(at::kCPU, seed));
    return in;
}

// The released code's rule, step by step: per block a dict of kept tensors, rows matched by
// taking the first ones or repeating them twice. Uses the modules' public pieces only.
at::Tensor reference_sample(const SimpleMlpAdaLNImpl& net, const DiffusionSchedule& s,
                            const at::Tensor& z, const at::Tensor& cfg_scale, double temperature,
                            const at::Tensor& start, const at::Tensor& step_noise,
                            int64_t cfg_period, int64_t mlp_period) {
    const bool guided = cfg_scale.defined();
    const int64_t N = guided ? z.size(0) / 2 : z.size(0), C = net.in_channels();
    const int64_t S = s.num_steps(), depth = net.depth();
    const auto c_emb = net.embed_condition(z);
    std::map<int64_t, at::Tensor> kept_mlp, kept_delta;
    at::Tensor cfg_delta;
    auto fit = [](const at::Tensor& t, int64_t rows) {
        if (t.size(0) > rows) return t.narrow(0, 0, rows);
        if (t.size(0) < rows) return at::cat({t, t});
        return t;
    };
    at::Tensor x = start;
    for (int64_t i = S - 1; i >= 0; --i) {
        const bool refresh = i == S - 1 || i % mlp_period == 0;
        const bool warm = i > 0.9 * double(S);
        const bool both = !guided || cfg_period <= 0 || i == S - 1 || i % cfg_period == 0;
        const at::Tensor input = guided && both ? at::cat({x, x}) : x;
        const int64_t rows = input.size(0);
        const auto t_emb =
            net.time_embed->forward(at::full({1}, s.timestep_map[size_t(i)], at::kLong));
        const auto y = (t_emb + c_emb).narrow(0, 0, rows);
        at::Tensor h = at::linear(input, net.input_proj->weight, net.input_proj->bias);
        for (int64_t b = 0; b < depth; ++b) {
            const auto& blk = net.block(b);
            const bool middle = b >= 1 && b <= 4;
            if (middle && !refresh) {
                h = h + fit(kept_delta[b], rows);
                continue;
            }
            const auto mod = blk.modulation(y);  // shift, 1 + scale, gate
            at::Tensor m;
            if (refresh || warm) {
                const auto hn = apply_layer_norm(blk.in_ln, h) * mod[1] + mod[0];
                m = at::linear(at::silu(at::linear(hn, blk.fc1()->weight, blk.fc1()->bias)),
                               blk.fc2()->weight, blk.fc2()->bias);
                kept_mlp[b] = m;
            } else {
                m = fit(kept_mlp[b], rows);
            }
            const auto out = h + mod[2] * m;
            if (middle) kept_delta[b] = out - h;
            h = out;
        }
        const auto model_out = net.final_layer->forward(h, y);
        at::Tensor eps = model_out.narrow(1, 0, C), var = model_out.narrow(1, C, C);
        if (guided) {
            at::Tensor cond, uncond;
            if (both) {
                cond = eps.narrow(0, 0, N);
                uncond = eps.narrow(0, N, N);
                cfg_delta = cond - uncond;
                var = var.narrow(0, 0, N);
            } else {
                cond = eps;
                uncond = cond - cfg_delta;
            }
            eps = uncond + cfg_scale * (cond - uncond);
        }
        const auto f = [](double v) { return static_cast<float>(v); };
        const auto frac = (var + 1) / 2;
        const auto log_var = frac * f(s.log_betas[size_t(i)]) +
                             (1 - frac) * f(s.posterior_log_variance_clipped[size_t(i)]);
        const auto x0 = f(s.sqrt_recip_alphas_cumprod[size_t(i)]) * x -
                        f(s.sqrt_recipm1_alphas_cumprod[size_t(i)]) * eps;
        const auto mean =
            f(s.posterior_mean_coef1[size_t(i)]) * x0 + f(s.posterior_mean_coef2[size_t(i)]) * x;
        x = i == 0 ? mean
                   : mean + at::exp(0.5 * log_var) * step_noise[S - 1 - i].narrow(0, 0, N) *
                                f(temperature);
    }
    return x;
}

double rel_diff(const at::Tensor& a, const at::Tensor& b) {
    return ((a - b).norm() / b.norm()).item<double>();
}

}  // namespace

TEST(HeadMlpCache, StepSchedule) {
    std::map<HeadMlpStep, int> count;
    for (int64_t i = 0; i < 100; ++i) ++count[DiffusionSampler::head_mlp_step(i, 100, 7)];
    // Refreshes: 99 and the 15 multiples of 7 in [0, 98]; warm-up: 92..97 (i > 90, not 91/98).
    EXPECT_EQ(count[HeadMlpStep::Refresh], 16);
    EXPECT_EQ(count[HeadMlpStep::Warmup], 6);
    EXPECT_EQ(count[HeadMlpStep::Reuse], 78);
    EXPECT_EQ(count[HeadMlpStep::Off], 0);
    EXPECT_EQ(DiffusionSampler::head_mlp_step(92, 100, 7), HeadMlpStep::Warmup);
    EXPECT_EQ(DiffusionSampler::head_mlp_step(90, 100, 7), HeadMlpStep::Reuse);
    EXPECT_EQ(DiffusionSampler::head_mlp_step(91, 100, 7), HeadMlpStep::Refresh);
    EXPECT_EQ(DiffusionSampler::head_mlp_step(5, 100, 0), HeadMlpStep::Off);
    for (int64_t i = 0; i < 10; ++i)
        EXPECT_EQ(DiffusionSampler::head_mlp_step(i, 10, 1), HeadMlpStep::Refresh);
    EXPECT_FALSE(DiffusionSampler::head_mlp_skips_block(0));
    for (int64_t b = 1; b <= 4; ++b) EXPECT_TRUE(DiffusionSampler::head_mlp_skips_block(b));
    EXPECT_FALSE(DiffusionSampler::head_mlp_skips_block(5));
}

TEST(HeadMlpCache, OffAndEveryStepRefreshingAreExactAndCachedMatchesTheReleasedRule) {
    auto pipe = strong_head_mar(head_config(), 4);
    c10::InferenceMode guard;
    const auto& net = *pipe.sampler().transformer()->diffloss->net;
    const DiffusionSampler diffusion = mild_schedule(50);
    const int64_t N = 3;
    ASSERT_EQ(diffusion.schedule().num_steps(), 50);
    const HeadInputs in = head_inputs(net, diffusion, N, 5);
    const auto &z = in.z, &start = in.start, &noise = in.noise;
    const auto cfg = at::full({}, 2.5);
    for (bool guided : {true, false}) {
        const auto zz = guided ? z : z.narrow(0, 0, N);
        const auto scale = guided ? cfg : at::Tensor();
        for (int64_t cfg_period : {0, 7, 3}) {
            SCOPED_TRACE(std::string(guided ? "guided" : "unguided") + ", cfg period " +
                         std::to_string(cfg_period));
            auto run = [&](int64_t mlp, HeadPath path = HeadPath::Auto) {
                return diffusion.sample_with_noise(net, zz, scale, 0.9, start, noise, {},
                                                   cfg_period, path, mlp);
            };
            const auto off = run(0);
            EXPECT_TRUE(at::equal(off, diffusion.sample_with_noise(net, zz, scale, 0.9, start,
                                                                   noise, {}, cfg_period)));
            // Period 1: every step refreshes, the same ops as without the cache.
            EXPECT_TRUE(at::equal(run(1), off));
            const auto cached = run(7);
            const double moved = rel_diff(cached, off);
            std::printf("[head MLP cache] relative change of the samples: %.3g\n", moved);
            EXPECT_GT(moved, 1e-3) << "the cache changed nothing: is it used?";
            EXPECT_LT(moved, 1.0);
            // The released code's rule, step by step.
            const auto ref = reference_sample(net, diffusion.schedule(), zz, scale, 0.9, start,
                                              noise, cfg_period, 7);
            EXPECT_LT(rel_diff(cached, ref), 1e-5);
            EXPECT_LT(rel_diff(cached, ref), 1e-3 * moved);
            // A cache period of 5 lands on other steps than 7.
            EXPECT_GT(rel_diff(run(5), cached), 1e-4);
            const auto ref5 = reference_sample(net, diffusion.schedule(), zz, scale, 0.9, start,
                                               noise, cfg_period, 5);
            EXPECT_LT(rel_diff(run(5), ref5), 1e-5);
        }
    }
}

// Heads with fewer than 5 blocks: the skipped set is what of 1..4 exists (released code).
TEST(HeadMlpCache, ShallowHeadsMatchTheReleasedRule) {
    for (int64_t depth : {1, 2, 3}) {
        SCOPED_TRACE("depth " + std::to_string(depth));
        auto pipe = strong_head_mar(head_config(depth, "30"), 6);
        c10::InferenceMode guard;
        const auto& net = *pipe.sampler().transformer()->diffloss->net;
        const DiffusionSampler diffusion = mild_schedule(30);
        const int64_t N = 2;
        const HeadInputs in = head_inputs(net, diffusion, N, 8);
        const auto &z = in.z, &start = in.start, &noise = in.noise;
        const auto cfg = at::full({}, 3.0);
        const auto cached =
            diffusion.sample_with_noise(net, z, cfg, 1.0, start, noise, {}, 7, HeadPath::Auto, 4);
        const auto ref =
            reference_sample(net, diffusion.schedule(), z, cfg, 1.0, start, noise, 7, 4);
        EXPECT_LT(rel_diff(cached, ref), 1e-5);
        if (depth > 1) {
            const auto off = diffusion.sample_with_noise(net, z, cfg, 1.0, start, noise, {}, 7);
            EXPECT_LT(rel_diff(cached, ref), 1e-3 * rel_diff(cached, off));
        }
    }
}

// The fused loop (kernels/diffloss_ops.h: fc2 keeping the terms, the replayed blocks, the
// one-kernel cached step) on its LibTorch references equals the module path bit for bit, with
// and without CFG and the head condition cache, for heads deeper and shallower than the
// skipped range; on the CPU Auto keeps the module path and the CUDA kernels are refused.
TEST(HeadMlpCache, FusedReferenceLoopEqualsTheModulePathExactly) {
    for (int64_t depth : {6, 2}) {
        auto pipe = strong_head_mar(head_config(depth, "30"), 4);
        c10::InferenceMode guard;
        const auto& net = *pipe.sampler().transformer()->diffloss->net;
        const DiffusionSampler diffusion = mild_schedule(30);
        const int64_t N = 3;
        const HeadInputs in = head_inputs(net, diffusion, N, 9);
        const auto &z = in.z, &start = in.start, &noise = in.noise;
        EXPECT_TRUE(diffusion.uses_fused_head(net, z, true, HeadPath::FusedReference, nullptr, 7));
        std::string why;
        EXPECT_FALSE(diffusion.uses_fused_head(net, z, true, HeadPath::Auto, &why, 7));
        EXPECT_FALSE(why.empty());
        EXPECT_THROW(diffusion.uses_fused_head(net, z, true, HeadPath::FusedCuda, nullptr, 7),
                     c10::Error);
        for (bool guided : {true, false})
            for (int64_t cfg_period : {0, 7, 3})
                for (int64_t mlp : {7, 4, 1}) {
                    SCOPED_TRACE("depth " + std::to_string(depth) + (guided ? " guided" : "") +
                                 " cfg period " + std::to_string(cfg_period) + " mlp period " +
                                 std::to_string(mlp));
                    const auto zz = guided ? z : z.narrow(0, 0, N);
                    const auto scale = guided ? at::full({}, 2.5) : at::Tensor();
                    auto run = [&](HeadPath path) {
                        return diffusion.sample_with_noise(net, zz, scale, 0.9, start, noise, {},
                                                           cfg_period, path, mlp);
                    };
                    const auto modules = run(HeadPath::Modules);
                    EXPECT_TRUE(at::equal(run(HeadPath::FusedReference), modules));
                    if (mlp == 7 && depth == 6) {  // the cache is in use
                        const auto off = diffusion.sample_with_noise(
                            net, zz, scale, 0.9, start, noise, {}, cfg_period, HeadPath::Modules);
                        EXPECT_GT(rel_diff(modules, off), 1e-3);
                    }
                }
    }
}

// Above the fused kernels' rows (here 20) a step's modulations are computed by need (the
// conditional rows alone where the head CFG cache skips the other half; nothing, or the gate
// alone, for the blocks the MLP cache replays): still the released rule's samples, still the
// same bits on the module path and the fused reference loop, and the samples of every
// modulation in full (ExecPolicy::mar_full_modulations, VARSCOPE_MAR_FULL_MODULATIONS=1) up to
// rounding.
TEST(HeadMlpCache, ModulationsByNeedAtManyRows) {
    auto pipe = strong_head_mar(head_config(), 4);
    c10::InferenceMode guard;
    const auto& net = *pipe.sampler().transformer()->diffloss->net;
    const DiffusionSampler diffusion = mild_schedule(50);
    const int64_t N = 10;
    ASSERT_GT(2 * N, diffusion.exec_policy().mar_fused_head_max_rows(net.width()));
    ExecPolicy all_mods;
    all_mods.mar_full_modulations = true;
    const DiffusionSampler full_mods(diffusion.schedule(), all_mods);
    const HeadInputs in = head_inputs(net, diffusion, N, 11);
    const auto &z = in.z, &start = in.start, &noise = in.noise;
    const auto cfg = at::full({}, 2.5);
    for (int64_t cfg_period : {0, 7, 3}) {
        SCOPED_TRACE("cfg period " + std::to_string(cfg_period));
        auto run = [&](HeadPath path, int64_t mlp = 7) {
            return diffusion.sample_with_noise(net, z, cfg, 0.9, start, noise, {}, cfg_period, path,
                                               mlp);
        };
        const auto modules = run(HeadPath::Modules);
        EXPECT_TRUE(at::equal(run(HeadPath::FusedReference), modules));
        const double moved = rel_diff(modules, run(HeadPath::Modules, 0));
        EXPECT_GT(moved, 1e-3) << "the cache changed nothing: is it used?";
        const auto ref =
            reference_sample(net, diffusion.schedule(), z, cfg, 0.9, start, noise, cfg_period, 7);
        EXPECT_LT(rel_diff(modules, ref), 1e-5);
        EXPECT_LT(rel_diff(modules, ref), 1e-3 * moved);
        const auto full = full_mods.sample_with_noise(net, z, cfg, 0.9, start, noise, {},
                                                      cfg_period, HeadPath::Modules, 7);
        EXPECT_LT(rel_diff(full, modules), 1e-5);
    }
}

// SimpleMlpAdaLN::modulations by need: All as in full (the same op), Gate the gate alone (rows
// of the same weight), None nothing; the final layer's always; one need per block.
TEST(HeadMlpCache, ModulationsByNeed) {
    auto pipe = strong_head_mar(head_config(), 4);
    c10::InferenceMode guard;
    const auto& net = *pipe.sampler().transformer()->diffloss->net;
    const auto y = at::randn({7, net.width()});
    const auto full = net.modulations(y);
    using N = ModulationNeed;
    const std::vector<N> needs{N::All, N::Gate, N::None, N::All, N::Gate, N::None};
    const auto m = net.modulations(y, needs);
    for (size_t b = 0; b < needs.size(); ++b) {
        SCOPED_TRACE("block " + std::to_string(b));
        if (needs[b] == N::All) {
            EXPECT_TRUE(at::equal(m.shift[b], full.shift[b]));
            EXPECT_TRUE(at::equal(m.scale1[b], full.scale1[b]));
            EXPECT_TRUE(at::equal(m.gate[b], full.gate[b]));
            continue;
        }
        EXPECT_FALSE(m.shift[b].defined());
        EXPECT_FALSE(m.scale1[b].defined());
        if (needs[b] == N::None) {
            EXPECT_FALSE(m.gate[b].defined());
        } else {
            ASSERT_TRUE(m.gate[b].defined());
            EXPECT_TRUE(at::allclose(m.gate[b], full.gate[b], 1e-5, 1e-6));
        }
    }
    EXPECT_TRUE(at::equal(m.final_shift, full.final_shift));
    EXPECT_TRUE(at::equal(m.final_scale1, full.final_scale1));
    const auto rows = m.rows(2, 3);  // undefined entries stay undefined
    EXPECT_FALSE(rows.gate[2].defined());
    EXPECT_EQ(rows.gate[1].size(0), 3);
    EXPECT_THROW(net.modulations(y, {N::All}), c10::Error);
}

// The replayed blocks' reference: kept rows cut to the step's or repeated twice (the released
// code's fit), the gated term rounded as the module path's two ops; bad kept tensors refused.
TEST(HeadMlpCache, ReplayedBlocksReference) {
    namespace vk = varscope::kernels;
    const auto h = at::randn({4, 8});
    const auto gate = at::randn({4, 8});
    const auto mlp2 = at::randn({2, 8});     // kept at a step with half the rows
    const auto change6 = at::randn({6, 8});  // kept at a step with more rows
    const auto out = vk::diff_apply_kept(h, {{mlp2, gate}, {change6, {}}}, vk::KernelPath::Auto);
    const auto expect = (h + gate * at::cat({mlp2, mlp2})) + change6.narrow(0, 0, 4);
    EXPECT_TRUE(at::equal(out, expect));
    EXPECT_THROW(vk::diff_apply_kept(h, {{at::randn({3, 8}), {}}}), c10::Error);  // 3 vs 4 rows
    EXPECT_THROW(vk::diff_apply_kept(h, {{at::randn({4, 6}), {}}}), c10::Error);  // width
    EXPECT_THROW(vk::diff_apply_kept(h, {{at::randn({4, 8}), {}}}, vk::KernelPath::Cuda),
                 c10::Error);  // CPU tensors: no CUDA kernel
    std::vector<vk::DiffKeptBlock> many(17, {at::randn({4, 8}), {}});
    EXPECT_THROW(vk::diff_apply_kept(h, many), c10::Error);
}

// The drift of the head caches' kept tensors (HeadCacheStats): counted at each cache's refresh
// steps, the same on the module path and the fused reference loop, and reported per decoding
// step by the head-cache hook to its probe ("lazymar_head_cache") without changing the tokens.
TEST(HeadMlpCache, DriftIsMeasuredAtRefreshesAndProbedPerStep) {
    auto pipe = strong_head_mar(head_config(6, "50"), 4);
    {
        c10::InferenceMode guard;
        const auto& net = *pipe.sampler().transformer()->diffloss->net;
        const DiffusionSampler diffusion = mild_schedule(50);
        const int64_t N = 3;
        const HeadInputs in = head_inputs(net, diffusion, N, 3);
        const auto &z = in.z, &start = in.start, &noise = in.noise;
        const auto cfg = at::full({}, 2.5);
        HeadCacheStats mod, ref;
        const auto a = diffusion.sample_with_noise(net, z, cfg, 1.0, start, noise, {}, 7,
                                                   HeadPath::Modules, 7, &mod);
        const auto b = diffusion.sample_with_noise(net, z, cfg, 1.0, start, noise, {}, 7,
                                                   HeadPath::FusedReference, 7, &ref);
        EXPECT_TRUE(at::equal(a, b));
        // Period 7 over 50 steps: 49 and 42, 35, ..., 0 refresh (8); the first keeps only.
        EXPECT_EQ(mod.mlp_refreshes, 8);
        EXPECT_EQ(mod.cfg_refreshes, 8);
        EXPECT_EQ(mod.mlp_drift_count, 7);
        EXPECT_EQ(mod.cfg_drift_count, 7);
        EXPECT_GT(mod.mlp_drift(), 1e-4);
        EXPECT_LT(mod.mlp_drift(), 10.0);
        EXPECT_GT(mod.cfg_drift(), 1e-4);
        EXPECT_DOUBLE_EQ(ref.mlp_drift(), mod.mlp_drift());
        EXPECT_DOUBLE_EQ(ref.cfg_drift(), mod.cfg_drift());
        EXPECT_EQ(ref.mlp_refreshes, mod.mlp_refreshes);
        // Refreshing every step: nothing is reused, so every refresh sees the previous step's
        // terms; measured, but the samples equal the uncached ones.
        HeadCacheStats every;
        const auto c = diffusion.sample_with_noise(net, z, cfg, 1.0, start, noise, {}, 0,
                                                   HeadPath::Modules, 1, &every);
        EXPECT_EQ(every.mlp_refreshes, 50);
        EXPECT_EQ(every.cfg_refreshes, 0);  // the condition cache is off
        EXPECT_TRUE(at::equal(c, diffusion.sample_with_noise(net, z, cfg, 1.0, start, noise, {}, 0,
                                                             HeadPath::Modules)));
    }
    auto o = varscope::testing::mar_options({1, 2}, 9, 4, 3.0);
    ProbeRecorder probe;
    LazyMarHeadCache probed_cache(7, 7, &probe), plain_cache(7, 7);
    EXPECT_TRUE(probed_cache.wants_head_cache_stats());
    EXPECT_FALSE(plain_cache.wants_head_cache_stats());
    const auto probed = pipe.generate(o, &probed_cache, &probe);
    EXPECT_TRUE(at::equal(probed.tokens, pipe.generate(o, &plain_cache).tokens));
    const auto recs = probe.accel(probe_kinds::kLazyMarHeadCache);
    ASSERT_EQ(recs.size(), 4u);  // every step decodes
    for (size_t i = 0; i < recs.size(); ++i) {
        EXPECT_EQ(recs[i].method, "lazymar");
        EXPECT_EQ(recs[i].scale, int64_t(i));
        EXPECT_EQ(recs[i].values.at("mlp_refreshes"), 8.0);
        EXPECT_EQ(recs[i].values.at("cfg_refreshes"), 8.0);
        EXPECT_TRUE(std::isfinite(recs[i].values.at("mlp_drift")));
        EXPECT_GT(recs[i].values.at("mlp_drift"), 0.0);
        EXPECT_GT(recs[i].values.at("cfg_drift"), 0.0);
    }
    // The hook makes the records, not the loop: a probe given only to the hook gets them.
    ProbeRecorder hook_only;
    LazyMarHeadCache hook_probed(7, 7, &hook_only);
    pipe.generate(o, &hook_probed);
    EXPECT_EQ(hook_only.accel(probe_kinds::kLazyMarHeadCache).size(), 4u);
    // LazyMAR's hooks include the head caches (here alone; the condition half needs the
    // condition cache, so only the MLP cache refreshes).
    LazyMarConfig lc;
    lc.enabled = true;
    lc.token_cache = lc.condition_cache = false;
    lc.head_cfg_period = lc.head_mlp_period = 7;
    ProbeRecorder lazy_probe;
    const auto lazy = make_lazymar(lc, pipe.config(), &lazy_probe);
    pipe.generate(o, lazy.get(), &lazy_probe);
    const auto lazy_recs = lazy_probe.accel(probe_kinds::kLazyMarHeadCache);
    ASSERT_EQ(lazy_recs.size(), 4u);
    EXPECT_EQ(lazy_recs[0].values.at("mlp_refreshes"), 8.0);
    EXPECT_EQ(lazy_recs[0].values.at("cfg_refreshes"), 0.0);
    // No head caches: no records.
    ProbeRecorder none;
    LazyMarHeadCache off(0, 0, &none);
    EXPECT_FALSE(off.wants_head_cache_stats());
    pipe.generate(o, &off, &none);
    EXPECT_TRUE(none.accel(probe_kinds::kLazyMarHeadCache).empty());
}

// Through the MAR loop: hook off = baseline exactly, period 1 = baseline exactly, period 7
// close to it; LazyMarConfig carries it (JSON, range) and LazyMAR's hooks answer it.
TEST(HeadMlpCache, MarLoopOptionAndConfig) {
    auto pipe = strong_head_mar(head_config(6, "20"), 4);
    auto o = varscope::testing::mar_options({1, 2}, 9, 4, 3.0);
    const auto base = pipe.generate(o);
    LazyMarHeadCache off(0, 0), every(0, 1), both7(7, 7);
    EXPECT_TRUE(at::equal(pipe.generate(o, &off).tokens, base.tokens));
    EXPECT_TRUE(at::equal(pipe.generate(o, &every).tokens, base.tokens));
    const double rel = rel_diff(pipe.generate(o, &both7).tokens, base.tokens);
    EXPECT_GT(rel, 0.0);
    EXPECT_LT(rel, 2.0);

    LazyMarConfig lc;
    EXPECT_EQ(lc.head_mlp_period, 0);
    lc.head_mlp_period = 7;
    EXPECT_EQ(LazyMarHeadCache::from_config(lc).head_mlp_cache_period(), 0);  // method off
    EXPECT_EQ(make_lazymar(lc, pipe.config(), nullptr), nullptr);
    lc.enabled = true;
    EXPECT_EQ(LazyMarHeadCache::from_config(lc).head_mlp_cache_period(), 7);
    lc.condition_cache = false;  // independent of the condition cache
    EXPECT_EQ(LazyMarHeadCache::from_config(lc).head_mlp_cache_period(), 7);
    lc.token_cache = false;  // the head cache alone still makes LazyMAR's hooks
    EXPECT_EQ(make_lazymar(lc, pipe.config(), nullptr)->head_mlp_cache_period(), 7);
    EXPECT_THROW(LazyMarHeadCache(0, -1), std::invalid_argument);
    EXPECT_EQ(LazyMarConfig::from_json(lc.to_json()).head_mlp_period, 7);
    EXPECT_EQ(LazyMarConfig::from_json({{"head_mlp_period", 3}}).head_mlp_period, 3);
    EXPECT_ANY_THROW(LazyMarConfig::from_json({{"head_mlp_period", -1}}));
    bool listed = false;
    for (const auto& p : LazyMarConfig::spec().params) listed |= p.key == "head_mlp_period";
    EXPECT_TRUE(listed);
}

// The counter (reading the periods LazyMAR's hooks answer) counts what the plan says; by hand
// for one setting.
TEST(HeadMlpCache, CounterCountsTheHeadMlpCache) {
    const MarConfig c = head_config(6, "20");
    auto pipe = MarPipeline::random(c, 4, {});
    const int64_t steps = 20;
    auto o = varscope::testing::mar_options({1, 2}, 9, 4, 1.0);  // guidance set below
    for (double guidance : {1.0, 3.0}) {
        for (int64_t cfg_period : {0, 7}) {
            for (int64_t mlp_period : {0, 1, 3, 7}) {
                SCOPED_TRACE("guidance " + std::to_string(guidance) + " cfg period " +
                             std::to_string(cfg_period) + " mlp period " +
                             std::to_string(mlp_period));
                LazyMarConfig lc;
                lc.enabled = true;
                lc.token_cache = false;
                lc.condition_cache = true;
                lc.start_step = 1;
                lc.period = 2;
                lc.head_cfg_period = cfg_period;
                lc.head_mlp_period = mlp_period;
                o.cfg = guidance;
                auto counter = std::make_shared<MarFlopCounter>(c, steps);
                auto chain = chain_with_counter(counter, make_lazymar(lc, c, nullptr));
                EXPECT_EQ(chain->head_mlp_cache_period(), mlp_period);
                const int64_t cfg_cache = guidance != 1.0 ? chain->head_cfg_cache_period() : 0;
                const auto r = pipe.generate(o, chain.get());
                const auto counted = counter->flops(r.attention_flops);
                const auto planned = lazymar_planned_flops(c, lc, 4, 2, guidance, steps);
                EXPECT_DOUBLE_EQ(planned.diffusion, counted.diffusion);
                EXPECT_DOUBLE_EQ(planned.linear, counted.linear);
                const int64_t tokens = 2 * c.seq_len();
                if (mlp_period <= 1) {  // period 1 refreshes every step: the uncached count
                    EXPECT_DOUBLE_EQ(counted.diffusion, mar_head_flops(c, tokens, guidance != 1.0,
                                                                       steps, cfg_cache, 0));
                }
                if (mlp_period == 7 && cfg_period == 0 && guidance == 3.0) {
                    // 20 steps, period 7: refreshes 19, 14, 7, 0; warm-up none (i > 18 is 19);
                    // 16 reusing steps run blocks 0 and 5 at 3 w^2 and skip 1..4.
                    const double w = 32, D = 4, cz = 32;
                    const double io = D * w + 2 * w * w + 2 * w * D;
                    const double full = io + 6 * 5 * w * w, reuse = io + 2 * 3 * w * w;
                    const double expect =
                        2.0 * (2.0 * tokens * (4 * full + 16 * reuse) + 2.0 * tokens * cz * w);
                    EXPECT_DOUBLE_EQ(counted.diffusion, expect);
                    EXPECT_LT(counted.diffusion,
                              0.5 * mar_head_flops(c, tokens, true, steps, 0, 0));
                }
            }
        }
    }
}
