// The Infinity loop's cost model (core/sampling/step_cost.h, infinity_sampler.cpp) on the CPU, as
// tests/step_cost_test.cpp checks the VAR loop's: asking for part times changes no bit (the
// baseline and each of the papers' Infinity presets), one entry per step covering every scale
// run, FLOPs per part from the shapes (projections with the text's query and output, FFN, head,
// the word embedding of the codes, the attention over the text as its own part), the attention
// FLOPs summing to the run's total, the parts timed by the host clock when asked (inside each
// step's time) and no launches without CUDA graphs. The
// runner hands the entries on (RunResult::step_costs), which `bench e2e` reads.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/accel/accel_config.h"
#include "core/runner/runner.h"
#include "core/sampling/infinity_sampler.h"
#include "tests/test_util.h"
#include "tests/tiny_infinity.h"

using namespace varscope;

namespace {

constexpr int64_t kTextLen = 5;  // tiny_preset_infinity_text() has 5 tokens

InfinityConfig tiny_config() {
    return varscope::testing::tiny_preset_infinity_config();
}

InfinitySampler tiny_sampler() {
    return varscope::testing::tiny_preset_infinity_sampler();
}

InfinityText text() {
    return varscope::testing::tiny_preset_infinity_text();
}

InfinitySampleOptions options(bool time_parts) {
    InfinitySampleOptions o;
    o.seed = 11;
    o.cfg = 3.0;
    o.top_k = 0;
    o.top_p = 0.0;
    o.time_parts = time_parts;  // the host clock on the CPU: what must not change is the bits
    return o;
}

double flops(const StepCost& c, CostPart p) {
    return c.flops[static_cast<int>(p)];
}

void expect_same_bits(const InfinitySampleResult& a, const InfinitySampleResult& b) {
    ASSERT_EQ(a.bits.size(), b.bits.size());
    for (size_t si = 0; si < a.bits.size(); ++si)
        EXPECT_TRUE(at::equal(a.bits[si], b.bits[si])) << "scale " << si;
    EXPECT_TRUE(at::equal(a.summed_codes, b.summed_codes));
}

// The steps follow each other without a gap, cover every scale run, and their attention FLOPs
// are the run's.
void expect_steps_cover_the_run(const InfinitySampleResult& r, bool timed) {
    ASSERT_FALSE(r.step_costs.empty());
    int64_t next = 0;
    double attention = 0.0;
    for (const auto& s : r.step_costs) {
        EXPECT_EQ(s.scale, next);
        EXPECT_GE(s.scales, 1);
        next += s.scales;
        EXPECT_EQ(s.timed, timed);
        EXPECT_EQ(s.launches, -1);  // eager: no graph counts the kernels
        if (timed) {  // the parts lie inside the step's time, each part that has work ran
            double parts = 0.0, step = 0.0;
            for (const double ms : s.ms) parts += ms;
            for (int64_t k = s.scale; k < s.scale + s.scales; ++k)
                step += r.scale_millis.at(static_cast<size_t>(k));
            EXPECT_LE(parts, step) << "step at scale " << s.scale;
            for (auto p : {CostPart::Projection, CostPart::Attention, CostPart::Ffn,
                           CostPart::CrossAttention})
                EXPECT_GT(s.ms[static_cast<int>(p)], 0.0) << cost_part_name(p);
        }
        for (auto p : {CostPart::Projection, CostPart::Attention, CostPart::Ffn, CostPart::Head,
                       CostPart::CrossAttention})
            EXPECT_GT(flops(s, p), 0.0) << "step at scale " << s.scale << " " << cost_part_name(p);
        attention += flops(s, CostPart::Attention);
    }
    EXPECT_EQ(next, static_cast<int64_t>(r.bits.size()));
    EXPECT_NEAR(attention, r.attention_flops, 1e-9 * r.attention_flops);
}

}  // namespace

TEST(InfinityStepCost, DenseFlopsFollowTheShapes) {
    c10::InferenceMode guard;
    auto sampler = tiny_sampler();
    const auto s = infinity_schedule(1.0, "0.06M");
    const auto plain = sampler.sample(text(), s, options(false));
    const auto r = sampler.sample(text(), s, options(true));
    expect_same_bits(plain, r);
    ASSERT_EQ(r.step_costs.size(), static_cast<size_t>(s.num_scales()));
    expect_steps_cover_the_run(r, true);
    const auto c = tiny_config();
    const double C = static_cast<double>(c.embed_dim), B = 1.0;
    for (size_t i = 0; i < r.step_costs.size(); ++i) {
        SCOPED_TRACE("scale " + std::to_string(i));
        const auto& st = r.step_costs[i];
        EXPECT_EQ(st.scales, 1);
        const double l = static_cast<double>(s.tokens(static_cast<int64_t>(i)));
        const double n = 2.0 * B * l;  // guided: the conditional and unconditional rows
        EXPECT_DOUBLE_EQ(flops(st, CostPart::Projection), c.depth * 2.0 * n * C * 6.0 * C);
        EXPECT_DOUBLE_EQ(flops(st, CostPart::Ffn), c.depth * 4.0 * n * C * c.mlp_hidden);
        EXPECT_DOUBLE_EQ(flops(st, CostPart::CrossAttention), c.depth * 4.0 * n * kTextLen * C);
        EXPECT_DOUBLE_EQ(flops(st, CostPart::Head), 2.0 * n * C * c.vocab());
        EXPECT_DOUBLE_EQ(flops(st, CostPart::Input),
                         i == 0 ? 0.0 : 2.0 * B * l * c.codebook_dim * C);
        EXPECT_EQ(flops(st, CostPart::Overhead), 0.0);
        // The self-attention over the cache: every earlier scale and this one.
        const double keys = static_cast<double>(s.scale_begin(static_cast<int64_t>(i))) + l;
        EXPECT_DOUBLE_EQ(flops(st, CostPart::Attention), c.depth * 4.0 * n * keys * C);
    }
}

// Guidance at a layer's output instead of the logits: the head then reads the conditional rows
// only, and the bits are again those without part times.
TEST(InfinityStepCost, GuidanceAtALayerLeavesTheHeadTheConditionalRows) {
    c10::InferenceMode guard;
    auto sampler = tiny_sampler();
    const auto s = infinity_schedule(1.0, "0.06M");
    auto o = options(false);
    o.cfg_insertion_layer = {-1};
    const auto plain = sampler.sample(text(), s, o);
    o.time_parts = true;
    const auto r = sampler.sample(text(), s, o);
    expect_same_bits(plain, r);
    expect_steps_cover_the_run(r, true);
    const auto c = tiny_config();
    for (size_t i = 0; i < r.step_costs.size(); ++i) {
        const double l = static_cast<double>(s.tokens(static_cast<int64_t>(i)));
        EXPECT_DOUBLE_EQ(flops(r.step_costs[i], CostPart::Head), 2.0 * l * c.embed_dim * c.vocab())
            << "scale " << i;
    }
}

// The papers' Infinity-2B presets on the 13-scale schedule: part times asked for change no bit,
// the steps cover every scale each method runs (FastVAR and SparVAR+skip skip the last two,
// LazyVAR groups the last four into one step), and what the method saves shows in its parts.
TEST(InfinityStepCost, PresetsKeepTheirBitsAndCoverEveryScale) {
    c10::InferenceMode guard;
    auto sampler = tiny_sampler();
    const auto s = infinity_schedule(1.0, "1M");
    const auto view = infinity_hook_view(tiny_config(), s);
    ASSERT_TRUE(view.has_value());
    const auto dense = sampler.sample(text(), s, options(false));
    ASSERT_EQ(dense.step_costs.size(), 13u);
    for (const std::string name :
         {"infinity-fastvar", "infinity-lazyvar", "infinity-sparvar", "infinity-sparvar+skip"}) {
        SCOPED_TRACE(name);
        const auto config = AccelConfig::from_json(infinity_accel_presets().at(name));
        // A hooks object per run, as a fresh plan would build it (SparVAR keeps per-run state).
        const auto plain =
            sampler.sample(text(), s, options(false), build_accelerators(config, *view).get());
        const auto r =
            sampler.sample(text(), s, options(true), build_accelerators(config, *view).get());
        expect_same_bits(plain, r);
        expect_steps_cover_the_run(r, true);
        ASSERT_EQ(r.step_costs.size(), plain.step_costs.size());
        for (size_t i = 0; i < r.step_costs.size(); ++i)
            for (int p = 0; p < kCostParts; ++p)
                EXPECT_EQ(r.step_costs[i].flops[p], plain.step_costs[i].flops[p])
                    << "step " << i << " " << cost_part_name(static_cast<CostPart>(p));
        const auto& last = r.step_costs.back();
        if (name == "infinity-fastvar") {
            // Scales 9 and 10 (pruned to 40 % and 50 %) run, 11 and 12 are skipped.
            EXPECT_EQ(r.bits.size(), 11u);
            EXPECT_LT(flops(last, CostPart::Ffn), flops(dense.step_costs[10], CostPart::Ffn));
            EXPECT_LT(flops(last, CostPart::CrossAttention),
                      flops(dense.step_costs[10], CostPart::CrossAttention));
        } else if (name == "infinity-lazyvar") {
            // Scales 9-12 in one pass, their rows thinned by the method's ratios.
            EXPECT_EQ(r.step_costs.size(), 10u);
            EXPECT_EQ(last.scale, 9);
            EXPECT_EQ(last.scales, 4);
            double dense_ffn = 0.0;
            for (size_t i = 9; i < 13; ++i) dense_ffn += flops(dense.step_costs[i], CostPart::Ffn);
            EXPECT_LT(flops(last, CostPart::Ffn), dense_ffn);
        } else {
            // SparVAR's sparse scales: the dense parts unchanged, less self-attention.
            const size_t sparse = name == "infinity-sparvar" ? 12 : 10;
            ASSERT_LT(sparse, r.step_costs.size());
            const auto& a = r.step_costs[sparse];
            const auto& d = dense.step_costs[sparse];
            EXPECT_EQ(flops(a, CostPart::Ffn), flops(d, CostPart::Ffn));
            EXPECT_EQ(flops(a, CostPart::CrossAttention), flops(d, CostPart::CrossAttention));
            EXPECT_LT(flops(a, CostPart::Attention), flops(d, CostPart::Attention));
            EXPECT_EQ(r.bits.size(), name == "infinity-sparvar" ? 13u : 11u);
        }
    }
}

// The runner hands the loop's entries on: what `bench e2e` turns into its cost model.
TEST(InfinityStepCost, TheRunnerReportsTheSteps) {
    ModelSpec spec;
    spec.model_path =
        varscope::testing::source_dir() + "/tests/fixtures/infinity_tiny/infinity_tiny.pth";
    const auto runner = open_runner(spec, load_options("cpu", "fp32"));
    SampleSettings st = runner->defaults();
    st.text_features =
        varscope::testing::source_dir() + "/tests/fixtures/infinity_tiny/teacher.safetensors";
    st.pixels = "0.06M";
    st.seed = 2;
    const auto plain = runner->generate(st);
    st.time_parts = true;
    const auto r = runner->generate(st);
    ASSERT_EQ(r.step_costs.size(), 7u);  // 0.06M, square: 7 scales
    for (size_t i = 0; i < r.step_costs.size(); ++i) {
        EXPECT_EQ(r.step_costs[i].scale, static_cast<int64_t>(i));
        EXPECT_GT(r.step_costs[i].flops[static_cast<int>(CostPart::CrossAttention)], 0.0);
        EXPECT_TRUE(r.step_tokens[i].equal(plain.step_tokens[i])) << "scale " << i;
    }
}
