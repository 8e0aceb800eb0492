// LazyMAR on a tiny random MAR: exactly the baseline when off or when every step refreshes;
// the refresh schedule, the positions each block computes, the forced positions and the
// condition cache's residual; both caches together; probes and FLOP accounting.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>

#include "core/accel/lazymar.h"
#include "core/accel/mar_accel_config.h"
#include "core/accel/mar_flops.h"
#include "core/mar_pipeline.h"
#include "tests/tiny_mar.h"

using namespace varscope;

namespace {

// 4x4 tokens, a 4-slot buffer, 2 encoder and 4 decoder blocks: milliseconds per run on a CPU.
MarConfig tiny_mar_config() {
    MarConfig c = varscope::testing::tiny_cpu_mar_config();
    c.encoder_depth = 2;
    c.decoder_depth = 4;
    c.diffloss_d = 1;
    c.num_sampling_steps = "8";
    return c;
}

MarPipeline tiny_mar(uint64_t seed = 3) {
    return MarPipeline::random(tiny_mar_config(), seed, {});
}

MarSampleOptions options(double cfg, int64_t num_iter = 8) {
    return varscope::testing::mar_options({1, 7}, 11, num_iter, cfg);
}

LazyMarConfig lazy(bool token, bool condition) {
    LazyMarConfig c;
    c.enabled = true;
    c.token_cache = token;
    c.condition_cache = condition;
    c.start_step = 2;
    c.period = 3;  // refresh at 0, 1, 2, 5; cached at 3, 4, 6, 7
    c.keep_ratio = 0.25;
    c.similarity_layer = 1;
    return c;
}

bool same(const at::Tensor& a, const at::Tensor& b) {
    return at::equal(a, b);
}

// Tokens of the positions decoded in steps [0, last] of a run.
at::Tensor tokens_until(const MarSampleResult& r, int64_t last) {
    std::vector<at::Tensor> parts;
    for (int64_t s = 0; s <= last; ++s)
        parts.push_back(
            r.tokens.gather(1, r.decoded[s].unsqueeze(-1).expand({-1, -1, r.tokens.size(2)})));
    return at::cat(parts, 1);
}

}  // namespace

TEST(LazyMar, ConfigDefaultsRoundTripAndErrors) {
    const auto d = LazyMarConfig::from_json(nlohmann::json::object());
    EXPECT_TRUE(d.enabled);  // an object given means on
    EXPECT_TRUE(d.token_cache && d.condition_cache && d.force_decoded && d.encoder_cache);
    EXPECT_DOUBLE_EQ(d.keep_ratio, 0.16);
    EXPECT_EQ(d.similarity_layer, 3);
    auto c = lazy(true, false);
    const auto back = LazyMarConfig::from_json(c.to_json());
    EXPECT_EQ(back.to_json(), c.to_json());
    try {
        LazyMarConfig::from_json({{"keep_ratio", 1.5}});
        FAIL() << "no error";
    } catch (const AccelConfigError& e) {
        EXPECT_STREQ(e.what(), "lazymar.keep_ratio: must be in [0, 1], got 1.5");
    }
    EXPECT_THROW(LazyMarConfig::from_json({{"tau", 9}}), AccelConfigError);
    EXPECT_THROW(MarAccelConfig::from_json({{"fastvar", nlohmann::json::object()}}),
                 AccelConfigError);
    EXPECT_THROW(MarAccelConfig::from_argument("no-such-preset"), AccelConfigError);
    for (const char* p :
         {"baseline", "lazymar", "lazymar-token", "lazymar-condition", "lazymar-released"})
        EXPECT_NO_THROW(MarAccelConfig::from_argument(p)) << p;
    // The released code's settings: both caches and both DiffLoss-head caches at 7.
    const auto released = MarAccelConfig::from_argument("lazymar-released").lazymar;
    EXPECT_TRUE(released.enabled && released.token_cache && released.condition_cache);
    EXPECT_EQ(released.head_cfg_period, 7);
    EXPECT_EQ(released.head_mlp_period, 7);
    EXPECT_EQ(MarAccelConfig::from_argument("lazymar").lazymar.head_mlp_period, 0);
    EXPECT_EQ(MarAccelConfig::from_argument("lazymar").summary(),
              "LazyMAR (token + condition cache)");
    EXPECT_EQ(MarAccelConfig::from_argument("lazymar-released").summary(),
              "LazyMAR (token + condition cache + head caches)");
    EXPECT_EQ(MarAccelConfig::from_argument("lazymar-token").summary(), "LazyMAR (token cache)");
    // The head caches alone are an accelerated run too: hooks that carry only them (the
    // condition half needs the condition cache, so only the MLP cache is on here).
    const auto head_only = MarAccelConfig::from_json({{"lazymar",
                                                       {{"enabled", true},
                                                        {"token_cache", false},
                                                        {"condition_cache", false},
                                                        {"head_mlp_period", 7},
                                                        {"head_cfg_period", 5}}}});
    EXPECT_TRUE(head_only.any_enabled());
    EXPECT_EQ(head_only.summary(), "LazyMAR (head caches)");
    const auto head_hooks = build_mar_accelerators(head_only, tiny_mar_config(), nullptr);
    ASSERT_NE(head_hooks, nullptr);
    EXPECT_EQ(head_hooks->head_mlp_cache_period(), 7);
    EXPECT_EQ(head_hooks->head_cfg_cache_period(), 0);
    EXPECT_TRUE(head_hooks->graph_signature().has_value());
    const auto token = MarAccelConfig::from_argument("lazymar-token");
    EXPECT_TRUE(token.lazymar.token_cache && !token.lazymar.condition_cache);
    EXPECT_FALSE(MarAccelConfig::from_argument("baseline").any_enabled());
    auto bad = lazy(true, true);
    bad.similarity_layer = 4;  // the tiny model has 4 decoder blocks
    EXPECT_THROW(make_lazymar(bad, tiny_mar_config(), nullptr), AccelConfigError);
    // The slider's model bound (ParamSpec::counts) is the largest block this check accepts.
    ModelCounts counts;
    counts.decoder_blocks = tiny_mar_config().decoder_depth;
    counts.steps = 16;
    for (const auto& p : LazyMarConfig::spec().params) {
        if (p.key == "similarity_layer") {
            auto top = lazy(true, true);
            top.similarity_layer = int64_t(model_max(p, counts));
            EXPECT_EQ(top.similarity_layer, 3);
            EXPECT_NO_THROW(make_lazymar(top, tiny_mar_config(), nullptr));
        }
        if (p.key == "start_step") {
            EXPECT_EQ(model_max(p, counts), 15);  // the last step
        }
        if (p.key == "period") {
            EXPECT_EQ(model_max(p, counts), 16);
        }
    }
}

TEST(LazyMar, PaperSchedules) {
    LazyMarConfig c;
    auto s64 = LazyMarSchedule::resolve(c, 64), s32 = LazyMarSchedule::resolve(c, 32);
    EXPECT_EQ(s64.start, 5);
    EXPECT_EQ(s64.period, 9);
    EXPECT_EQ(s32.start, 4);
    EXPECT_EQ(s32.period, 5);
    std::vector<int64_t> refresh;
    for (int64_t s = 0; s < 64; ++s)
        if (s64.refresh(s)) refresh.push_back(s);
    EXPECT_EQ(refresh, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 14, 23, 32, 41, 50, 59}));
    c.start_step = 2;
    c.period = 3;
    EXPECT_EQ(LazyMarSchedule::resolve(c, 64).period, 3);
}

TEST(LazyMar, SelectionKeepsForcedAndLeastSimilarPositions) {
    // Row 0: positions 5 and 2 least similar; 7 forced. Row 1: 0 and 1 least similar; 3 forced.
    auto sim = at::tensor({0.9, 0.8, 0.1, 0.95, 0.7, 0.0, 0.99, 0.97,  //
                           -0.5, -0.4, 0.9, 0.99, 0.9, 0.9, 0.9, 0.9})
                   .view({2, 8});
    auto forced = at::tensor({7, 3}, at::kLong).view({2, 1});
    auto rows = lazymar_select_positions(sim, forced, 3);
    EXPECT_TRUE(same(rows, at::tensor({2, 5, 7, 0, 1, 3}, at::kLong).view({2, 3})));
}

TEST(LazyMar, OffOrAlwaysRefreshingIsExactlyTheBaseline) {
    auto pipe = tiny_mar();
    const auto base = pipe.generate(options(3.0));
    EXPECT_EQ(build_mar_accelerators(MarAccelConfig::from_argument("baseline"), pipe.config()),
              nullptr);
    auto off = lazy(true, true);
    off.enabled = false;
    EXPECT_EQ(make_lazymar(off, pipe.config(), nullptr), nullptr);
    // Every step a refresh: the caches are written but never read.
    auto every = lazy(true, true);
    every.start_step = 1;
    every.period = 1;
    auto h = make_lazymar_hooks(every, pipe.config(), nullptr);
    const auto r = pipe.generate(options(3.0), h.chain.get());
    EXPECT_TRUE(same(r.tokens, base.tokens));
    EXPECT_TRUE(h.skipped_unconditional_steps().empty());
    // Cached steps that compute every position (no encoder cache, keep ratio 1) are exact too.
    auto all = lazy(true, false);
    all.encoder_cache = false;
    all.keep_ratio = 1.0;
    auto h2 = make_lazymar_hooks(all, pipe.config(), nullptr);
    EXPECT_TRUE(same(pipe.generate(options(3.0), h2.chain.get()).tokens, base.tokens));
    EXPECT_FALSE(h2.token_stats().at(3).refresh);
}

TEST(LazyMar, TokenCacheBookkeeping) {
    auto pipe = tiny_mar();
    const auto& c = pipe.config();
    const auto base = pipe.generate(options(2.0));
    auto cfg = lazy(true, false);
    auto h = make_lazymar_hooks(cfg, c, nullptr);
    const auto r = pipe.generate(options(2.0), h.chain.get());
    const auto plan = mar_step_plan(c.seq_len(), 8, 2.0, CfgSchedule::Linear);
    const auto& stats = h.token_stats();
    ASSERT_EQ(stats.size(), 8u);
    const int64_t n = c.total_len(), blocks = c.encoder_depth + c.decoder_depth;
    for (int64_t s = 0; s < 8; ++s) {
        const auto& st = stats[s];
        SCOPED_TRACE("step " + std::to_string(s));
        const bool refresh = s <= 2 || s == 5;
        EXPECT_EQ(st.refresh, refresh);
        EXPECT_EQ(st.rows, 4);  // 2 images x 2 CFG branches (no condition cache)
        ASSERT_EQ(int64_t(st.computed.size()), blocks);
        const int64_t known = c.seq_len() - plan[s].masked_before;
        for (int64_t l = 0; l < c.encoder_depth; ++l) {
            EXPECT_EQ(st.total[l], c.buffer_size + known);
            EXPECT_EQ(st.computed[l],
                      refresh ? c.buffer_size + known : c.buffer_size + plan[s - 1].decoded());
        }
        for (int64_t l = 0; l < c.decoder_depth; ++l) {
            const int64_t g = c.encoder_depth + l;
            EXPECT_EQ(st.total[g], n);
            const int64_t forced = plan[s].decoded() + (s > 0 ? plan[s - 1].decoded() : 0);
            const int64_t kept = std::max<int64_t>(std::llround(0.25 * double(n)), forced);
            EXPECT_EQ(st.computed[g], refresh || l <= 1 ? n : std::min(kept, n));
        }
    }
    // Identical to the baseline until the first cached step, different from then on.
    EXPECT_TRUE(same(tokens_until(r, 2), tokens_until(base, 2)));
    EXPECT_FALSE(same(tokens_until(r, 3), tokens_until(base, 3)));
    EXPECT_TRUE(r.tokens.isfinite().all().item<bool>());
}

TEST(LazyMar, ConditionCacheReplaysTheResidual) {
    const auto c = tiny_mar_config();
    auto cfg = lazy(false, true);
    auto h = make_lazymar_hooks(cfg, c, nullptr);
    const int64_t B = 2;
    MarStepContext s0{c, 0, 8, B, true, 2.0, 0, 0, {}, {}, {}, {}, {}, {}, {}, false};
    h.chain->on_step_begin(s0);
    EXPECT_FALSE(h.chain->skip_unconditional(s0));  // refresh step, nothing cached
    const auto x = at::randn({2 * B, c.total_len(), c.decoder_embed_dim});
    h.chain->on_cfg_branches(s0, x);
    MarStepContext s3{c, 3, 8, B, true, 2.0, 0, 0, {}, {}, {}, {}, {}, {}, {}, false};
    h.chain->on_step_begin(s3);
    EXPECT_TRUE(h.chain->skip_unconditional(s3));
    const auto uncond = h.chain->unconditional_rows(s3, x.narrow(0, 0, B));
    EXPECT_TRUE(at::allclose(uncond, x.narrow(0, B, B), 1e-6, 1e-6));
    MarStepContext s5{c, 5, 8, B, true, 2.0, 0, 0, {}, {}, {}, {}, {}, {}, {}, false};
    h.chain->on_step_begin(s5);
    EXPECT_FALSE(h.chain->skip_unconditional(s5));  // period boundary: both branches again
}

TEST(LazyMar, ConditionCacheIsFullCfgAtRefreshSteps) {
    auto pipe = tiny_mar();
    const auto base = pipe.generate(options(3.0));
    auto h = make_lazymar_hooks(lazy(false, true), pipe.config(), nullptr);
    const auto r = pipe.generate(options(3.0), h.chain.get());
    EXPECT_EQ(h.skipped_unconditional_steps(), (std::vector<int64_t>{3, 4, 6, 7}));
    EXPECT_TRUE(same(tokens_until(r, 2), tokens_until(base, 2)));
    EXPECT_FALSE(same(tokens_until(r, 3), tokens_until(base, 3)));
    // Without guidance there is no unconditional branch to skip.
    auto h1 = make_lazymar_hooks(lazy(false, true), pipe.config(), nullptr);
    EXPECT_TRUE(same(pipe.generate(options(1.0), h1.chain.get()).tokens,
                     pipe.generate(options(1.0)).tokens));
    EXPECT_TRUE(h1.skipped_unconditional_steps().empty());
}

TEST(LazyMar, BothCachesComposeAndSaveFlops) {
    auto pipe = tiny_mar();
    const auto& c = pipe.config();
    const int64_t diffusion_steps = pipe.sampler().diffusion().schedule().num_steps();
    auto base_counter = std::make_shared<MarFlopCounter>(c, diffusion_steps);
    auto base_chain = chain_with_counter(base_counter, nullptr);
    const auto base = pipe.generate(options(3.0), base_chain.get());
    // The counter alone changes nothing.
    EXPECT_TRUE(same(base.tokens, pipe.generate(options(3.0)).tokens));

    ProbeRecorder probe;
    auto h = make_lazymar_hooks(lazy(true, true), c, &probe);
    auto counter = std::make_shared<MarFlopCounter>(c, diffusion_steps);
    auto chain = chain_with_counter(counter, h.chain);
    const auto r = pipe.generate(options(3.0), chain.get());
    EXPECT_TRUE(r.tokens.isfinite().all().item<bool>());
    EXPECT_EQ(h.skipped_unconditional_steps(), (std::vector<int64_t>{3, 4, 6, 7}));
    for (int64_t s : {3, 4, 6, 7}) {
        const auto& st = h.token_stats().at(s);
        EXPECT_FALSE(st.refresh);
        EXPECT_EQ(st.rows, 2);  // conditional rows only
        EXPECT_LT(st.computed.back(), st.total.back());
    }
    const auto fb = base_counter->flops(base.attention_flops);
    const auto fl = counter->flops(r.attention_flops);
    EXPECT_DOUBLE_EQ(fl.diffusion, fb.diffusion);  // the head still sees both CFG rows
    EXPECT_LT(fl.linear, 0.75 * fb.linear);
    EXPECT_LT(fl.attention, fb.attention);

    // Baseline linear FLOPs: every block computes all of its rows, 2B rows per step.
    const auto plan = mar_step_plan(c.seq_len(), 8, 3.0, CfgSchedule::Linear);
    double expect = 0;
    for (const auto& p : plan) {
        const int64_t known = c.seq_len() - p.masked_before;
        expect += c.encoder_depth * mar_block_linear_flops(c, 32, 4 * (c.buffer_size + known));
        expect += c.decoder_depth * mar_block_linear_flops(c, 32, 4 * c.total_len());
    }
    EXPECT_DOUBLE_EQ(fb.linear, expect);

    // Probes: one token record per step and block; drift at full steps after the first.
    const int64_t blocks = c.encoder_depth + c.decoder_depth;
    EXPECT_EQ(int64_t(probe.accel(probe_kinds::kLazyMarTokens).size()), 8 * blocks);
    const auto sims = probe.accel(probe_kinds::kLazyMarSimilarity);
    ASSERT_EQ(sims.size(), 4u);
    EXPECT_EQ(sims[0].layer, c.encoder_depth + 1);
    EXPECT_EQ(sims[0].data.size(0), c.total_len());
    // Computed rows at each decision: as many as the similarity record says, ascending, in range.
    const auto rows = probe.accel(probe_kinds::kLazyMarComputedRows);
    ASSERT_EQ(rows.size(), sims.size());
    for (size_t i = 0; i < rows.size(); ++i) {
        EXPECT_EQ(rows[i].scale, sims[i].scale);
        EXPECT_EQ(rows[i].data.numel(), int64_t(sims[i].values.at("computed")));
        EXPECT_LT(rows[i].data.max().item<int64_t>(), c.total_len());
        EXPECT_TRUE(rows[i].data.equal(std::get<0>(rows[i].data.sort())));
    }
    const auto cond = probe.accel(probe_kinds::kLazyMarCondition);
    ASSERT_EQ(cond.size(), 8u);
    EXPECT_EQ(cond[3].values.at("skipped"), 1.0);
    EXPECT_EQ(cond[5].values.at("skipped"), 0.0);
    EXPECT_EQ(cond[5].values.at("age"), 3.0);  // cached at step 2, reused at 3 and 4
    EXPECT_GT(cond[5].values.at("drift"), 0.0);
    EXPECT_EQ(cond[0].values.count("drift"), 0u);
}

TEST(LazyMar, ThresholdComputesEveryDissimilarPosition) {
    auto pipe = tiny_mar();
    auto cfg = lazy(true, false);
    cfg.keep_ratio = 0.0;
    cfg.force_decoded = false;
    cfg.min_similarity = 1.0;  // every position is below a similarity of 1 (up to rounding)
    ProbeRecorder probe;
    auto h = make_lazymar_hooks(cfg, pipe.config(), &probe);
    pipe.generate(options(2.0), h.chain.get());
    for (const auto& rec : probe.accel(probe_kinds::kLazyMarSimilarity)) {
        const int64_t below = rec.data.lt(1.0).sum().item<int64_t>();
        EXPECT_GE(int64_t(rec.values.at("computed")), std::max<int64_t>(1, below));
    }
}

TEST(LazyMar, PlannedFlopsEqualWhatTheRunCounts) {
    auto pipe = tiny_mar();
    const auto& c = pipe.config();
    const int64_t steps = pipe.sampler().diffusion().schedule().num_steps();
    auto off = lazy(true, true);
    off.enabled = false;
    auto no_encoder = lazy(true, false);
    no_encoder.encoder_cache = false;
    auto unforced = lazy(true, true);
    unforced.force_decoded = false;
    for (const auto& cfg :
         {off, lazy(true, true), lazy(true, false), lazy(false, true), no_encoder, unforced}) {
        for (double guidance : {1.0, 3.0}) {
            SCOPED_TRACE(cfg.to_json().dump() + " cfg " + std::to_string(guidance));
            auto counter = std::make_shared<MarFlopCounter>(c, steps);
            auto chain = chain_with_counter(counter, make_lazymar(cfg, c, nullptr));
            const auto r = pipe.generate(options(guidance), chain.get());
            const auto counted = counter->flops(r.attention_flops);
            const auto planned = lazymar_planned_flops(c, cfg, 8, 2, guidance, steps);
            EXPECT_DOUBLE_EQ(planned.linear, counted.linear);
            EXPECT_DOUBLE_EQ(planned.attention, counted.attention);
            EXPECT_DOUBLE_EQ(planned.diffusion, counted.diffusion);
        }
    }
}

// LazyMAR's hooks carry the head condition-cache period (LazyMarHeadCache) and the counter
// reads it from the step context: it must then count the conditional half only on the
// non-refresh diffusion steps, as the plan.
TEST(LazyMar, CounterCountsTheHeadConditionCache) {
    auto pipe = tiny_mar();
    const auto& c = pipe.config();
    const int64_t steps = pipe.sampler().diffusion().schedule().num_steps();
    ASSERT_EQ(steps, 8);
    for (int64_t period : {0, 1, 3, 5, 100}) {
        auto cfg = lazy(true, true);
        cfg.head_cfg_period = period;
        SCOPED_TRACE("head period " + std::to_string(period));
        auto opt = options(3.0);
        auto counter = std::make_shared<MarFlopCounter>(c, steps);
        auto chain = chain_with_counter(counter, make_lazymar(cfg, c, nullptr));
        EXPECT_EQ(chain->head_cfg_cache_period(), period);
        const auto r = pipe.generate(opt, chain.get());
        const auto counted = counter->flops(r.attention_flops);
        const auto planned = lazymar_planned_flops(c, cfg, 8, 2, 3.0, steps);
        EXPECT_DOUBLE_EQ(planned.diffusion, counted.diffusion);
        // By hand: full steps i = 7 and i % period == 0 run 2 rows per token, the others 1.
        int64_t full = 0;
        for (int64_t i = 0; i < steps; ++i)
            full += (period <= 0 || i == steps - 1 || i % period == 0) ? 1 : 0;
        const double w = double(c.diffloss_w), D = double(c.token_embed_dim());
        const double per_row_step =
            D * w + double(c.diffloss_d) * 5.0 * w * w + 2.0 * w * w + 2.0 * w * D;
        const double cond = double(c.decoder_embed_dim) * w;
        const int64_t tokens = 2 * c.seq_len();  // every token of both images is decoded once
        const double expect =
            2.0 * double(tokens) * (per_row_step * double(2 * full + (steps - full)) + 2.0 * cond);
        EXPECT_DOUBLE_EQ(counted.diffusion, expect);
        if (period == 3) {
            EXPECT_LT(counted.diffusion, mar_head_flops(c, tokens, true, steps, 0));
        }
    }
    // Without guidance the period changes nothing.
    auto counter = std::make_shared<MarFlopCounter>(c, steps);
    auto chain = chain_with_counter(counter, std::make_shared<LazyMarHeadCache>(3, 0));
    auto opt = options(1.0);
    const auto r = pipe.generate(opt, chain.get());
    EXPECT_DOUBLE_EQ(counter->flops(r.attention_flops).diffusion,
                     mar_diffusion_flops(c, 2 * c.seq_len(), steps));
}

// The per-step plan (lazymar_planned_step) is what the hooks record and what the loop runs: the
// stats of an eager run equal it step by step (the hooks also check each block against it),
// and the steps that skip the unconditional branch are those the plan gives B rows.
TEST(LazyMar, StatsOfARunAreThePlannedSteps) {
    auto pipe = tiny_mar();
    const auto& c = pipe.config();
    auto no_encoder = lazy(true, true);
    no_encoder.encoder_cache = false;
    auto all_rows = lazy(true, true);
    all_rows.keep_ratio = 1.0;
    auto unforced = lazy(true, true);
    unforced.force_decoded = false;
    auto late = lazy(true, true);
    late.start_step = 0;  // the paper's schedule for 8 steps
    late.period = 0;
    for (const auto& cfg :
         {lazy(true, true), lazy(true, false), no_encoder, all_rows, unforced, late}) {
        for (double guidance : {1.0, 3.0}) {
            SCOPED_TRACE(cfg.to_json().dump() + " cfg " + std::to_string(guidance));
            auto h = make_lazymar_hooks(cfg, c, nullptr);
            pipe.generate(options(guidance), h.chain.get());
            const auto plan = mar_step_plan(c.seq_len(), 8, guidance, CfgSchedule::Linear);
            const auto& stats = h.token_stats();
            ASSERT_EQ(stats.size(), 8u);
            std::vector<int64_t> skipped;
            for (int64_t s = 0; s < 8; ++s) {
                const auto p = lazymar_planned_step(c, cfg, plan, s, 2, guidance != 1.0);
                EXPECT_EQ(stats[s].step, s);
                EXPECT_EQ(stats[s].refresh, p.refresh) << "step " << s;
                EXPECT_EQ(stats[s].rows, p.rows) << "step " << s;
                EXPECT_EQ(stats[s].computed, p.computed) << "step " << s;
                EXPECT_EQ(stats[s].total, p.total) << "step " << s;
                if (guidance != 1.0 && p.rows == 2 && cfg.condition_cache) skipped.push_back(s);
            }
            if (cfg.condition_cache) {
                EXPECT_EQ(h.skipped_unconditional_steps(), skipped);
            }
        }
    }
    // By hand for one lazy step of lazy(true, true) at cfg 3 (refresh at 0, 1, 2, 5): step 3
    // runs the 2 conditional rows; the encoder computes the buffer and step 2's tokens, the
    // decoder all 20 positions up to block 1, then max(round(0.25 * 20), forced) after it.
    const auto plan = mar_step_plan(c.seq_len(), 8, 3.0, CfgSchedule::Linear);
    const auto p3 = lazymar_planned_step(c, lazy(true, true), plan, 3, 2, true);
    EXPECT_FALSE(p3.refresh);
    EXPECT_EQ(p3.rows, 2);
    EXPECT_EQ(p3.computed[0], c.buffer_size + plan[2].decoded());
    EXPECT_EQ(p3.total[0], c.buffer_size + c.seq_len() - plan[3].masked_before);
    EXPECT_EQ(p3.computed[3], c.total_len());  // decoder block 1 = ℓ
    EXPECT_EQ(p3.computed[4], std::max<int64_t>(5, plan[3].decoded() + plan[2].decoded()));
    EXPECT_TRUE(lazymar_planned_step(c, lazy(true, true), plan, 5, 2, true).refresh);
    EXPECT_EQ(lazymar_planned_step(c, lazy(true, true), plan, 5, 2, true).rows, 4);
}

TEST(LazyMar, DecoderPositionsKeepTheShareTheForcedAndTheRange) {
    auto cfg = lazy(true, true);
    cfg.keep_ratio = 0.16;
    EXPECT_EQ(lazymar_decoder_positions(cfg, 320, 3), 51);   // round(51.2)
    EXPECT_EQ(lazymar_decoder_positions(cfg, 320, 70), 70);  // the forced ones win
    cfg.force_decoded = false;
    EXPECT_EQ(lazymar_decoder_positions(cfg, 320, 70), 51);
    cfg.keep_ratio = 0.0;
    EXPECT_EQ(lazymar_decoder_positions(cfg, 320, 0), 1);
    cfg.keep_ratio = 1.0;
    EXPECT_EQ(lazymar_decoder_positions(cfg, 320, 0), 320);
}

// Whole-step CUDA graphs need a signature: present for the plain caches, absent with a probe
// (it reads tensors) or a similarity threshold (a count read back from the device); it names
// the settings, so another schedule captures other graphs.
TEST(LazyMar, GraphSignatureOnlyWithoutProbesOrThreshold) {
    const auto c = tiny_mar_config();
    const auto sig = make_lazymar(lazy(true, true), c, nullptr)->graph_signature();
    ASSERT_TRUE(sig.has_value());
    EXPECT_NE(sig->find("lazymar.tokens"), std::string::npos);
    EXPECT_NE(sig->find("lazymar.condition"), std::string::npos);
    EXPECT_TRUE(make_lazymar(lazy(false, true), c, nullptr)->graph_signature().has_value());
    auto other = lazy(true, true);
    other.period = 4;
    EXPECT_NE(*make_lazymar(other, c, nullptr)->graph_signature(), *sig);
    EXPECT_EQ(*make_lazymar(lazy(true, true), c, nullptr)->graph_signature(), *sig);
    auto threshold = lazy(true, true);
    threshold.min_similarity = 0.5;
    EXPECT_FALSE(make_lazymar(threshold, c, nullptr)->graph_signature().has_value());
    ProbeRecorder probe;
    EXPECT_FALSE(make_lazymar(lazy(true, true), c, &probe)->graph_signature().has_value());
    EXPECT_FALSE(make_lazymar(lazy(false, true), c, &probe)->graph_signature().has_value());
    // A chain has one only if every member has one.
    MarHookChain chain;
    EXPECT_FALSE(chain.graph_signature().has_value());
    chain.add(make_lazymar(lazy(true, true), c, nullptr));
    EXPECT_EQ(chain.graph_signature(), sig);
    chain.add(std::make_shared<MarSamplingHooks>());
    EXPECT_FALSE(chain.graph_signature().has_value());
}

// The head caches are hooks: LazyMarHeadCache answers its periods (from a config: the condition
// half needs the condition cache), names them in its graph signature unless its probe takes the
// drift records, and a chain answers the first non-zero period of its members.
TEST(LazyMar, HeadCacheHookAnswersThePeriods) {
    const auto c = tiny_mar_config();
    EXPECT_THROW(LazyMarHeadCache(-1, 0), std::invalid_argument);
    LazyMarHeadCache h(3, 5);
    EXPECT_TRUE(h.on());
    EXPECT_EQ(h.head_cfg_cache_period(), 3);
    EXPECT_EQ(h.head_mlp_cache_period(), 5);
    EXPECT_FALSE(LazyMarHeadCache(0, 0).on());
    ASSERT_TRUE(h.graph_signature().has_value());
    EXPECT_NE(*h.graph_signature(), *LazyMarHeadCache(3, 4).graph_signature());
    ProbeRecorder probe;
    LazyMarHeadCache probed(3, 5, &probe);
    EXPECT_TRUE(probed.wants_head_cache_stats());
    EXPECT_FALSE(probed.graph_signature().has_value());
    EXPECT_FALSE(LazyMarHeadCache(0, 0, &probe).wants_head_cache_stats());  // nothing to record

    auto cfg = lazy(true, true);
    cfg.head_cfg_period = 7;
    cfg.head_mlp_period = 4;
    auto hooks = make_lazymar_hooks(cfg, c, nullptr);
    ASSERT_NE(hooks.head, nullptr);
    EXPECT_EQ(hooks.chain->head_cfg_cache_period(), 7);
    EXPECT_EQ(hooks.chain->head_mlp_cache_period(), 4);
    EXPECT_TRUE(hooks.chain->graph_signature().has_value());
    EXPECT_FALSE(hooks.chain->wants_head_cache_stats());
    EXPECT_TRUE(make_lazymar(cfg, c, &probe)->wants_head_cache_stats());
    cfg.condition_cache = false;
    EXPECT_EQ(LazyMarHeadCache::from_config(cfg).head_cfg_cache_period(), 0);
    EXPECT_EQ(LazyMarHeadCache::from_config(cfg).head_mlp_cache_period(), 4);
    cfg.enabled = false;
    EXPECT_FALSE(LazyMarHeadCache::from_config(cfg).on());
    EXPECT_EQ(make_lazymar_hooks(lazy(true, true), c, nullptr).head, nullptr);  // periods 0

    MarHookChain chain;
    EXPECT_EQ(chain.head_cfg_cache_period(), 0);
    chain.add(std::make_shared<MarSamplingHooks>());
    chain.add(std::make_shared<LazyMarHeadCache>(0, 2));
    chain.add(std::make_shared<LazyMarHeadCache>(6, 9));
    EXPECT_EQ(chain.head_cfg_cache_period(), 6);
    EXPECT_EQ(chain.head_mlp_cache_period(), 2);
    EXPECT_FALSE(chain.wants_head_cache_stats());
    chain.add(std::make_shared<LazyMarHeadCache>(1, 1, &probe));
    EXPECT_TRUE(chain.wants_head_cache_stats());
}

// The caches are rewritten from step 0 on: one hook object reused for several runs (as the
// benchmarks and the graphed loop do) gives each run the tokens a fresh object gives.
TEST(LazyMar, AReusedHookObjectEqualsAFreshOne) {
    auto pipe = tiny_mar();
    auto reused = make_lazymar_hooks(lazy(true, true), pipe.config(), nullptr);
    const auto first = pipe.generate(options(3.0), reused.chain.get());
    auto other_seed = options(3.0);
    other_seed.seed = 5;
    const auto second = pipe.generate(other_seed, reused.chain.get());
    const auto third = pipe.generate(options(3.0), reused.chain.get());
    EXPECT_TRUE(same(third.tokens, first.tokens));
    auto fresh = make_lazymar_hooks(lazy(true, true), pipe.config(), nullptr);
    EXPECT_TRUE(same(pipe.generate(other_seed, fresh.chain.get()).tokens, second.tokens));
    EXPECT_FALSE(same(second.tokens, first.tokens));
    EXPECT_EQ(reused.token_stats().size(), 8u);
}
