// The sampling loop's cost model (core/sampling/step_cost.h) on the CPU: one entry per step,
// FLOPs per part from the shapes (projections, FFN, head, input), attention FLOPs summing to the
// run's total, the parts timed by the host clock (within each step's time; the same tokens as
// untimed) and no launches counted without CUDA graphs; pruning rows (FastVAR)
// shrinks the dense parts and a skipped scale has no step. SparVAR's CS4A counts its sparse
// pairs on the device and the loop adds them per step (take_deferred_attention_flops).
#include <gtest/gtest.h>

#include <cmath>

#include "core/accel/accel_config.h"
#include "tests/tiny_models.h"

using namespace varscope;

namespace {

VarSampleOptions options() {
    VarSampleOptions o;
    o.class_ids = {1, 4};
    o.seed = 3;
    o.decode = false;
    o.time_parts = true;  // the host clock on the CPU
    return o;
}

double flops(const StepCost& c, CostPart p) {
    return c.flops[static_cast<int>(p)];
}

}  // namespace

TEST(StepCost, DenseFlopsFollowTheShapes) {
    auto p = varscope::testing::tiny_pipeline();
    const auto& c = p.var_config();
    const auto r = p.generate(options());
    ASSERT_EQ(r.step_costs.size(), static_cast<size_t>(c.num_scales()));
    const double C = static_cast<double>(c.embed_dim);
    const double hidden = std::round(c.mlp_ratio * C);
    double attention = 0.0;
    for (size_t i = 0; i < r.step_costs.size(); ++i) {
        const auto& s = r.step_costs[i];
        EXPECT_EQ(s.scale, static_cast<int64_t>(i));
        EXPECT_EQ(s.scales, 1);
        EXPECT_TRUE(s.timed);
        EXPECT_EQ(s.launches, -1);
        // The parts lie inside the step (which also samples and updates f_hat) and each runs.
        double parts = 0.0;
        for (const double ms : s.ms) {
            EXPECT_GE(ms, 0.0);
            parts += ms;
        }
        EXPECT_LE(parts, r.scale_millis[i]);
        for (auto part : {CostPart::Projection, CostPart::Attention, CostPart::Ffn, CostPart::Head})
            EXPECT_GT(s.ms[static_cast<int>(part)], 0.0) << cost_part_name(part);
        EXPECT_EQ(s.ms[static_cast<int>(CostPart::Overhead)], 0.0);  // no method
        const double pn = static_cast<double>(c.patch_nums[i]);
        const double rows = 2.0 * 2 * pn * pn;  // 2 images, CFG pairs
        EXPECT_DOUBLE_EQ(flops(s, CostPart::Projection), c.depth * 2.0 * rows * C * 4.0 * C);
        EXPECT_DOUBLE_EQ(flops(s, CostPart::Ffn), c.depth * 4.0 * rows * C * hidden);
        EXPECT_DOUBLE_EQ(flops(s, CostPart::Head), 2.0 * rows * C * c.vocab_size);
        EXPECT_DOUBLE_EQ(flops(s, CostPart::Input), i == 0 ? 0.0 : 2.0 * (rows / 2) * c.cvae * C);
        EXPECT_EQ(flops(s, CostPart::Overhead), 0.0);
        EXPECT_GT(flops(s, CostPart::Attention), 0.0);
        attention += flops(s, CostPart::Attention);
    }
    EXPECT_DOUBLE_EQ(attention, r.attention_flops);
}

TEST(StepCost, TimingThePartsChangesNoTokenAndIsOffByDefault) {
    auto p = varscope::testing::tiny_pipeline();
    VarSampleOptions plain = options();
    plain.time_parts = false;
    const auto a = p.generate(plain);
    const auto b = p.generate(options());
    ASSERT_EQ(a.tokens.size(), b.tokens.size());
    for (size_t i = 0; i < a.tokens.size(); ++i) EXPECT_TRUE(a.tokens[i].equal(b.tokens[i]));
    for (const auto& s : a.step_costs) EXPECT_FALSE(s.timed);
}

TEST(StepCost, PrunedAndSkippedScalesCostLess) {
    auto p = varscope::testing::small_pipeline();
    const auto& c = p.var_config();
    const auto dense = p.generate(options());
    const auto pruned_hooks = build_accelerators(
        AccelConfig::from_argument(R"({"fastvar": {"enabled": true, "ratios": [0.5, 0.75]}})"), c);
    const auto pruned = p.generate(options(), pruned_hooks.get());
    ASSERT_EQ(pruned.step_costs.size(), dense.step_costs.size());
    const auto& last_d = dense.step_costs.back();
    const auto& last_p = pruned.step_costs.back();
    EXPECT_LT(flops(last_p, CostPart::Ffn), flops(last_d, CostPart::Ffn));
    EXPECT_LT(flops(last_p, CostPart::Attention), flops(last_d, CostPart::Attention));
    double attention = 0.0;
    for (const auto& s : pruned.step_costs) attention += flops(s, CostPart::Attention);
    EXPECT_DOUBLE_EQ(attention, pruned.attention_flops);

    const auto skip_hooks = build_accelerators(
        AccelConfig::from_argument(R"({"skip": {"enabled": true, "last_n": 1}})"), c);
    const auto skipped = p.generate(options(), skip_hooks.get());
    EXPECT_EQ(skipped.step_costs.size(), dense.step_costs.size() - 1);
}

// CS4A's sparse pairs reach the step's FLOPs and the run's total through the deferred count.
TEST(StepCost, SparVarDeferredPairsAreBookedOnTheirStep) {
    auto p = varscope::testing::small_pipeline();
    const auto& c = p.var_config();
    const auto dense = p.generate(options());
    const auto hooks = build_accelerators(
        AccelConfig::from_argument(R"({"sparvar": {"enabled": true, "sparse_scales": 2,
            "sink_scales": 1, "cs4a_fraction": 1, "query_block": 4, "top_k": 0.2}})"),
        c);
    const auto r = p.generate(options(), hooks.get());
    ASSERT_EQ(r.step_costs.size(), dense.step_costs.size());
    double attention = 0.0;
    for (size_t i = 0; i < r.step_costs.size(); ++i) {
        const double a = flops(r.step_costs[i], CostPart::Attention);
        const double d = flops(dense.step_costs[i], CostPart::Attention);
        attention += a;
        const int64_t decision = c.num_scales() - 3;
        if (static_cast<int64_t>(i) < decision) {
            EXPECT_DOUBLE_EQ(a, d) << "dense scale " << i;
        }
        // Sparse scales attend to the mapped keys only, fewer than every key but not none.
        if (static_cast<int64_t>(i) > decision) {
            EXPECT_LT(a, d) << "sparse scale " << i;
            EXPECT_GT(a, 0.0) << "sparse scale " << i;
        }
    }
    EXPECT_DOUBLE_EQ(attention, r.attention_flops);
    // A second run books the same counts (the device counter was emptied after each step).
    EXPECT_DOUBLE_EQ(p.generate(options(), hooks.get()).attention_flops, r.attention_flops);
}
