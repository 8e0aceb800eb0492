// A method's work ceiling against a dense run (core/sampling/work_ceiling.h): hand-made steps
// with known rates give the exact ceiling (each part at the dense scale's time per FLOP, the
// method's overhead free, a grouped step at its last scale's rates with both scales' outside
// time); the dense run is its own ceiling; inputs it cannot price give nothing. Then on real CPU
// runs of the tiny VAR: a method's ceiling lies between its FLOP share and the dense time.
#include "core/sampling/work_ceiling.h"

#include <gtest/gtest.h>

#include "core/accel/accel_config.h"
#include "tests/tiny_models.h"

using namespace varscope;

namespace {

constexpr int kProj = static_cast<int>(CostPart::Projection);
constexpr int kAttn = static_cast<int>(CostPart::Attention);
constexpr int kFfn = static_cast<int>(CostPart::Ffn);
constexpr int kOverhead = static_cast<int>(CostPart::Overhead);

StepCost step(int64_t scale, int64_t scales, double proj_flops, double proj_ms, double attn_flops,
              double attn_ms, double ffn_flops, double ffn_ms) {
    StepCost s;
    s.scale = scale;
    s.scales = scales;
    s.timed = true;
    s.flops[kProj] = proj_flops;
    s.ms[kProj] = proj_ms;
    s.flops[kAttn] = attn_flops;
    s.ms[kAttn] = attn_ms;
    s.flops[kFfn] = ffn_flops;
    s.ms[kFfn] = ffn_ms;
    return s;
}

}  // namespace

TEST(WorkCeiling, EachPartAtTheDenseRateAndNoOverhead) {
    // Dense: scale 0 at 1 ms per unit of FLOPs, scale 1 at 0.5 ms; 1 ms outside the parts each.
    const std::vector<StepCost> dense = {step(0, 1, 2, 2, 2, 2, 4, 4),
                                         step(1, 1, 8, 4, 8, 4, 16, 8)};
    const std::vector<double> dense_ms = {9.0, 17.0};
    const auto self = work_ceiling(dense, dense, dense_ms);
    ASSERT_TRUE(self.has_value());
    EXPECT_DOUBLE_EQ(self->dense_ms, 26.0);
    EXPECT_DOUBLE_EQ(self->ms, 26.0) << "the dense run is its own ceiling";
    EXPECT_DOUBLE_EQ(self->speedup(), 1.0);

    // A method: scale 0 as dense but 5 ms of its own overhead; scale 1 with half the attention
    // FLOPs, slower than the dense rate (it does not matter: the ceiling prices FLOPs).
    auto m0 = step(0, 1, 2, 2, 2, 2, 4, 4);
    m0.ms[kOverhead] = 5.0;
    const auto m1 = step(1, 1, 8, 9, 4, 9, 16, 9);
    const auto c = work_ceiling({m0, m1}, dense, dense_ms);
    ASSERT_TRUE(c.has_value());
    // scale 0: 2 + 2 + 4 + 1 outside; scale 1: (8 + 4 + 16) * 0.5 + 1 outside.
    EXPECT_DOUBLE_EQ(c->ms, 9.0 + 15.0);
    EXPECT_DOUBLE_EQ(c->speedup(), 26.0 / 24.0);

    // A grouped step over scales 0 and 1: priced at scale 1's rates, both scales' outside time.
    const auto grouped = work_ceiling({step(0, 2, 10, 1, 10, 1, 20, 1)}, dense, dense_ms);
    ASSERT_TRUE(grouped.has_value());
    EXPECT_DOUBLE_EQ(grouped->ms, 40 * 0.5 + 2.0);

    // A skipped scale: the ceiling has no step for it.
    const auto skipped = work_ceiling({dense[0]}, dense, dense_ms);
    ASSERT_TRUE(skipped.has_value());
    EXPECT_DOUBLE_EQ(skipped->ms, 9.0);
}

TEST(WorkCeiling, NothingWhereItCannotBePriced) {
    const std::vector<StepCost> dense = {step(0, 1, 1, 1, 1, 1, 1, 1),
                                         step(1, 1, 1, 1, 1, 1, 1, 1)};
    const std::vector<double> ms = {4.0, 4.0};
    auto untimed = dense;
    untimed[1].timed = false;
    EXPECT_FALSE(work_ceiling(dense, untimed, ms).has_value()) << "an untimed dense step";
    EXPECT_FALSE(work_ceiling(untimed, dense, ms).has_value()) << "an untimed method step";
    EXPECT_FALSE(work_ceiling(dense, dense, {4.0}).has_value()) << "step times of other scales";
    EXPECT_FALSE(work_ceiling({step(1, 2, 1, 1, 1, 1, 1, 1)}, dense, ms).has_value())
        << "a group past the last scale";
    EXPECT_FALSE(work_ceiling({step(0, 2, 1, 1, 1, 1, 1, 1)}, {step(0, 2, 1, 1, 1, 1, 1, 1)}, {4.0})
                     .has_value())
        << "a grouped dense step";
    EXPECT_FALSE(work_ceiling({}, dense, ms).has_value());
}

// Real runs on the CPU (host-timed parts): skipping the last scale has a ceiling above 1 and
// below the dense run's time over the remaining steps' dense time.
TEST(WorkCeiling, SkippingTheLastScaleOnTheTinyVar) {
    auto p = varscope::testing::tiny_pipeline();
    VarSampleOptions o;
    o.class_ids = {1, 4};
    o.seed = 3;
    o.decode = false;
    o.time_parts = true;  // the host clock on the CPU
    const auto dense = p.generate(o);
    const auto skip_hooks = build_accelerators(
        AccelConfig::from_argument(R"({"skip": {"enabled": true, "last_n": 1}})"), p.var_config());
    const auto skipped = p.generate(o, skip_hooks.get());
    ASSERT_EQ(skipped.step_costs.size() + 1, dense.step_costs.size());
    const auto c = work_ceiling(skipped.step_costs, dense.step_costs, dense.scale_millis);
    ASSERT_TRUE(c.has_value());
    double all = 0.0;
    for (double v : dense.scale_millis) all += v;
    EXPECT_DOUBLE_EQ(c->dense_ms, all);
    EXPECT_GT(c->speedup(), 1.0);
    // The skipped steps are priced as the dense ones (the same FLOPs at the same rates, the
    // dense outside time): the ceiling is the dense time without the last scale.
    EXPECT_NEAR(c->ms, all - dense.scale_millis.back(), 1e-9 * all);
}
