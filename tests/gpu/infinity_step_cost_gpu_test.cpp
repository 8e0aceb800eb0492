// The Infinity loop's cost model on CUDA (core/sampling/infinity_sampler.cpp, step_cost.h): the
// part times read eagerly and from replayed CUDA graphs change no bit, graphs and eager count the
// same FLOPs per part, the graphs count their launches, the attention over the text is timed as
// its own part, and SparVAR's scoring and index maps show as overhead. Skips without CUDA.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/accel/accel_config.h"
#include "core/pipeline.h"
#include "core/sampling/infinity_sampler.h"
#include "kernels/cuda_graph.h"
#include "tests/gpu/tiny_infinity_cuda.h"

using namespace varscope;

#define REQUIRE_CUDA_GRAPHS()                                \
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device"; \
    if (!kernels::cuda_graphs_built()) GTEST_SKIP() << "built without CUDA kernels"

namespace {

InfinityConfig small_config() {
    return varscope::testing::tiny_infinity_cuda_config(4);
}

InfinitySampler sampler_on_cuda() {
    return varscope::testing::tiny_infinity_sampler_on_cuda(small_config().depth, true);
}

InfinityText text() {
    return varscope::testing::tiny_infinity_text({5, 11}, 1);
}

InfinitySampleOptions options(bool graphs, bool time_parts) {
    auto o = varscope::testing::tiny_infinity_options(graphs);
    o.time_parts = time_parts;
    return o;
}

double part(const StepCost& c, CostPart p, bool ms) {
    return ms ? c.ms[static_cast<int>(p)] : c.flops[static_cast<int>(p)];
}

}  // namespace

TEST(GpuInfinityStepCost, PartsAreTimedWithoutChangingBits) {
    REQUIRE_CUDA_GRAPHS();
    c10::InferenceMode guard;
    const auto s = infinity_schedule(1.0, "0.06M");  // 7 scales, 16 x 16 last
    const auto view = infinity_hook_view(small_config(), s);
    ASSERT_TRUE(view.has_value());
    auto sampler = sampler_on_cuda();
    const std::string sparvar = R"({"sparvar": {"enabled": true, "sparse_scales": 2,
        "sink_scales": 2, "windows": [1, 3], "middle_window": 1, "block": 64,
        "query_block": 64, "top_k": 0.2}})";
    for (const std::string& json : {std::string(), sparvar}) {
        SCOPED_TRACE(json.empty() ? "baseline" : "sparvar");
        const auto hooks =
            json.empty() ? nullptr : build_accelerators(AccelConfig::from_argument(json), *view);
        const auto plain = sampler.sample(text(), s, options(true, false), hooks.get());
        sampler.sample(text(), s, options(true, true), hooks.get());  // captures the timed graphs
        const auto timed = sampler.sample(text(), s, options(true, true), hooks.get());
        const auto eager = sampler.sample(text(), s, options(false, true), hooks.get());
        ASSERT_TRUE(plain.cuda_graphs);
        ASSERT_TRUE(timed.cuda_graphs);
        ASSERT_EQ(timed.bits.size(), plain.bits.size());
        ASSERT_EQ(eager.bits.size(), plain.bits.size());
        for (size_t si = 0; si < plain.bits.size(); ++si) {
            EXPECT_TRUE(timed.bits[si].equal(plain.bits[si])) << "scale " << si;
            EXPECT_TRUE(eager.bits[si].equal(plain.bits[si])) << "scale " << si;
        }
        ASSERT_EQ(timed.step_costs.size(), static_cast<size_t>(s.num_scales()));
        ASSERT_EQ(eager.step_costs.size(), timed.step_costs.size());
        double attention = 0.0;
        for (size_t i = 0; i < timed.step_costs.size(); ++i) {
            const auto& g = timed.step_costs[i];
            const auto& e = eager.step_costs[i];
            EXPECT_EQ(g.scale, static_cast<int64_t>(i));
            EXPECT_TRUE(g.timed && e.timed) << "step " << i;
            EXPECT_GT(g.launches, small_config().depth) << "step " << i;
            EXPECT_EQ(plain.step_costs[i].launches, g.launches) << "events are no kernels";
            EXPECT_EQ(e.launches, -1);
            EXPECT_FALSE(plain.step_costs[i].timed);
            for (int p = 0; p < kCostParts; ++p)
                EXPECT_EQ(g.flops[p], e.flops[p]) << "step " << i << " part " << p;
            for (auto p : {CostPart::Projection, CostPart::Attention, CostPart::CrossAttention,
                           CostPart::Ffn, CostPart::Head}) {
                EXPECT_GT(part(g, p, true), 0.0) << "step " << i << " " << cost_part_name(p);
                EXPECT_GT(part(e, p, true), 0.0) << "step " << i << " " << cost_part_name(p);
                EXPECT_GT(part(g, p, false), 0.0) << "step " << i << " " << cost_part_name(p);
            }
            attention += part(g, CostPart::Attention, false);
            // The parts lie inside the step's synchronised time.
            double sum = 0.0;
            for (double v : g.ms) sum += v;
            EXPECT_LT(sum, timed.scale_millis[i] * 1.05 + 0.05) << "step " << i;
            if (json.empty()) {
                EXPECT_EQ(part(g, CostPart::Overhead, true), 0.0);
            } else if (i >= 5) {  // SparVAR's decision and sparse scales
                EXPECT_GT(part(g, CostPart::Overhead, true), 0.0) << i;
            }
        }
        EXPECT_DOUBLE_EQ(attention, timed.attention_flops);
        EXPECT_DOUBLE_EQ(timed.attention_flops, eager.attention_flops);
    }
}
