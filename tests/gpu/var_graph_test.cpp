// CUDA graphs for the dense sampling loop (core/sampling/cuda_graph.h): replayed graphs must give
// exactly the tokens and features of the eager loop for a seed (the graphed block does the
// model's operations on the same values; sampling is eager in both), on the capturing call and on replays, for new labels with the same shape,
// per shape, in fp32 and bf16. Graphs stay off where something needs to see inside the steps
// (hooks, attention probes) and on the CPU. Skips without CUDA (the CPU test runs everywhere).
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include "core/accel/accel_config.h"
#include "core/io/module_binding.h"
#include "kernels/cuda_graph.h"
#include "tests/tiny_models.h"

using namespace varscope;

#define REQUIRE_CUDA_GRAPHS()                                                   \
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";                    \
    if (!kernels::cuda_graphs_built()) GTEST_SKIP() << "built without CUDA kernels"

namespace {

VarPipeline on_device(VarPipeline& cpu, Precision p) {
    auto gpu = VarPipeline::random(cpu.var_config(), cpu.vae_config(), 0, {"cuda", p});
    c10::InferenceMode g;
    bind_state_dict(*gpu.sampler().transformer(), module_state_dict(*cpu.sampler().transformer()),
                    {});
    bind_state_dict(*gpu.sampler().vqvae(), module_state_dict(*cpu.sampler().vqvae()), {});
    return gpu;
}

// Top-k / top-p sampling with CFG: the full token-drawing path of the official sampler.
VarSampleOptions options(std::vector<int64_t> classes, bool graphs) {
    VarSampleOptions o;
    o.class_ids = std::move(classes);
    o.seed = 11;
    o.cfg = 3.0;
    o.top_k = 20;
    o.top_p = 0.9;
    o.cuda_graphs = graphs;
    return o;
}

void expect_same_tokens(const VarSampleResult& a, const VarSampleResult& b, const char* what) {
    ASSERT_EQ(a.tokens.size(), b.tokens.size()) << what;
    for (size_t si = 0; si < a.tokens.size(); ++si)
        EXPECT_TRUE(a.tokens[si].equal(b.tokens[si])) << what << ": scale " << si;
    EXPECT_TRUE(a.f_hat.equal(b.f_hat)) << what << ": f_hat";
    // The decode is a graph too: cuDNN may pick another convolution algorithm for it.
    EXPECT_TRUE(at::allclose(a.images, b.images, 1e-4, 1e-5)) << what << ": images";
}

}  // namespace

TEST(VarGraph, GraphTokensEqualEagerTokens) {
    REQUIRE_CUDA_GRAPHS();
    auto cpu = varscope::testing::small_pipeline();
    for (auto precision : {Precision::Fp32, Precision::Bf16}) {
        SCOPED_TRACE(precision == Precision::Fp32 ? "fp32" : "bf16");
        auto gpu = on_device(cpu, precision);
        const auto eager = gpu.generate(options({3, 7}, false));
        EXPECT_FALSE(eager.cuda_graphs);
        EXPECT_EQ(gpu.sampler().cuda_graph_sets(), 0u);

        const auto captured = gpu.generate(options({3, 7}, true));
        EXPECT_TRUE(captured.cuda_graphs);
        EXPECT_GT(captured.graph_capture_millis, 0.0);
        expect_same_tokens(captured, eager, "capturing call");

        const auto replayed = gpu.generate(options({3, 7}, true));
        EXPECT_TRUE(replayed.cuda_graphs);
        EXPECT_EQ(replayed.graph_capture_millis, 0.0);
        expect_same_tokens(replayed, eager, "replay");
        EXPECT_EQ(replayed.attention_flops, eager.attention_flops);
        EXPECT_EQ(replayed.kv_bytes, eager.kv_bytes);
        EXPECT_EQ(gpu.sampler().cuda_graph_sets(), 1u);

        // Same shape, other labels and seed: the replay reads the new inputs.
        auto other = options({9, 0}, true);
        other.seed = 4;
        auto other_eager = other;
        other_eager.cuda_graphs = false;
        expect_same_tokens(gpu.generate(other), gpu.generate(other_eager), "new labels");
        EXPECT_EQ(gpu.sampler().cuda_graph_sets(), 1u);
    }
}

TEST(VarGraph, EachBatchSizeGetsItsOwnGraphs) {
    REQUIRE_CUDA_GRAPHS();
    auto cpu = varscope::testing::small_pipeline(2);
    auto gpu = on_device(cpu, Precision::Fp32);
    for (const std::vector<int64_t>& classes : {std::vector<int64_t>{1}, {1, 2, 3}, {5}}) {
        const auto graphed = gpu.generate(options(classes, true));
        const auto eager = gpu.generate(options(classes, false));
        expect_same_tokens(graphed, eager, "batch");
    }
    EXPECT_EQ(gpu.sampler().cuda_graph_sets(), 2u);  // batch 1 reused
    gpu.sampler().clear_cuda_graphs();
    EXPECT_EQ(gpu.sampler().cuda_graph_sets(), 0u);
}

TEST(VarGraph, SharedAdaLnAndRebindingWeights) {
    REQUIRE_CUDA_GRAPHS();
    auto cpu = varscope::testing::tiny_pipeline(3, /*shared_aln=*/true);
    auto gpu = on_device(cpu, Precision::Fp32);
    expect_same_tokens(gpu.generate(options({2, 6}, true)), gpu.generate(options({2, 6}, false)),
                       "shared AdaLN");
    // New weights bound into the model: the graphs must see them (recaptured or in place).
    auto other = varscope::testing::tiny_pipeline(8, true);
    {
        c10::InferenceMode g;
        bind_state_dict(*gpu.sampler().transformer(),
                        module_state_dict(*other.sampler().transformer()), {});
    }
    expect_same_tokens(gpu.generate(options({2, 6}, true)), gpu.generate(options({2, 6}, false)),
                       "rebound weights");
}

TEST(VarGraph, OffWhereStepsMustBeSeen) {
    REQUIRE_CUDA_GRAPHS();
    auto cpu = varscope::testing::small_pipeline();
    auto gpu = on_device(cpu, Precision::Fp32);
    const auto hooks = build_accelerators(AccelConfig::from_argument("skip"), gpu.var_config());
    ASSERT_TRUE(hooks);
    EXPECT_FALSE(gpu.generate(options({1}, true), hooks.get()).cuda_graphs);

    ProbeRecorder attention({{0}, {}, false, false});
    const auto probed = gpu.generate(options({1}, true), nullptr, &attention);
    EXPECT_FALSE(probed.cuda_graphs);
    EXPECT_FALSE(attention.attention().empty());

    // A probe that only records scales (the GUI's default) keeps the graphs.
    ProbeRecorder scales;
    const auto graphed = gpu.generate(options({1}, true), nullptr, &scales);
    EXPECT_TRUE(graphed.cuda_graphs);
    EXPECT_EQ(scales.scales().size(), graphed.tokens.size());
    expect_same_tokens(graphed, probed, "probe");
}

TEST(VarGraph, CpuIgnoresTheSwitch) {
    auto cpu = varscope::testing::tiny_pipeline();
    const auto a = cpu.generate(options({1, 2}, true));
    const auto b = cpu.generate(options({1, 2}, false));
    EXPECT_FALSE(a.cuda_graphs);
    expect_same_tokens(a, b, "cpu");
}
