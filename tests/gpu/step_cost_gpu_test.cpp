// The sampling loop's cost model on CUDA (core/sampling/step_cost.h, kernels/part_timer.h):
// events between the parts read device times eagerly and inside replayed CUDA graphs, timing
// changes no token, graphs count their kernel launches, and an accelerator's own work shows up
// as overhead where it runs.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include "core/accel/accel_config.h"
#include "kernels/cuda_graph.h"
#include "kernels/part_timer.h"
#include "tests/gpu/device_pipelines.h"

using namespace varscope;

#define REQUIRE_CUDA_GRAPHS()                                \
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device"; \
    if (!kernels::cuda_graphs_built()) GTEST_SKIP() << "built without CUDA kernels"

namespace {

VarSampleOptions options(bool graphs, bool time_parts) {
    VarSampleOptions o;
    o.class_ids = {3, 7};
    o.seed = 9;
    o.cfg = 2.5;
    o.top_k = 20;
    o.decode = false;
    o.cuda_graphs = graphs;
    o.time_parts = time_parts;
    return o;
}

double part(const StepCost& c, CostPart p, bool ms) {
    return ms ? c.ms[static_cast<int>(p)] : c.flops[static_cast<int>(p)];
}

}  // namespace

// A part's time is the span between its marks, eagerly and in every replay of a graph.
TEST(GpuStepCost, PartTimerReadsEagerAndReplayedSpans) {
    REQUIRE_CUDA_GRAPHS();
    c10::InferenceMode guard;
    const auto a = at::randn({2048, 2048}, at::TensorOptions(at::kCUDA).dtype(at::kFloat));
    auto work = [&](kernels::PartTimer& t) {
        t.mark(0);
        auto x = a.mm(a);
        t.mark(1);
        x = x.mm(a).mm(a);  // twice the work of part 0
        t.mark(1);          // dropped: part 1 is running
        t.mark(-1);
        return x;
    };
    {
        kernels::PartTimer warm_up(0);  // cuBLAS state and the first launches, untimed
        work(warm_up);
        torch::cuda::synchronize();
    }
    kernels::PartTimer eager(0);
    work(eager);
    EXPECT_EQ(eager.marks(), 3u);
    torch::cuda::synchronize();
    std::vector<double> ms;
    ASSERT_TRUE(eager.accumulate(ms));
    ASSERT_EQ(ms.size(), 2u);
    EXPECT_GT(ms[0], 0.0);
    EXPECT_GT(ms[1], ms[0]);

    kernels::PartTimer inside(0);
    kernels::run_on_capture_stream(0, [&] { work(eager); });  // cuBLAS warm-up on that stream
    kernels::CudaGraph graph;
    graph.capture(0, [&] { work(inside); });
    for (int i = 0; i < 2; ++i) {
        graph.replay();
        torch::cuda::synchronize();
        std::vector<double> r;
        ASSERT_TRUE(inside.accumulate(r)) << "replay " << i;
        ASSERT_EQ(r.size(), 2u);
        EXPECT_GT(r[0], 0.0);
        EXPECT_GT(r[1], r[0]) << "replay " << i;
    }
}

// The baseline and SparVAR (CS4A and CSLA): timing the parts changes no token, graphs and eager
// count the same FLOPs per part, the graphs count their launches, and SparVAR's scoring and
// index maps are overhead at its decision and sparse scales only.
TEST(GpuStepCost, PartsAreTimedWithoutChangingTokens) {
    REQUIRE_CUDA_GRAPHS();
    auto cpu = varscope::testing::kernel_sized_cpu_pipeline();
    auto gpu = varscope::testing::with_weights_of(cpu, {"cuda", Precision::Bf16});
    const auto& c = gpu.var_config();
    const std::string sparvar = R"({"sparvar": {"enabled": true, "sparse_scales": 2,
        "sink_scales": 2, "windows": [1, 3], "middle_window": 1, "block": 64,
        "query_block": 64, "top_k": 0.2}})";
    for (const std::string& json : {std::string(), sparvar}) {
        SCOPED_TRACE(json.empty() ? "baseline" : "sparvar");
        const auto hooks =
            json.empty() ? nullptr : build_accelerators(AccelConfig::from_argument(json), c);
        const auto plain = gpu.generate(options(true, false), hooks.get());
        gpu.generate(options(true, true), hooks.get());  // captures the timed graphs
        const auto timed = gpu.generate(options(true, true), hooks.get());
        const auto eager = gpu.generate(options(false, true), hooks.get());
        ASSERT_TRUE(plain.cuda_graphs);
        ASSERT_TRUE(timed.cuda_graphs);
        for (size_t si = 0; si < plain.tokens.size(); ++si) {
            EXPECT_TRUE(timed.tokens[si].equal(plain.tokens[si])) << "scale " << si;
            EXPECT_TRUE(eager.tokens[si].equal(plain.tokens[si])) << "scale " << si;
        }
        ASSERT_EQ(timed.step_costs.size(), static_cast<size_t>(c.num_scales()));
        ASSERT_EQ(eager.step_costs.size(), timed.step_costs.size());
        double attention = 0.0;
        for (size_t i = 0; i < timed.step_costs.size(); ++i) {
            const auto& g = timed.step_costs[i];
            const auto& e = eager.step_costs[i];
            EXPECT_EQ(g.scale, static_cast<int64_t>(i));
            EXPECT_TRUE(g.timed && e.timed) << "step " << i;
            EXPECT_GT(g.launches, c.depth) << "step " << i;  // several kernels per block
            EXPECT_EQ(plain.step_costs[i].launches, g.launches) << "events are no kernels";
            EXPECT_EQ(e.launches, -1);
            for (int p = 0; p < kCostParts; ++p)
                EXPECT_EQ(g.flops[p], e.flops[p]) << "step " << i << " part " << p;
            for (auto p :
                 {CostPart::Projection, CostPart::Attention, CostPart::Ffn, CostPart::Head}) {
                EXPECT_GT(part(g, p, true), 0.0) << "step " << i << " " << cost_part_name(p);
                EXPECT_GT(part(e, p, true), 0.0) << "step " << i << " " << cost_part_name(p);
                EXPECT_GT(part(g, p, false), 0.0) << "step " << i << " " << cost_part_name(p);
            }
            attention += part(g, CostPart::Attention, false);
            // The parts lie inside the step's synchronised time.
            double sum = 0.0;
            for (double v : g.ms) sum += v;
            EXPECT_LT(sum, timed.scale_millis[i] * 1.05 + 0.05) << "step " << i;
            const bool sparvar_scale = !json.empty() && static_cast<int64_t>(i) >= 5;
            if (json.empty()) {
                EXPECT_EQ(part(g, CostPart::Overhead, true), 0.0);
            }
            if (sparvar_scale) {
                EXPECT_GT(part(g, CostPart::Overhead, true), 0.0) << i;
            }
        }
        EXPECT_DOUBLE_EQ(attention, timed.attention_flops);
        EXPECT_DOUBLE_EQ(timed.attention_flops, eager.attention_flops);
    }
}
