// The app's engine (ui/engine, no Qt) on CUDA: which runs replay CUDA graphs. The app compares
// times only between runs made the same way (ui/generation_worker.cpp), and its sweeps rely on
// what is checked here: a run that records nothing replays graphs; one that records attention
// maps, or an accelerator that keeps its records, runs eagerly; FastVAR without records replays
// graphs; AMS-KV without records replays graphs (the steps before its first possible promotion),
// with them it runs eagerly; cuda_graphs = false is eager. Every way draws the same
// tokens. Skips without CUDA.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "kernels/cuda_graph.h"
#include "tests/gpu/device_pipelines.h"
#include "ui/engine/engine.h"

using namespace varscope;

namespace {

void expect_same_tokens(const gui::RunOutput& a, const gui::RunOutput& b, const char* what) {
    ASSERT_EQ(a.scales.size(), b.scales.size()) << what;
    for (size_t i = 0; i < a.scales.size(); ++i) {
        ASSERT_FALSE(a.scales[i].tokens.empty()) << what << ": scale " << i;
        EXPECT_EQ(a.scales[i].tokens, b.scales[i].tokens) << what << ": scale " << i;
    }
}

}  // namespace

TEST(GpuEngine, GraphsOnlyWhereNothingRecordedNeedsEagerSteps) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    if (!kernels::cuda_graphs_built()) GTEST_SKIP() << "built without CUDA kernels";
    auto cpu = varscope::testing::kernel_sized_cpu_pipeline();
    gui::Engine engine;
    gui::ModelSource src;
    src.kind = gui::ModelSource::Kind::Custom;
    src.custom_name = "kernel-sized-random";
    src.device = "cuda";
    engine.set_pipeline(std::make_unique<VarPipeline>(varscope::testing::with_weights_of(
                            cpu, {"cuda", Precision::Fp32, false})),
                        src);

    gui::GenerationSettings timing;  // as a sweep runs: nothing recorded
    timing.class_id = 1;
    timing.seed = 5;
    timing.cfg = 2.0;
    timing.top_k = 20;
    timing.top_p = 0.9;
    timing.attention_layer = -1;
    timing.filmstrip = false;
    timing.accel_records = false;

    const auto graphed = engine.run(timing, false);
    EXPECT_TRUE(graphed.cuda);
    EXPECT_TRUE(graphed.cuda_graphs) << "a baseline that records nothing replays graphs";
    const auto replayed = engine.run(timing, false);
    EXPECT_TRUE(replayed.cuda_graphs);
    expect_same_tokens(graphed, replayed, "replay");

    auto eager_settings = timing;
    eager_settings.cuda_graphs = false;
    const auto eager = engine.run(eager_settings, false);
    EXPECT_TRUE(eager.cuda);
    EXPECT_FALSE(eager.cuda_graphs);
    expect_same_tokens(graphed, eager, "eager baseline");

    auto inspecting = timing;  // as the app's comparison runs: attention maps and previews
    inspecting.attention_layer = 0;
    inspecting.filmstrip = true;
    inspecting.accel_records = true;
    const auto recorded = engine.run(inspecting, false);
    EXPECT_FALSE(recorded.cuda_graphs) << "attention maps need eager steps";
    EXPECT_FALSE(recorded.attention.empty());
    expect_same_tokens(graphed, recorded, "recording baseline");

    auto fastvar = timing;
    fastvar.accel_json = R"({"fastvar": {"enabled": true, "ratios": [0.4, 0.5]}})";
    const auto fast_graphed = engine.run(fastvar, true);
    EXPECT_TRUE(fast_graphed.cuda_graphs) << "FastVAR without records replays graphs";
    EXPECT_TRUE(fast_graphed.accel.empty()) << "no records were asked for";
    fastvar.accel_records = true;
    const auto fast_recorded = engine.run(fastvar, true);
    EXPECT_FALSE(fast_recorded.cuda_graphs) << "FastVAR's records need eager steps";
    EXPECT_FALSE(fast_recorded.accel.empty());
    expect_same_tokens(fast_graphed, fast_recorded, "FastVAR");

    auto ams = timing;
    ams.accel_json = R"({"ams_kv": {"enabled": true}})";
    const auto ams_graphed = engine.run(ams, true);
    EXPECT_TRUE(ams_graphed.cuda);
    EXPECT_TRUE(ams_graphed.cuda_graphs) << "AMS-KV replays its steps before a possible promotion";
    ams.accel_records = true;
    const auto ams_recorded = engine.run(ams, true);
    EXPECT_FALSE(ams_recorded.cuda_graphs) << "AMS-KV's records need eager steps";
    EXPECT_FALSE(ams_recorded.accel.empty());
    expect_same_tokens(ams_graphed, ams_recorded, "AMS-KV");
}
