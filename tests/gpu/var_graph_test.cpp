// CUDA graphs for the sampling loop (core/sampling/cuda_graph.h): replayed graphs must give
// exactly the tokens and features of the eager loop for a seed (the graphed block does the
// model's operations on the same values; sampling is eager in both), on the capturing call and on
// replays, for new labels with the same shape, per shape, in fp32, bf16 and bf16-autocast.
// Accelerators with a graph signature (skip, FastVAR, LazyVAR, SparVAR's CS4A and CSLA) are
// captured inside the steps and must give the eager tokens, FLOPs and KV bytes too. Graphs stay off
// where something needs to see inside the steps (hooks without a signature, attention probes) and
// on the CPU. Skips without CUDA (the CPU test runs everywhere).
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <string>

#include "core/accel/accel_config.h"
#include "core/io/module_binding.h"
#include "core/sampling/cuda_graph.h"
#include "kernels/cuda_graph.h"
#include "tests/gpu/device_pipelines.h"
#include "tests/tiny_models.h"

using namespace varscope;

#define REQUIRE_CUDA_GRAPHS()                                \
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device"; \
    if (!kernels::cuda_graphs_built()) GTEST_SKIP() << "built without CUDA kernels"

namespace {

VarPipeline on_device(VarPipeline& cpu, Precision p, bool autocast = false) {
    return varscope::testing::with_weights_of(cpu, {"cuda", p, autocast});
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
    for (const auto& [precision, autocast] : std::vector<std::pair<Precision, bool>>{
             {Precision::Fp32, false}, {Precision::Bf16, false}, {Precision::Bf16, true}}) {
        SCOPED_TRACE(precision == Precision::Fp32 ? "fp32" : autocast ? "bf16-autocast" : "bf16");
        auto gpu = on_device(cpu, precision, autocast);
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

// The tf32 precision (LoadOptions::tf32, the official demo's `tf32 = True`): TF32 matrix
// products while sampling (seen from a hook: the setting is on and the logits differ from fp32's),
// graphs == eager, and torch's process-wide setting is back to what it was afterwards.
TEST(VarGraph, Tf32GraphsEqualEagerAndTheSettingIsRestored) {
    REQUIRE_CUDA_GRAPHS();
    struct Watch : SamplingHooks {
        bool tf32_seen = true;
        at::Tensor last_logits;
        void on_scale_begin(ScaleContext&) override {
            tf32_seen = tf32_seen && at::globalContext().allowTF32CuBLAS();
        }
        void on_logits(const ScaleContext&, at::Tensor& logits) override {
            last_logits = logits.to(at::kCPU, at::kDouble, false, true);
        }
    };
    auto cpu = varscope::testing::small_pipeline();
    auto bind = [&](LoadOptions o) { return varscope::testing::with_weights_of(cpu, o); };
    auto tf32 = bind(load_options("cuda", "tf32"));
    auto fp32 = bind(load_options("cuda", "fp32"));
    EXPECT_TRUE(tf32.sampler().tf32());
    const bool before = at::globalContext().allowTF32CuBLAS();

    Watch on, off;
    tf32.generate(options({3, 7}, false), &on);
    fp32.generate(options({3, 7}, false), &off);
    EXPECT_TRUE(on.tf32_seen);
    EXPECT_FALSE(off.tf32_seen && !before) << "fp32 sampled with TF32 on";
    ASSERT_TRUE(on.last_logits.defined() && off.last_logits.defined());
    EXPECT_GT((on.last_logits - off.last_logits).abs().max().item<double>(), 0.0)
        << "the tf32 run computed exactly what fp32 did: TF32 was not used";
    EXPECT_EQ(at::globalContext().allowTF32CuBLAS(), before);

    const auto eager = tf32.generate(options({3, 7}, false));
    const auto captured = tf32.generate(options({3, 7}, true));
    ASSERT_TRUE(captured.cuda_graphs);
    expect_same_tokens(captured, eager, "tf32 capturing call");
    expect_same_tokens(tf32.generate(options({3, 7}, true)), eager, "tf32 replay");
    EXPECT_EQ(at::globalContext().allowTF32CuBLAS(), before);
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

// A new shape's graphs release the cached ones when the device could not hold both (the app
// alternating baseline and accelerated runs at a batch that fits once; the benchmark's
// event-timed graphs after its timed ones), and keep them when it can. The available memory is
// the cache's probe: a first version capped the process with a memory fraction and ran the tiny
// model out of memory in its eager ops instead (H200, session 27).
TEST(VarGraph, ANewSetReleasesCachedSetsOnlyWhenMemoryIsShort) {
    REQUIRE_CUDA_GRAPHS();
    auto cpu = varscope::testing::small_pipeline(2);
    auto gpu = on_device(cpu, Precision::Fp32);
    const std::vector<int64_t> four{1, 2, 3, 4}, five{1, 2, 3, 4, 5};
    gpu.generate(options(four, true));
    gpu.generate(options(five, true));
    EXPECT_EQ(gpu.sampler().cuda_graph_sets(), 2u);  // room for both on a real device
    gpu.sampler().clear_cuda_graphs();

    const auto eager = gpu.generate(options(five, false));
    gpu.generate(options(four, true));
    ASSERT_EQ(gpu.sampler().cuda_graph_sets(), 1u);
    std::vector<int> asked;
    gpu.sampler().set_graph_memory_probe([&](int device) {
        asked.push_back(device);
        return int64_t{0};
    });
    const auto graphed = gpu.generate(options(five, true));
    gpu.sampler().set_graph_memory_probe(nullptr);
    EXPECT_EQ(asked, std::vector<int>{0});
    EXPECT_EQ(gpu.sampler().cuda_graph_sets(), 1u);  // the batch-4 set was released
    expect_same_tokens(graphed, eager, "after the release");
    gpu.generate(options(five, true));  // replays: no new set, nothing asked
    EXPECT_EQ(asked.size(), 1u);
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
    struct Opaque : SamplingHooks {};  // no signature: the default
    Opaque opaque;
    EXPECT_FALSE(gpu.generate(options({1}, true), &opaque).cuda_graphs);

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

namespace {

// The CSLA masks below are block-sparse on this model, so the kernel path runs inside the graphs
// in bf16.
VarPipeline kernel_sized(Precision precision, bool autocast = false) {
    auto cpu = varscope::testing::kernel_sized_cpu_pipeline();
    return on_device(cpu, precision, autocast);
}

// The graph-safe settings of each method on the 8-scale model.
const std::vector<std::pair<std::string, std::string>>& graph_safe_methods() {
    static const std::vector<std::pair<std::string, std::string>> m{
        {"skip", R"({"skip": {"enabled": true, "last_n": 2}})"},
        {"fastvar", R"({"fastvar": {"enabled": true, "ratios": [0.4, 0.5]}})"},
        {"fastvar 3", R"({"fastvar": {"enabled": true, "ratios": [0.3, 0.5, 1.0]}})"},
        {"lazyvar", R"({"lazyvar": {"enabled": true, "start_scale": 5, "group_size": 2,
                       "ratios": [0.5, 0.4, 0.4]}})"},
        {"lazyvar no group", R"({"lazyvar": {"enabled": true, "start_scale": 4,
                                "group_size": 1, "ratios": [0.6]}})"},
        {"sparvar csla", R"({"sparvar": {"enabled": true, "cs4a_fraction": 0,
                           "sparse_scales": 2, "sink_scales": 2, "windows": [1, 3],
                           "middle_window": 1, "block": 64}})"},
        {"sparvar csla token mask", R"({"sparvar": {"enabled": true, "cs4a_fraction": 0,
                                      "sparse_scales": 2, "sink_scales": 2, "windows": [1, 3],
                                      "middle_window": 1, "block": 64, "token_mask": true}})"},
        // CS4A (shallow layers) with CSLA (deep): Top-K at the decision scale, mapped lists.
        {"sparvar cs4a", R"({"sparvar": {"enabled": true, "sparse_scales": 2, "sink_scales": 2,
                           "windows": [1, 3], "middle_window": 1, "block": 64,
                           "query_block": 64, "top_k": 0.2}})"},
        {"sparvar cs4a patch", R"({"sparvar": {"enabled": true, "cs4a_fraction": 1,
                                 "sparse_scales": 2, "sink_scales": 1, "query_block": 64,
                                 "top_k": 0.1, "patch_mapping": true, "use_cache": false}})"},
        {"sparvar+skip", R"({"sparvar": {"enabled": true, "top_k": 1, "sparse_scales": 2,
                           "sink_scales": 2, "windows": [1, 3], "middle_window": 1,
                           "block": 64}, "skip": {"enabled": true, "last_n": 1}})"},
    };
    return m;
}

}  // namespace

// Each graph-safe method: the graphed run (capturing call, replays, new labels) draws exactly the
// eager run's tokens, reports the same attention FLOPs and KV bytes, and really ran as graphs.
TEST(VarGraph, AcceleratorsGraphedEqualEager) {
    REQUIRE_CUDA_GRAPHS();
    for (const auto& [precision, autocast] : std::vector<std::pair<Precision, bool>>{
             {Precision::Bf16, false}, {Precision::Fp32, false}, {Precision::Bf16, true}}) {
        const std::string prec = precision == Precision::Fp32 ? "fp32"
                                 : autocast                   ? "bf16-autocast"
                                                              : "bf16";
        auto gpu = kernel_sized(precision, autocast);
        for (const auto& [name, json] : graph_safe_methods()) {
            SCOPED_TRACE(name + " " + prec);
            const auto hooks =
                build_accelerators(AccelConfig::from_argument(json), gpu.var_config());
            ASSERT_TRUE(hooks);
            ASSERT_TRUE(hooks->graph_signature(gpu.var_config()).has_value());
            const auto eager = gpu.generate(options({3, 7}, false), hooks.get());
            EXPECT_FALSE(eager.cuda_graphs);
            const auto captured = gpu.generate(options({3, 7}, true), hooks.get());
            EXPECT_TRUE(captured.cuda_graphs);
            expect_same_tokens(captured, eager, "capturing call");
            const auto replayed = gpu.generate(options({3, 7}, true), hooks.get());
            EXPECT_TRUE(replayed.cuda_graphs);
            EXPECT_EQ(replayed.graph_capture_millis, 0.0);
            expect_same_tokens(replayed, eager, "replay");
            EXPECT_EQ(replayed.attention_flops, eager.attention_flops);
            EXPECT_EQ(replayed.kv_bytes, eager.kv_bytes);
            EXPECT_EQ(replayed.kv_bytes_peak, eager.kv_bytes_peak);
            // A fresh hook object is another object: its graphs are captured anew (captured work
            // reads the buffers of the object it was captured with, which may be gone; the
            // runners reuse one object per config), and it draws what eager draws.
            const auto fresh =
                build_accelerators(AccelConfig::from_argument(json), gpu.var_config());
            auto other = options({9, 0}, true);
            other.seed = 4;
            auto other_eager = other;
            other_eager.cuda_graphs = false;
            const auto graphed_other = gpu.generate(other, fresh.get());
            EXPECT_GT(graphed_other.graph_capture_millis, 0.0);
            expect_same_tokens(graphed_other, gpu.generate(other_eager, fresh.get()),
                               "new labels, new hooks");
        }
        // Pruning and sparsity differ from the baseline: the graphs were really per method.
        EXPECT_GE(gpu.sampler().cuda_graph_sets(), 1u);
    }
}

// The bf16-autocast blocks' element-wise kernels (KernelPolicy::fused_elementwise: AdaLN's
// modulation with the bf16 cast, the gated residual sums) draw exactly the tokens of the ATen
// compositions, eager and graphed, dense and with a method that prunes rows.
TEST(VarGraph, FusedElementwiseKernelsChangeNoToken) {
    REQUIRE_CUDA_GRAPHS();
    auto gpu = kernel_sized(Precision::Bf16, /*autocast=*/true);
    ExecPolicy aten;
    aten.kernels.fused_elementwise = false;
    const std::string fastvar = R"({"fastvar": {"enabled": true, "ratios": [0.4, 0.5]}})";
    for (const std::string& json : {std::string(), fastvar}) {
        const auto hooks =
            json.empty() ? nullptr
                         : build_accelerators(AccelConfig::from_argument(json), gpu.var_config());
        for (bool graphs : {false, true}) {
            SCOPED_TRACE((json.empty() ? "baseline" : "fastvar") +
                         std::string(graphs ? " graphs" : " eager"));
            gpu.sampler().set_exec_policy(ExecPolicy{});
            const auto fused = gpu.generate(options({3, 7}, graphs), hooks.get());
            gpu.sampler().set_exec_policy(aten);
            const auto plain = gpu.generate(options({3, 7}, graphs), hooks.get());
            expect_same_tokens(fused, plain, "fused vs ATen element-wise");
        }
    }
}

// A hook that breaks the contract (another row count on a replay) is caught, not replayed.
TEST(VarGraph, ChangedRowCountsAreRejected) {
    REQUIRE_CUDA_GRAPHS();
    auto cpu = varscope::testing::small_pipeline();
    auto gpu = on_device(cpu, Precision::Fp32);
    struct Pruner : SamplingHooks {
        int64_t keep = 3;
        std::optional<std::string> graph_signature(const VarConfig&) override { return "pruner"; }
        void on_scale_begin(ScaleContext& ctx) override {
            if (ctx.scale == 3) ctx.segments[0].rows = at::arange(keep, at::kLong);
        }
    } pruner;
    const auto first = gpu.generate(options({1}, true), &pruner);
    EXPECT_TRUE(first.cuda_graphs);
    EXPECT_EQ(first.tokens[3].ge(0).sum().item<int64_t>(), 3);
    pruner.keep = 5;
    EXPECT_THROW(gpu.generate(options({1}, true), &pruner), std::logic_error);
    // The broken set was dropped: the new count is captured afresh.
    const auto again = gpu.generate(options({1}, true), &pruner);
    EXPECT_EQ(again.tokens[3].ge(0).sum().item<int64_t>(), 5);
}
