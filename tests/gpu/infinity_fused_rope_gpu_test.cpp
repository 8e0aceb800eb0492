// Infinity's q/k RoPE as one kernel (KernelPolicy::fused_rope, kernels/rope.h) changes no bit of
// a sampled image and takes kernels out of every graphed step: a random tiny Infinity on CUDA,
// in bf16-autocast (the official mode: bf16 out of the kernel) and in fp32, eager and with CUDA
// graphs, plain and (bf16) with SparVAR (its token selection), with the fused kernel on and off on
// one sampler (the graph cache keeps the two apart). Skips without CUDA.
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
#include "kernels/rope.h"
#include "tests/gpu/tiny_infinity_cuda.h"

using namespace varscope;

#define REQUIRE_CUDA_GRAPHS()                                \
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device"; \
    if (!kernels::cuda_graphs_built()) GTEST_SKIP() << "built without CUDA kernels"

namespace {

InfinityConfig small_config() {
    return varscope::testing::tiny_infinity_cuda_config(4);
}

InfinitySampler sampler_on_cuda(bool autocast) {
    return varscope::testing::tiny_infinity_sampler_on_cuda(small_config().depth, autocast);
}

InfinityText text() {
    return varscope::testing::tiny_infinity_text({5, 11}, 1);
}

InfinitySampleOptions options(bool graphs) {
    return varscope::testing::tiny_infinity_options(graphs);
}

ExecPolicy with_fused_rope(bool on) {
    ExecPolicy p;
    p.kernels.fused_rope = on;
    return p;
}

}  // namespace

TEST(GpuInfinityFusedRope, SameBitsAndFewerLaunchesPerStep) {
    REQUIRE_CUDA_GRAPHS();
    {
        std::string why;
        const auto x = at::zeros({1, 1, 1, 2}, at::TensorOptions().device(at::kCUDA));
        if (!kernels::fused_rope_supported(x, at::zeros({2, 1, 1}, x.options()), at::kFloat, {},
                                           &why))
            GTEST_SKIP() << why;
    }
    c10::InferenceMode guard;
    const auto s = infinity_schedule(1.0, "0.06M");  // 7 scales, 16 x 16 last
    const auto view = infinity_hook_view(small_config(), s);
    ASSERT_TRUE(view.has_value());
    const std::string sparvar = R"({"sparvar": {"enabled": true, "sparse_scales": 2,
        "sink_scales": 2, "windows": [1, 3], "middle_window": 1, "block": 64,
        "query_block": 64, "top_k": 0.2}})";
    for (bool autocast : {true, false}) {
        auto sampler = sampler_on_cuda(autocast);
        // SparVAR's kernels take the bf16 operands of the official mode.
        const auto configs = autocast ? std::vector<std::string>{std::string(), sparvar}
                                      : std::vector<std::string>{std::string()};
        for (const std::string& json : configs) {
            SCOPED_TRACE(std::string(autocast ? "bf16-autocast" : "fp32") +
                         (json.empty() ? " baseline" : " sparvar"));
            const auto hooks = json.empty()
                                   ? nullptr
                                   : build_accelerators(AccelConfig::from_argument(json), *view);
            std::vector<InfinitySampleResult> runs;  // fused graphs, aten graphs, fused, aten
            for (bool graphs : {true, false})
                for (bool fused : {true, false}) {
                    sampler.set_exec_policy(with_fused_rope(fused));
                    runs.push_back(sampler.sample(text(), s, options(graphs), hooks.get()));
                }
            ASSERT_TRUE(runs[0].cuda_graphs);
            ASSERT_TRUE(runs[1].cuda_graphs);
            for (size_t r = 1; r < runs.size(); ++r) {
                ASSERT_EQ(runs[r].bits.size(), runs[0].bits.size());
                for (size_t si = 0; si < runs[0].bits.size(); ++si)
                    EXPECT_TRUE(runs[r].bits[si].equal(runs[0].bits[si]))
                        << "run " << r << " scale " << si;
                EXPECT_TRUE(runs[r].summed_codes.equal(runs[0].summed_codes)) << "run " << r;
            }
            // The graphs' kernel nodes per step: the ATen RoPE launches ~16 kernels per block
            // for q and k (products, differences, sums, stacks, casts), the fused one 1.
            const auto& fused = runs[0].step_costs;
            const auto& aten = runs[1].step_costs;
            ASSERT_EQ(fused.size(), aten.size());
            ASSERT_FALSE(fused.empty());
            for (size_t i = 0; i < fused.size(); ++i) {
                EXPECT_GT(fused[i].launches, 0) << "step " << i;
                EXPECT_LE(fused[i].launches + small_config().depth, aten[i].launches)
                    << "step " << i;
            }
            std::printf("[rope] %s%s launches per step (fused/aten):", autocast ? "bf16" : "fp32",
                        json.empty() ? "" : " sparvar");
            for (size_t i = 0; i < fused.size(); ++i)
                std::printf(" %lld/%lld", static_cast<long long>(fused[i].launches),
                            static_cast<long long>(aten[i].launches));
            std::printf("\n");
        }
    }
}
