// AMS-KV on CUDA: the similarity in half precision (unit keys; the fused CUDA kernel since v3,
// kernels/scale_similarity.h) against the CPU float reference, the compact cache's rolling layer on
// the device, and the policy in the sampling loop (budgets held, memory as accounted). Every test
// skips without a CUDA device.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "core/accel/ams_kv.h"
#include "core/sampling/kv_cache.h"
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
