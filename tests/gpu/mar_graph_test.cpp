// MAR under CUDA graphs: the graphed loop (whole step per graph without hooks, the reverse
// diffusion per graph with LazyMAR's hooks) gives exactly the eager loop's tokens for the same
// seed; a host synchronisation inside a step would make the capture fail. Skipped without CUDA.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "core/accel/lazymar.h"
#include "core/mar_pipeline.h"
#include "core/pipeline.h"
#include "kernels/cuda_graph.h"
#include "kernels/memory_stats.h"
#include "tests/tiny_mar.h"

using namespace varscope;

#define REQUIRE_CUDA_GRAPHS()                                \
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device"; \
    if (!kernels::cuda_graphs_built()) GTEST_SKIP() << "built without CUDA kernels"

namespace {

// 8x8 tokens of 4 channels, 3 + 3 blocks of width 64.
MarConfig small_mar_config() {
    MarConfig c = varscope::testing::small_mar_with_head(64, 2, "20");
    c.encoder_depth = c.decoder_depth = 3;
    c.vae_embed_dim = 4;
    return c;
}

MarSampleOptions options(double cfg, bool graphs) {
    MarSampleOptions o;
    o.class_ids = {3, 7};
    o.seed = 11;
    o.num_iter = 12;
    o.cfg = cfg;
    o.temperature = 0.95;
    o.time_steps = false;
    o.cuda_graphs = graphs;
    return o;
}

void expect_same_run(const MarSampleResult& a, const MarSampleResult& b) {
    ASSERT_EQ(a.tokens.sizes(), b.tokens.sizes());
    EXPECT_TRUE(at::equal(a.orders.cpu(), b.orders.cpu()));
    ASSERT_EQ(a.decoded.size(), b.decoded.size());
    for (size_t s = 0; s < a.decoded.size(); ++s)
        EXPECT_TRUE(at::equal(a.decoded[s].cpu(), b.decoded[s].cpu())) << "step " << s;
    const auto diff = (a.tokens.cpu() - b.tokens.cpu()).abs().max().item<double>();
    EXPECT_EQ(diff, 0.0) << "graphed tokens differ from eager ones";
    EXPECT_NEAR(a.attention_flops, b.attention_flops, 1e-6 * b.attention_flops);
}

}  // namespace

TEST(MarGraph, GraphedStepsEqualEagerTokens) {
    REQUIRE_CUDA_GRAPHS();
    for (auto prec : {Precision::Fp32, Precision::Bf16}) {
        auto pipe = MarPipeline::random(small_mar_config(), 3, {"cuda", prec});
        for (double cfg : {1.0, 3.0}) {
            const auto eager = pipe.generate(options(cfg, false));
            EXPECT_FALSE(eager.cuda_graphs);
            const auto first = pipe.generate(options(cfg, true));  // captures
            ASSERT_TRUE(first.cuda_graphs);
            const auto again = pipe.generate(options(cfg, true));  // replays only
            SCOPED_TRACE(std::string(prec == Precision::Fp32 ? "fp32" : "bf16") + " cfg " +
                         std::to_string(cfg));
            expect_same_run(first, eager);
            expect_same_run(again, eager);
            // Another seed through the same graphs: new draws are seen.
            auto other = options(cfg, true);
            other.seed = 12;
            auto other_eager = options(cfg, false);
            other_eager.seed = 12;
            const auto o = pipe.generate(other);
            expect_same_run(o, pipe.generate(other_eager));
            EXPECT_GT((o.tokens - eager.tokens).abs().max().item<double>(), 0.0);
        }
    }
}

// The whole-step graphs share one memory pool (MarGraphs::Pool::Chained): the same tokens as
// with a pool per graph, and less device memory held by the captured graphs.
TEST(MarGraph, ChainedStepGraphsShareOnePool) {
    REQUIRE_CUDA_GRAPHS();
    auto held_after_capture = [](bool chained, MarSampleResult* out) {
        LoadOptions lo{"cuda", Precision::Bf16};
        lo.exec.mar_chained_graph_pool = chained;  // VARSCOPE_MAR_GRAPH_POOL=own: false
        auto pipe = MarPipeline::random(small_mar_config(), 3, lo);
        kernels::empty_cuda_cache();
        const int64_t before = kernels::cuda_memory(0).reserved;
        *out = pipe.generate(options(3.0, true));              // captures 12 step graphs
        const auto again = pipe.generate(options(3.0, true));  // replays them
        expect_same_run(again, *out);
        kernels::empty_cuda_cache();  // what stays is held by the graphs (and the weights)
        return kernels::cuda_memory(0).reserved - before;
    };
    MarSampleResult own, chained;
    const int64_t own_bytes = held_after_capture(false, &own);
    const int64_t chained_bytes = held_after_capture(true, &chained);
    expect_same_run(chained, own);
    EXPECT_LT(chained_bytes, own_bytes)
        << "chained " << chained_bytes << " B, own " << own_bytes << " B";
    std::printf(
        "[MAR graphs] device memory held after capture: own pools %.1f MiB, one chained "
        "pool %.1f MiB\n",
        own_bytes / 1048576.0, chained_bytes / 1048576.0);
}

// Graph names of a run by kind: whole steps ("step_<i>") and reverse diffusions.
size_t graphs_named(const MarSampleResult& r, const std::string& prefix) {
    size_t n = 0;
    for (const auto& [name, nodes] : r.graph_kernel_nodes) n += name.rfind(prefix, 0) == 0;
    return n;
}

// A probe that takes only per-step records (times, decoded positions, previews, as the app's
// engine asks with its recording off) leaves the steps to graphs: the eager tokens, a record per
// step. One that wants attention maps keeps the steps eager. LazyMAR with such a probe: graphed
// without its records, eager with them; the eager run's tokens either way.
TEST(MarGraph, StepRecordsKeepGraphs) {
    REQUIRE_CUDA_GRAPHS();
    const MarConfig c = small_mar_config();
    auto pipe = MarPipeline::random(c, 3, {"cuda", Precision::Fp32});
    const auto eager = pipe.generate(options(3.0, false));
    ProbeRecorder::Selection steps_only;
    steps_only.fhat = true;
    steps_only.accel = false;
    ProbeRecorder rec(steps_only);
    const auto graphed = pipe.generate(options(3.0, true), nullptr, &rec);
    EXPECT_TRUE(graphed.cuda_graphs);
    EXPECT_GT(graphs_named(graphed, "step_"), 0u);
    expect_same_run(graphed, eager);
    const auto records = rec.scales();
    ASSERT_EQ(records.size(), size_t(options(3.0, true).num_iter));
    for (const auto& r : records) EXPECT_TRUE(r.f_hat.defined()) << "step " << r.scale;
    EXPECT_TRUE(rec.accel().empty());

    auto attention = steps_only;
    attention.layers = {1};
    ProbeRecorder watch(attention);
    const auto watched = pipe.generate(options(3.0, true), nullptr, &watch);
    EXPECT_FALSE(watched.cuda_graphs);
    EXPECT_FALSE(watch.attention().empty());
    // (Its tokens may differ a little: a recorded layer's attention is the eager path's.)

    LazyMarConfig lc = varscope::testing::graph_test_lazymar();
    lc.similarity_layer = 1;
    auto lazy_run = [&](bool records, bool graphs) {
        auto sel = steps_only;
        sel.accel = records;
        ProbeRecorder r(sel);
        auto h = make_lazymar_hooks(lc, c, &r);
        auto out = pipe.generate(options(3.0, graphs), h.chain.get(), &r);
        if (records) {
            EXPECT_FALSE(r.accel().empty());
        }
        return out;
    };
    const auto lazy_eager = lazy_run(false, false);
    const auto lazy_graphed = lazy_run(false, true);
    EXPECT_TRUE(lazy_graphed.cuda_graphs);
    EXPECT_GT(graphs_named(lazy_graphed, "step_"), 0u);
    expect_same_run(lazy_graphed, lazy_eager);
    const auto lazy_recorded = lazy_run(true, true);
    // Its records need eager steps: the transformer eager, only the diffusion as graphs (a new
    // graph set: its key has no hook signature).
    EXPECT_EQ(graphs_named(lazy_recorded, "step_"), 0u);
    EXPECT_GT(graphs_named(lazy_recorded, "diffusion_"), 0u);
    expect_same_run(lazy_recorded, lazy_eager);
}

// Hooks without a graph signature (here forced by ExecPolicy::mar_hook_step_graphs off,
// VARSCOPE_MAR_HOOK_GRAPHS=diffusion): the transformer eager, the reverse diffusion graphed.
TEST(MarGraph, LazyMarWithGraphedDiffusionEqualsEager) {
    REQUIRE_CUDA_GRAPHS();
    const MarConfig c = small_mar_config();
    auto pipe = MarPipeline::random(c, 5, {"cuda", Precision::Fp32});
    LazyMarConfig lc = varscope::testing::graph_test_lazymar();
    lc.similarity_layer = 1;
    auto run = [&](bool graphs) {
        auto hooks = make_lazymar(lc, c, nullptr);
        return pipe.generate(options(3.0, graphs), hooks.get());
    };
    const auto eager = run(false);
    ExecPolicy diffusion_graphs;
    diffusion_graphs.mar_hook_step_graphs = false;
    pipe.sampler().set_exec_policy(diffusion_graphs);
    const auto graphed = run(true);
    const auto again = run(true);
    EXPECT_TRUE(graphed.cuda_graphs);
    EXPECT_EQ(graphs_named(graphed, "step_"), 0u);
    EXPECT_GT(graphs_named(graphed, "diffusion_"), 0u);
    expect_same_run(graphed, eager);
    expect_same_run(again, eager);
}

// LazyMAR (token cache with the encoder cache, condition cache) as whole-step graphs: the
// eager run's tokens, stats and skipped branches, on the capturing call and on replays with a
// fresh hook object (its state lives in the graph set); a new schedule captures new graphs;
// with a similarity threshold (no signature) the transformer stays eager.
TEST(MarGraph, LazyMarWholeStepGraphsEqualEager) {
    REQUIRE_CUDA_GRAPHS();
    const MarConfig c = small_mar_config();
    for (auto prec : {Precision::Fp32, Precision::Bf16}) {
        auto pipe = MarPipeline::random(c, 5, {"cuda", prec});
        LazyMarConfig lc = varscope::testing::graph_test_lazymar();
        lc.similarity_layer = 1;
        for (double cfg : {3.0, 1.0}) {
            for (int64_t period : {3, 4}) {
                lc.period = period;
                SCOPED_TRACE(std::string(prec == Precision::Fp32 ? "fp32" : "bf16") + " cfg " +
                             std::to_string(cfg) + " period " + std::to_string(period));
                auto run = [&](bool graphs, LazyMarHooks* keep = nullptr) {
                    auto h = make_lazymar_hooks(lc, c, nullptr);
                    auto r = pipe.generate(options(cfg, graphs), h.chain.get());
                    if (keep) *keep = h;
                    return r;
                };
                LazyMarHooks he, hg, hr;
                const auto eager = run(false, &he);
                const auto graphed = run(true, &hg);   // captures
                const auto replayed = run(true, &hr);  // replays only, another hook object
                ASSERT_TRUE(graphed.cuda_graphs);
                EXPECT_EQ(graphs_named(graphed, "step_"), size_t(options(cfg, true).num_iter));
                EXPECT_EQ(graphs_named(graphed, "diffusion_"), 0u);
                expect_same_run(graphed, eager);
                expect_same_run(replayed, eager);
                for (const LazyMarHooks* h : {&hg, &hr}) {
                    EXPECT_EQ(h->skipped_unconditional_steps(), he.skipped_unconditional_steps());
                    ASSERT_EQ(h->token_stats().size(), he.token_stats().size());
                    for (size_t s = 0; s < he.token_stats().size(); ++s) {
                        const auto &a = h->token_stats()[s], &b = he.token_stats()[s];
                        EXPECT_EQ(a.refresh, b.refresh) << "step " << s;
                        EXPECT_EQ(a.rows, b.rows) << "step " << s;
                        EXPECT_EQ(a.computed, b.computed) << "step " << s;
                    }
                }
                if (cfg != 1.0) {
                    EXPECT_FALSE(he.skipped_unconditional_steps().empty());
                }
                // Caches really used: the baseline's tokens differ.
                const auto base = pipe.generate(options(cfg, true));
                EXPECT_GT((base.tokens - eager.tokens).abs().max().item<double>(), 0.0);
            }
        }
        // A threshold: no signature, so the transformer is eager (diffusion graphs only; a
        // fresh pipeline, whose graph set holds no baseline step graphs).
        lc.min_similarity = 0.5;
        auto fresh = MarPipeline::random(c, 5, {"cuda", prec});
        auto h = make_lazymar(lc, c, nullptr);
        const auto thr = fresh.generate(options(3.0, true), h.get());
        EXPECT_TRUE(thr.cuda_graphs);
        EXPECT_EQ(graphs_named(thr, "step_"), 0u);
        EXPECT_GT(graphs_named(thr, "diffusion_"), 0u);
    }
}
