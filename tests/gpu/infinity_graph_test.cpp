// CUDA graphs for Infinity's sampling loop (core/sampling/infinity_sampler.cpp): replays give
// exactly the eager loop's bits for a seed, in fp32 and the official bf16 mode, with guidance on
// the logits and at a layer's output, on the capturing call and on replays, for a new text of
// another length (its own graphs), and with the accelerators that have a graph signature
// (LazyVAR's grouped steps included; AMS-KV's graphed steps with an eager tail). Graphs stay off
// without guidance and on the CPU. Skips without CUDA.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "core/accel/accel_config.h"
#include "core/accel/ams_kv.h"
#include "core/pipeline.h"
#include "core/sampling/infinity_sampler.h"
#include "kernels/cuda_graph.h"
#include "tests/gpu/tiny_infinity_cuda.h"

using namespace varscope;

#define REQUIRE_CUDA_GRAPHS()                                \
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device"; \
    if (!kernels::cuda_graphs_built()) GTEST_SKIP() << "built without CUDA kernels"

namespace {

// Six blocks: layer -5 (a cfg_insertion_layer below) exists.
InfinityConfig small_config() {
    return varscope::testing::tiny_infinity_cuda_config(6);
}

InfinitySampler sampler_on_cuda(bool bf16) {
    return varscope::testing::tiny_infinity_sampler_on_cuda(small_config().depth, bf16);
}

InfinityText text_of(std::vector<int64_t> lens, uint64_t seed) {
    return varscope::testing::tiny_infinity_text(std::move(lens), seed);
}

InfinitySampleOptions options(bool graphs, std::vector<int64_t> insertion = {0}) {
    auto o = varscope::testing::tiny_infinity_options(graphs);
    o.cfg_insertion_layer = std::move(insertion);
    return o;
}

void expect_same_bits(const InfinitySampleResult& a, const InfinitySampleResult& b,
                      const char* what) {
    ASSERT_EQ(a.bits.size(), b.bits.size()) << what;
    for (size_t si = 0; si < a.bits.size(); ++si)
        EXPECT_TRUE(a.bits[si].equal(b.bits[si])) << what << ": scale " << si;
    EXPECT_TRUE(a.summed_codes.equal(b.summed_codes)) << what << ": summed codes";
}

const InfinitySchedule& square() {
    static const auto s = infinity_schedule(1.0, "0.06M");  // 1 .. 16 x 16, 7 scales
    return s;
}

// An eager, a capturing and a replaying call with the hooks: the same bits, attention FLOPs and
// KV peak. Returns the eager run and the replay.
std::pair<InfinitySampleResult, InfinitySampleResult> expect_graphed_equals_eager(
    InfinitySampler& sampler, const InfinityText& text, SamplingHooks* hooks) {
    auto eager = sampler.sample(text, square(), options(false), hooks);
    const auto captured = sampler.sample(text, square(), options(true), hooks);
    EXPECT_TRUE(captured.cuda_graphs);
    expect_same_bits(captured, eager, "capturing call");
    auto replayed = sampler.sample(text, square(), options(true), hooks);
    EXPECT_EQ(replayed.graph_capture_millis, 0.0);
    expect_same_bits(replayed, eager, "replay");
    EXPECT_EQ(replayed.attention_flops, eager.attention_flops);
    EXPECT_EQ(replayed.kv_bytes_peak, eager.kv_bytes_peak);
    return {std::move(eager), std::move(replayed)};
}

}  // namespace

TEST(InfinityGraph, GraphBitsEqualEagerBits) {
    REQUIRE_CUDA_GRAPHS();
    c10::InferenceMode guard;
    for (bool bf16 : {false, true}) {
        for (const auto& insertion : std::vector<std::vector<int64_t>>{{0}, {-5}}) {
            SCOPED_TRACE(std::string(bf16 ? "bf16" : "fp32") + " insertion " +
                         std::to_string(insertion[0]));
            auto sampler = sampler_on_cuda(bf16);
            const auto text = text_of({5, 11}, 1);
            const auto eager = sampler.sample(text, square(), options(false, insertion));
            EXPECT_FALSE(eager.cuda_graphs);
            const auto captured = sampler.sample(text, square(), options(true, insertion));
            EXPECT_TRUE(captured.cuda_graphs);
            EXPECT_GT(captured.graph_capture_millis, 0.0);
            expect_same_bits(captured, eager, "capturing call");
            const auto replayed = sampler.sample(text, square(), options(true, insertion));
            EXPECT_EQ(replayed.graph_capture_millis, 0.0);
            expect_same_bits(replayed, eager, "replay");
            EXPECT_EQ(replayed.kv_bytes, eager.kv_bytes);
            EXPECT_EQ(replayed.attention_flops, eager.attention_flops);
            // Another text of the same shape replays; another length captures its own graphs.
            const auto same_shape = text_of({5, 11}, 2);
            auto o = options(true, insertion);
            const auto a = sampler.sample(same_shape, square(), o);
            EXPECT_EQ(a.graph_capture_millis, 0.0);
            expect_same_bits(a, sampler.sample(same_shape, square(), options(false, insertion)),
                             "new text, same lengths");
            const auto longer = text_of({7, 3}, 3);
            const auto b = sampler.sample(longer, square(), o);
            EXPECT_GT(b.graph_capture_millis, 0.0);
            expect_same_bits(b, sampler.sample(longer, square(), options(false, insertion)),
                             "new lengths");
            EXPECT_EQ(sampler.cuda_graph_sets(), 2u);
            sampler.release_graphs();
            EXPECT_EQ(sampler.cuda_graph_sets(), 0u);
        }
    }
}

TEST(InfinityGraph, OffWithoutGuidance) {
    REQUIRE_CUDA_GRAPHS();
    auto sampler = sampler_on_cuda(false);
    auto o = options(true);
    o.cfg = 1.0;
    const auto r = sampler.sample(text_of({4}, 1), square(), o);
    EXPECT_FALSE(r.cuda_graphs);
}

// Each graph-safe method: graphed (capturing call and replay) == eager bits, FLOPs and KV bytes.
TEST(InfinityGraph, AcceleratorsGraphedEqualEager) {
    REQUIRE_CUDA_GRAPHS();
    const auto view = infinity_hook_view(small_config(), square());
    ASSERT_TRUE(view.has_value());
    const std::vector<std::pair<std::string, std::string>> methods{
        {"skip", R"({"skip": {"enabled": true, "last_n": 2}})"},
        {"fastvar", R"({"fastvar": {"enabled": true, "ratios": [0.4, 0.5]}})"},
        {"lazyvar no group", R"({"lazyvar": {"enabled": true, "start_scale": 4,
                                "group_size": 1, "ratios": [0.6]}})"},
        // Grouped steps (grouped_step.h): the last three scales in one pass, pruned with the
        // cumulative index; and a group of two without pruning.
        {"lazyvar", R"({"lazyvar": {"enabled": true, "start_scale": 4, "group_size": 3,
                       "ratios": [0.6, 0.5, 0.4]}})"},
        {"lazyvar group only", R"({"lazyvar": {"enabled": true, "start_scale": 5,
                                  "group_size": 2, "ratios": [1]}})"},
        {"sparvar csla", R"({"sparvar": {"enabled": true, "cs4a_fraction": 0,
                           "sparse_scales": 2, "sink_scales": 2, "windows": [1, 3],
                           "middle_window": 1, "block": 64}})"},
    };
    for (bool bf16 : {false, true}) {
        auto sampler = sampler_on_cuda(bf16);
        const auto text = text_of({5, 11}, 1);
        for (const auto& [name, json] : methods) {
            SCOPED_TRACE(name + (bf16 ? " bf16" : " fp32"));
            const auto hooks = build_accelerators(AccelConfig::from_argument(json), *view);
            ASSERT_TRUE(hooks);
            if (!hooks->graph_signature(*view)) {
                ADD_FAILURE() << "no graph signature";
                continue;
            }
            expect_graphed_equals_eager(sampler, text, hooks.get());
        }
    }
}

// AMS-KV's graph form in the Infinity loop (hooks.h): a compact cache owned by the graphs, the
// steps before the first possible promotion replayed, that step and the rest run eagerly on the
// graphs' cache. Capturing call, replay and a new text give exactly the eager bits, FLOPs and
// KV bytes, with promotions (theta 0), without (theta -1), at the paper's theta, with every step
// a graph (C_max = C_min) and with LazyVAR's grouped steps.
TEST(InfinityGraph, AmsKvGraphedStepsThenEagerEqualEager) {
    REQUIRE_CUDA_GRAPHS();
    const auto view = infinity_hook_view(small_config(), square());
    ASSERT_TRUE(view.has_value());
    const auto b = resolve_ams_kv_budgets(AmsKvConfig{}, *view);
    struct Setting {
        std::string name;
        nlohmann::json json;
        bool all_graphed;
    };
    const Setting settings[] = {
        {"theta 0", {{"ams_kv", {{"enabled", true}, {"theta", 0.0}}}}, false},
        {"theta -1", {{"ams_kv", {{"enabled", true}, {"theta", -1.0}}}}, false},
        {"paper", {{"ams_kv", {{"enabled", true}}}}, false},
        {"c_max = c_min",
         {{"ams_kv", {{"enabled", true}, {"c_min", b.c_min}, {"c_max", b.c_min}}}},
         true},
        {"lazyvar + theta 0",
         {{"lazyvar",
           {{"enabled", true}, {"start_scale", 5}, {"group_size", 2}, {"ratios", {1.0}}}},
          {"ams_kv", {{"enabled", true}, {"theta", 0.0}}}},
         false},
    };
    for (bool bf16 : {false, true}) {
        auto sampler = sampler_on_cuda(bf16);
        const auto text = text_of({5, 11}, 1);
        for (const auto& s : settings) {
            SCOPED_TRACE(s.name + (bf16 ? " bf16" : " fp32"));
            const auto hooks = build_accelerators(AccelConfig::from_json(s.json), *view);
            ASSERT_TRUE(hooks);
            ASSERT_TRUE(hooks->compact_kv_cache(*view));
            ASSERT_TRUE(hooks->graph_signature(*view).has_value());
            const auto [eager, replayed] = expect_graphed_equals_eager(sampler, text, hooks.get());
            EXPECT_EQ(replayed.kv_bytes, eager.kv_bytes);
            // The graphed steps are a prefix, at least the first step; all of them where no
            // layer can be promoted.
            int64_t graphed = 0;
            bool eager_seen = false;
            for (const auto& sc : replayed.step_costs) {
                if (sc.launches >= 0) {
                    EXPECT_FALSE(eager_seen)
                        << "graphed step at scale " << sc.scale << " after an eager one";
                    ++graphed;
                } else {
                    eager_seen = true;
                }
            }
            EXPECT_GE(graphed, 1);
            EXPECT_EQ(!eager_seen, s.all_graphed);
            const auto other = text_of({5, 11}, 2);
            expect_same_bits(sampler.sample(other, square(), options(true), hooks.get()),
                             sampler.sample(other, square(), options(false), hooks.get()),
                             "new text");
        }
    }
}
