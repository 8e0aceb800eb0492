// AMS-KV on CUDA: the similarity in half precision (unit keys; the fused CUDA kernel since v3,
// kernels/scale_similarity.h) against the CPU float reference, the compact cache's rolling layer on
// the device, the policy in the sampling loop (budgets held, memory as accounted), and its CUDA
// graph form (graphed steps up to the first possible promotion, eager after: the eager tokens) on
// random VAR-d16 / d30 models at 256px and 1024px. Every test skips without a CUDA device.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "core/accel/accel_config.h"
#include "core/accel/ams_kv.h"
#include "core/sampling/kv_cache.h"
#include "kernels/cuda_graph.h"
#include "tests/tiny_models.h"

using namespace varscope;

#define REQUIRE_CUDA() \
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device"

namespace {

at::Tensor unit(const at::Tensor& k) {
    return k / k.norm(2, {-1}, true);
}

}  // namespace

TEST(GpuAmsKv, HalfPrecisionSimilarityMatchesCpu) {
    REQUIRE_CUDA();
    at::manual_seed(7);
    // VAR-d30's last step at batch 4 (8 rows with CFG): scale 13x13 -> 16x16, 30 heads x 64.
    const int64_t R = 8, H = 30, c = 64;
    for (auto [pp, pc] : std::vector<std::pair<int64_t, int64_t>>{{10, 13}, {13, 16}}) {
        auto prev = unit(at::randn({R, H, pp * pp, c}));
        // Keys related to the upsampled previous ones, as in a real model: S near θ.
        auto up = at::upsample_bilinear2d(prev.permute({0, 1, 3, 2}).reshape({R, H * c, pp, pp}),
                                          {pc, pc}, false)
                      .reshape({R, H, c, pc * pc})
                      .permute({0, 1, 3, 2});
        auto cur = unit(up + 0.6 * at::randn({R, H, pc * pc, c}) / 8.0);
        const double want = ams_kv::similarity(prev, pp, cur, pc);
        EXPECT_LT(want, -0.001);
        // Half precision on the device, keys token-major as the cache and the model hold them.
        auto token_major = [](const at::Tensor& k) {
            return k.permute({0, 2, 1, 3}).contiguous().permute({0, 2, 1, 3});
        };
        const auto ph = token_major(prev.to(at::kCUDA, at::kHalf));
        const auto ch = token_major(cur.to(at::kCUDA, at::kHalf));
        const double got = ams_kv::similarity(ph, pp, ch, pc, /*normalize=*/false);
        EXPECT_NEAR(got, want, 2e-4 * std::abs(want) + 2e-6) << pp;
        // Float on the device (the Gram form's float GEMMs could run in TF32 and failed at 1e-5
        // relative on an H100; the fused kernel computes the differences in float32).
        const double got32 = ams_kv::similarity(prev.cuda(), pp, cur.cuda(), pc);
        EXPECT_NEAR(got32, want, 2e-3 * std::abs(want)) << pp;
    }
}

TEST(GpuAmsKv, RollingCacheOnTheDevice) {
    REQUIRE_CUDA();
    const auto opt = at::TensorOptions(at::kCUDA).dtype(at::kHalf);
    auto cache = KvCache::compact(1, 2, 3, 8, opt);
    cache.reserve(0, 12);
    std::vector<int64_t> model;  // CLRU over ids: 2 pinned + the 10 most recent
    int64_t next = 0;
    for (int64_t n : {1, 4, 5, 9, 16, 3}) {
        auto ids = at::arange(next, next + n, opt.dtype(at::kFloat)).view({1, 1, n, 1});
        auto k = ids.expand({2, 3, n, 8}).to(at::kHalf).contiguous();
        cache.append(0, k, -k);
        for (int64_t i = 0; i < n; ++i) model.push_back(next + i);
        if (model.size() > 12) {
            if (!cache.is_rolling(0)) cache.set_window(0, 2, 10);
            model.erase(model.begin() + 2, model.end() - 10);
        }
        next += n;
        auto [kk, vv] = cache.view(0);
        EXPECT_TRUE(at::equal(vv, -kk));
        auto seq = cache.keys(0, 0, cache.length(0)).select(0, 1).select(0, 2).select(1, 0);
        auto ids_seq = seq.to(at::kCPU, at::kLong);
        EXPECT_EQ(std::vector<int64_t>(ids_seq.data_ptr<int64_t>(),
                                       ids_seq.data_ptr<int64_t>() + ids_seq.numel()),
                  model);
    }
    EXPECT_EQ(cache.allocated_bytes(), 12 * cache.token_bytes());
}

TEST(GpuAmsKv, PolicyInTheLoopHoldsItsBudgets) {
    REQUIRE_CUDA();
    auto cpu = varscope::testing::small_pipeline();
    auto gpu =
        VarPipeline::random(cpu.var_config(), cpu.vae_config(), 1, {"cuda", Precision::Fp16});
    const auto& c = gpu.var_config();
    auto o = varscope::testing::exact_options({3, 5}, 11);
    o.cuda_graphs = false;  // the eager loop for both (graphs == eager is tested elsewhere)
    const auto base = gpu.generate(o);
    // θ = -1: no layer is ever cache-demanding, so every layer ends at C_min exactly.
    AmsKvConfig cfg;
    cfg.enabled = true;
    cfg.theta = -1.0;
    auto hooks = make_ams_kv(cfg, c, nullptr);
    const auto b = resolve_ams_kv_budgets(cfg, c);
    const auto res = gpu.generate(o, hooks.get());
    EXPECT_TRUE(res.images.isfinite().all().item<bool>());
    const int64_t token_bytes = 2 * 2 * 2 * c.embed_dim * 2;  // K+V, 2B rows, fp16
    EXPECT_EQ(res.kv_bytes, c.depth * b.c_min * token_bytes);
    EXPECT_EQ(res.kv_bytes_peak, res.kv_bytes);
    EXPECT_LT(res.kv_bytes, base.kv_bytes);
    // Unlimited budgets: the baseline's tokens exactly.
    const int64_t total = c.total_tokens();
    cfg.theta = -0.008;
    cfg.c_min = cfg.c_max = total;
    auto off = make_ams_kv(cfg, c, nullptr);
    const auto same = gpu.generate(o, off.get());
    for (size_t si = 0; si < base.tokens.size(); ++si)
        EXPECT_TRUE(same.tokens[si].equal(base.tokens[si])) << si;
}

namespace {

// A random VAR of `depth` (the official recipe: heads = depth, width 64 * depth, official init)
// and a default VQVAE for the schedule, on the device in bf16.
VarPipeline random_var(int64_t depth, const std::vector<int64_t>& patch_nums) {
    VqvaeConfig vae;
    vae.patch_nums = patch_nums;
    return VarPipeline::random(VarConfig::for_depth(depth, patch_nums), vae, 3,
                               {"cuda", Precision::Bf16});
}

void expect_same_run(const VarSampleResult& got, const VarSampleResult& want, const char* what) {
    ASSERT_EQ(got.tokens.size(), want.tokens.size()) << what;
    for (size_t si = 0; si < want.tokens.size(); ++si)
        EXPECT_TRUE(got.tokens[si].equal(want.tokens[si])) << what << ": scale " << si;
    EXPECT_TRUE(got.f_hat.equal(want.f_hat)) << what << ": f_hat";
    EXPECT_EQ(got.kv_bytes, want.kv_bytes) << what;
    EXPECT_EQ(got.kv_bytes_peak, want.kv_bytes_peak) << what;
    EXPECT_EQ(got.attention_flops, want.attention_flops) << what;
}

}  // namespace

// The graph form (ams_kv.h, "CUDA graphs"): the steps before the first possible promotion are
// graph replays (their steps report kernel launches), the rest run eagerly; the capturing call,
// the replays and a call with other labels draw exactly the eager tokens, where layers are
// promoted (θ = 0: every check), where none is (θ = -1), at the paper's θ, without promotions
// (C_max = C_min), off, and with LazyVAR's grouped last step.
TEST(GpuAmsKv, GraphFormEqualsEagerOnVarD16AndD30) {
    REQUIRE_CUDA();
    if (!kernels::cuda_graphs_built()) GTEST_SKIP() << "built without CUDA kernels";
    struct Model {
        const char* name;
        int64_t depth;
        std::vector<int64_t> patch_nums;
        int64_t first_eager;  // with the paper's budgets
    };
    const Model models[] = {{"d16 256px", 16, {1, 2, 3, 4, 5, 6, 8, 10, 13, 16}, 7},
                            {"d30 1024px", 30, {1, 2, 4, 6, 8, 12, 16, 20, 24, 32, 40, 48, 64}, 9}};
    for (const auto& m : models) {
        SCOPED_TRACE(m.name);
        auto p = random_var(m.depth, m.patch_nums);
        const auto& c = p.var_config();
        const int64_t S = c.num_scales(), total = c.total_tokens();
        const auto b = resolve_ams_kv_budgets(AmsKvConfig{}, c);
        struct Setting {
            std::string name;
            nlohmann::json json;
            int64_t first_eager;  // first step (by scale) run eagerly
        };
        const Setting settings[] = {
            {"theta 0", {{"ams_kv", {{"enabled", true}, {"theta", 0.0}}}}, m.first_eager},
            {"theta -1", {{"ams_kv", {{"enabled", true}, {"theta", -1.0}}}}, m.first_eager},
            {"paper", {{"ams_kv", {{"enabled", true}}}}, m.first_eager},
            {"c_max = c_min",
             {{"ams_kv", {{"enabled", true}, {"c_min", b.c_min}, {"c_max", b.c_min}}}},
             S},
            {"off", {{"ams_kv", {{"enabled", true}, {"c_min", total}, {"c_max", total}}}}, S},
            {"lazyvar + theta 0",
             {{"lazyvar", {{"enabled", true}, {"group_size", 2}, {"ratios", {1.0}}}},
              {"ams_kv", {{"enabled", true}, {"theta", 0.0}}}},
             m.first_eager},
        };
        auto o = varscope::testing::exact_options({3}, 11);
        o.decode = false;
        for (const auto& s : settings) {
            SCOPED_TRACE(s.name);
            auto hooks = build_accelerators(AccelConfig::from_json(s.json), c);
            ASSERT_TRUE(hooks);
            ASSERT_TRUE(hooks->graph_signature(c).has_value());
            o.cuda_graphs = false;
            const auto eager = p.generate(o, hooks.get());
            o.cuda_graphs = true;
            const auto captured = p.generate(o, hooks.get());
            EXPECT_TRUE(captured.cuda_graphs);
            expect_same_run(captured, eager, "capturing call");
            const auto replayed = p.generate(o, hooks.get());
            EXPECT_EQ(replayed.graph_capture_millis, 0.0);
            expect_same_run(replayed, eager, "replay");
            for (const auto& sc : replayed.step_costs)
                EXPECT_EQ(sc.launches >= 0, sc.scale < s.first_eager) << "step at " << sc.scale;
            auto other = varscope::testing::exact_options({7}, 4);
            other.decode = false;
            other.cuda_graphs = true;
            const auto graphed_other = p.generate(other, hooks.get());
            other.cuda_graphs = false;
            expect_same_run(graphed_other, p.generate(other, hooks.get()), "other labels");
        }
    }
}
