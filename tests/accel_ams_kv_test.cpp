// AMS-KV: the policy driven directly on a KV cache with synthetic keys (budgets, condensed
// scales, rolling window, cache-demanding layers, eviction order, probes), then end to end in
// the sampling loop (off == baseline, fewer KV bytes when on) and its configuration errors.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "core/accel/accel_config.h"
#include "core/accel/ams_kv.h"
#include "core/accel/probe_kinds.h"
#include "core/resources.h"
#include "core/sampling/kv_cache.h"
#include "tests/error_of.h"
#include "tests/tiny_models.h"

using namespace varscope;
using varscope::testing::small_pipeline;

namespace {

constexpr int64_t kRows = 2, kHeads = 2, kDim = 4;

// A model description for the policy only (no weights are built).
VarConfig schedule(std::vector<int64_t> patch_nums, int64_t depth) {
    VarConfig c;
    c.depth = depth;
    c.embed_dim = kHeads * kDim;
    c.num_heads = kHeads;
    c.patch_nums = std::move(patch_nums);
    return c;
}

// Runs the policy over a whole schedule the way the loop does (append, then on_kv_append per
// layer), with synthetic keys: a layer marked `similar` has one constant unit key per row and
// head at every scale (up(k_{i-1}) == k_i), the others random keys from scale `random_from` on.
// Values carry each token's global index in channel 0, so the kept tokens are traceable.
struct Driver {
    VarConfig model;
    std::shared_ptr<SamplingHooks> policy;
    KvCache cache;
    std::vector<bool> similar;
    int64_t random_from = 0;
    std::vector<at::Tensor> constant_keys;
    ExecPolicy exec;              // the sampler's (ScaleContext::exec): the defaults
    std::vector<bool> graphable;  // ScaleContext::graphable after on_scale_begin, per step

    Driver(VarConfig m, const AmsKvConfig& cfg, std::vector<bool> similar_layers,
           ProbeSink* probe = nullptr)
        : model(std::move(m)),
          policy(make_ams_kv(cfg, model, probe)),
          cache(KvCache::compact(model.depth, kRows, kHeads, kDim, at::kFloat)),
          similar(std::move(similar_layers)) {
        for (int64_t l = 0; l < model.depth; ++l) {
            auto u = at::randn({kRows, kHeads, 1, kDim});
            constant_keys.push_back(u / u.norm(2, {-1}, true));
        }
    }

    void step(int64_t si) {
        const int64_t pn = model.patch_nums[si], n = pn * pn;
        ScaleContext sctx{model, si, pn, 1, model.scale_begin(si), at::Tensor(), {}, si, exec};
        ScaleSegment seg;
        seg.scale = si;
        seg.patch_num = pn;
        seg.token_begin = model.scale_begin(si);
        sctx.segments.push_back(seg);
        policy->on_scale_begin(sctx);
        graphable.push_back(sctx.graphable);
        for (int64_t l = 0; l < model.depth; ++l) {
            at::Tensor k = similar[l] || si < random_from
                               ? constant_keys[l].expand({kRows, kHeads, n, kDim}).clone()
                               : at::randn({kRows, kHeads, n, kDim});
            auto v = at::zeros({kRows, kHeads, n, kDim});
            v.select(3, 0).copy_(at::arange(seg.token_begin, seg.token_begin + n, at::kFloat)
                                     .view({1, 1, n})
                                     .expand({kRows, kHeads, n}));
            cache.append(l, k, v);
            BlockContext bctx{sctx, l, cache};
            policy->on_kv_append(bctx);
            cache.view(l);  // the loop reads the cache for attention
        }
    }
    void run() {
        for (int64_t si = 0; si < model.num_scales(); ++si) step(si);
    }
    // Global indices of the tokens `layer` holds, ascending (a rolling layer's view lists its
    // ring in slot order; the order of the keys does not matter to attention).
    std::vector<int64_t> held(int64_t layer) {
        auto v = cache.view(layer).second.select(0, 0).select(0, 0).select(1, 0).to(at::kLong);
        std::vector<int64_t> ids(v.data_ptr<int64_t>(), v.data_ptr<int64_t>() + v.numel());
        std::sort(ids.begin(), ids.end());
        return ids;
    }
};

std::vector<int64_t> range(int64_t a, int64_t b) {
    std::vector<int64_t> r;
    for (int64_t i = a; i < b; ++i) r.push_back(i);
    return r;
}
std::vector<int64_t> concat(std::vector<int64_t> a, const std::vector<int64_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

AmsKvConfig on(int64_t c_cds = 2, int64_t c_min = 0, int64_t c_max = 0) {
    AmsKvConfig c;
    c.enabled = true;
    c.c_cds = c_cds;
    c.c_min = c_min;
    c.c_max = c_max;
    return c;
}

VarSampleOptions options(std::vector<int64_t> classes = {3, 5}, uint64_t seed = 11) {
    return varscope::testing::exact_options(std::move(classes), seed);
}

std::string config_error(const std::function<void()>& f) {
    return varscope::testing::error_of<AccelConfigError>(f, "(no error)");
}

}  // namespace

// ---- the algorithm on synthetic keys -------------------------------------------------------

TEST(AmsKv, ClruKeepsCondensedAndMostRecentTokens) {
    using R = std::vector<std::pair<int64_t, int64_t>>;
    EXPECT_EQ(ams_kv::clru_ranges(30, 5, 40), (R{{0, 30}}));  // within budget: unchanged
    EXPECT_EQ(ams_kv::clru_ranges(30, 5, 20), (R{{0, 5}, {15, 15}}));
    EXPECT_EQ(ams_kv::clru_ranges(30, 0, 20), (R{{10, 20}}));
    EXPECT_EQ(ams_kv::clru_ranges(30, 5, 20, 25), (R{{0, 5}, {5, 25}}));  // a grouped step
}

TEST(AmsKv, SimilarityIsZeroForUpsampledKeysAndScaleInvariant) {
    auto u = at::randn({2, 3, 1, 8});
    auto prev = u.expand({2, 3, 4, 8}).clone(), cur = u.expand({2, 3, 16, 8}).clone();
    EXPECT_NEAR(ams_kv::similarity(prev, 2, cur, 4), 0.0, 1e-7);
    auto a = at::randn({2, 3, 4, 8}), b = at::randn({2, 3, 16, 8});
    const double s = ams_kv::similarity(a, 2, b, 4);
    EXPECT_LT(s, -0.05);  // unrelated unit keys of 8 channels: about -2/8 minus smoothing
    EXPECT_NEAR(ams_kv::similarity(a * 3, 2, b * 0.5, 4), s, 1e-6);
}

TEST(AmsKv, SimilarityMatchesBilinearUpsamplingOfKeyMaps) {
    // Reference: per-head unit keys as (R, H*c, pn, pn) maps, torch's bilinear upsampling,
    // -mean of the squared difference.
    auto reference = [](const at::Tensor& kp, int64_t pp, const at::Tensor& kc, int64_t pc) {
        auto maps = [](const at::Tensor& k, int64_t pn) {
            auto u = k / k.norm(2, {-1}, true);
            return u.permute({0, 1, 3, 2}).reshape({k.size(0), k.size(1) * k.size(3), pn, pn});
        };
        auto up = at::upsample_bilinear2d(maps(kp, pp), {pc, pc}, false);
        return -(maps(kc, pc) - up).pow(2).mean().item<double>();
    };
    at::manual_seed(5);
    const std::vector<std::pair<int64_t, int64_t>> pairs = {{2, 3}, {3, 4}, {10, 13}, {4, 4}};
    for (auto [pp, pc] : pairs) {
        auto kp = at::randn({3, 2, pp * pp, 8});
        auto kc = (at::randn({3, 2, pc * pc, 8}) +
                   at::upsample_bilinear2d(kp.permute({0, 1, 3, 2}).reshape({3, 16, pp, pp}),
                                           {pc, pc}, false)
                       .reshape({3, 2, 8, pc * pc})
                       .permute({0, 1, 3, 2}));  // related keys: a non-trivial similarity
        const double ref = reference(kp, pp, kc, pc);
        EXPECT_NEAR(ams_kv::similarity(kp, pp, kc, pc), ref, 1e-6) << pp << " " << pc;
        // Unit keys skip the normalisation and give the same value.
        auto up = kp / kp.norm(2, {-1}, true), uc = kc / kc.norm(2, {-1}, true);
        EXPECT_NEAR(ams_kv::similarity(up, pp, uc, pc, /*normalize=*/false), ref, 1e-6);
        // Keys stored token-major (the compact cache, the model's projection): same value.
        auto tm = uc.permute({0, 2, 1, 3}).contiguous().permute({0, 2, 1, 3});
        EXPECT_FALSE(tm.is_contiguous());
        EXPECT_NEAR(ams_kv::similarity(up, pp, tm, pc, false), ref, 1e-6);
    }
    // The weights are torch's bilinear upsampling of each unit map.
    const auto w = ams_kv::upsample_weights(3, 5, at::kFloat);
    const auto eye = at::eye(9).view({9, 1, 3, 3});
    const auto cols = at::upsample_bilinear2d(eye, {5, 5}, false).view({9, 25}).t();
    EXPECT_TRUE(at::allclose(w, cols, 1e-6, 1e-7));
}

TEST(AmsKv, PaperBudgetsEfficientLayersKeepPenultimateDemandingLayersKeepLastTwo) {
    // Tokens per scale 1, 4, 9, 16, 36, 64; condensed = 5; C_min = 36 + 5, C_max = 64 + 36 + 5.
    const auto model = schedule({1, 2, 3, 4, 6, 8}, 4);
    const auto b = resolve_ams_kv_budgets(on(), model);
    EXPECT_EQ(b.cds_tokens, 5);
    EXPECT_EQ(b.c_min, 41);
    EXPECT_EQ(b.c_max, 105);
    EXPECT_TRUE(b.bounded);
    Driver d(model, on(), {true, false, true, false});
    d.run();
    const auto condensed = range(0, 5);
    for (int64_t l : {0, 2}) {  // cache-efficient: the last scale (64 > C_min) is not kept
        EXPECT_EQ(d.held(l), concat(condensed, range(30, 66))) << l;
        EXPECT_LE(d.cache.length(l), b.c_min);
    }
    for (int64_t l : {1, 3}) {  // cache-demanding: scales 4 and 5 after the condensed ones
        EXPECT_EQ(d.held(l), concat(condensed, range(30, 130))) << l;
        EXPECT_EQ(d.cache.length(l), b.c_max);
    }
    // The bytes held are the tensors held.
    EXPECT_EQ(d.cache.allocated_bytes(), d.cache.total_bytes());
    EXPECT_EQ(d.cache.total_bytes(), (2 * 41 + 2 * 105) * d.cache.token_bytes());
}

TEST(AmsKv, LocalWindowRollsAndCondensedScalesStay) {
    // Tokens 1, 4, 9, 9, 9, 9; a budget of 23 = condensed 5 + two 9-token scales.
    const auto model = schedule({1, 2, 3, 3, 3, 3}, 2);
    Driver d(model, on(2, 23, 23), {true, true});
    const auto condensed = range(0, 5);
    const std::vector<std::vector<int64_t>> expected = {
        {0},
        range(0, 5),
        range(0, 14),
        range(0, 23),
        concat(condensed, range(14, 32)),   // scale 2 (5..13) evicted first
        concat(condensed, range(23, 41))};  // then scale 3 (14..22)
    for (int64_t si = 0; si < 6; ++si) {
        d.step(si);
        for (int64_t l = 0; l < 2; ++l) EXPECT_EQ(d.held(l), expected[si]) << si << " " << l;
    }
}

TEST(AmsKv, EvictionIsOldestTokenFirstAndOversizedScalesAreNotKept) {
    // Budget 20: at scale 3 (14 + 9 = 23 tokens) the 3 oldest non-condensed tokens go, so scale
    // 2 is kept in part (its most recent rows). Scale 4 (36 tokens > C_max) is never cached.
    const auto model = schedule({1, 2, 3, 3, 6}, 1);
    Driver d(model, on(2, 20, 20), {true});
    for (int64_t si = 0; si < 4; ++si) d.step(si);
    EXPECT_EQ(d.held(0), concat(range(0, 5), range(8, 23)));
    d.step(4);
    EXPECT_EQ(d.held(0), concat(range(0, 5), range(8, 23)));
}

TEST(AmsKv, NoCondensedScales) {
    const auto model = schedule({1, 2, 3, 3, 3, 3}, 1);
    Driver d(model, on(0, 18, 18), {true});
    d.run();
    EXPECT_EQ(d.held(0), range(23, 41));
}

TEST(AmsKv, ThePromotionCheckUsesThePreviousScaleEvenWhenItWasEvicted) {
    // Keys are constant up to scale 2 and random from scale 3. With C_min = 10 the first
    // overflow (scale 2, similar keys) keeps only 5 of scale 2's 9 tokens; the check at scale 3
    // still compares with all of scale 2 and promotes the layer.
    const auto model = schedule({1, 2, 3, 3, 3}, 2);
    ProbeRecorder probe;
    Driver d(model, on(2, 10, 30), {true, false}, &probe);
    d.random_from = 3;
    d.run();
    const auto dem = probe.accel(probe_kinds::kAmsKvDemanding);
    ASSERT_EQ(dem.size(), 5u);
    for (int64_t si = 0; si < 3; ++si) EXPECT_FALSE(dem[si].data[1].item<bool>()) << si;
    EXPECT_TRUE(dem[3].data[1].item<bool>());
    EXPECT_FALSE(dem[4].data[0].item<bool>());
    EXPECT_LT(dem[3].values.at("similarity.1"), -0.008);
    EXPECT_NEAR(dem[3].values.at("similarity.0"), 0.0, 1e-6);
    EXPECT_EQ(d.cache.length(1), 28);  // promoted to 30: nothing evicted after scale 2
    EXPECT_EQ(d.cache.length(0), 10);  // still C_min
}

TEST(AmsKv, DemandingLayersAreReportedWithTheirBudgetsAndBytes) {
    const auto model = schedule({1, 2, 3, 4, 6, 8}, 4);
    ProbeRecorder probe;
    Driver d(model, on(), {true, false, true, false}, &probe);
    d.run();
    const auto bytes = probe.accel(probe_kinds::kKvBytes);
    const auto occ = probe.accel(probe_kinds::kKvOccupancy);
    const auto dem = probe.accel(probe_kinds::kAmsKvDemanding);
    ASSERT_EQ(bytes.size(), 6u);
    ASSERT_EQ(occ.size(), 6u);
    ASSERT_EQ(dem.size(), 6u);
    for (size_t i = 0; i < 6; ++i) {
        EXPECT_EQ(bytes[i].scale, static_cast<int64_t>(i));
        EXPECT_EQ(bytes[i].method, "ams_kv");
        EXPECT_EQ(bytes[i].data.sizes(), (at::IntArrayRef{4}));
        EXPECT_EQ(occ[i].data.sizes(), (at::IntArrayRef{4, 6}));
        // Occupancy and bytes agree: tokens x bytes per token.
        EXPECT_TRUE(bytes[i].data.equal(occ[i].data.sum(1) * d.cache.token_bytes())) << i;
    }
    // After the last scale: the final cache, exactly.
    for (int64_t l = 0; l < 4; ++l)
        EXPECT_EQ(bytes.back().data[l].item<int64_t>(), d.cache.bytes(l)) << l;
    EXPECT_EQ(bytes.back().values.at("total"), static_cast<double>(d.cache.total_bytes()));
    // Source scales: efficient layers hold condensed + scale 4; demanding ones also scale 5.
    const auto expect_eff = at::tensor(std::vector<int64_t>{1, 4, 0, 0, 36, 0});
    const auto expect_dem = at::tensor(std::vector<int64_t>{1, 4, 0, 0, 36, 64});
    EXPECT_TRUE(occ.back().data[0].equal(expect_eff));
    EXPECT_TRUE(occ.back().data[1].equal(expect_dem));
    // Before any overflow (scale 3: 30 tokens <= 41) no layer is demanding.
    EXPECT_FALSE(dem[3].data.any().item<bool>());
    EXPECT_TRUE(dem[4].data.equal(at::tensor({0, 1, 0, 1}).to(at::kBool)));
    EXPECT_EQ(dem[4].values.at("theta"), -0.008);
    EXPECT_EQ(dem[4].values.at("c_max"), 105.0);
}

TEST(AmsKv, StartsOverForEveryImage) {
    const auto model = schedule({1, 2, 3, 4, 6, 8}, 2);
    Driver d(model, on(), {false, false});
    d.run();
    const auto first = d.held(0);
    d.cache = KvCache::compact(2, kRows, kHeads, kDim, at::kFloat);
    d.similar = {true, true};
    d.run();  // step 0 resets: layers are cache-efficient again
    EXPECT_EQ(d.held(0), concat(range(0, 5), range(30, 66)));
    EXPECT_NE(first, d.held(0));
}

// ---- configuration -------------------------------------------------------------------------

TEST(AmsKv, ConfigJsonRoundTripAndDefaults) {
    auto c =
        AmsKvConfig::from_json({{"c_cds", 1}, {"c_min", 100}, {"c_max", 300}, {"theta", -0.01}});
    EXPECT_TRUE(c.enabled);
    EXPECT_EQ(c.c_cds, 1);
    EXPECT_EQ(c.c_min, 100);
    EXPECT_EQ(c.c_max, 300);
    EXPECT_DOUBLE_EQ(c.theta, -0.01);
    auto back = AmsKvConfig::from_json(c.to_json());
    EXPECT_EQ(back.to_json(), c.to_json());
    const auto d = AmsKvConfig::from_json(AmsKvConfig::spec().defaults());
    EXPECT_FALSE(d.enabled);
    EXPECT_EQ(d.c_cds, 2);
    EXPECT_DOUBLE_EQ(d.theta, -0.008);
    for (const auto& p : AmsKvConfig::spec().params) {
        if (p.key != "key_tile") {  // ours, not the paper's: it has no symbol
            EXPECT_FALSE(p.symbol.empty()) << p.key;
        }
        EXPECT_FALSE(p.help.empty()) << p.key;
    }
    // On the official 256px schedule the paper's budgets are 174 and 430 tokens.
    const auto b = resolve_ams_kv_budgets(on(), VarConfig::for_depth(16));
    EXPECT_EQ(b.c_min, 174);
    EXPECT_EQ(b.c_max, 430);
}

TEST(AmsKv, KeyTileRoundsBothBudgetsUpAndZeroOrOneKeepsThem) {
    // VAR-d30's 13-scale 1024^2 schedule: the paper's budgets 2,309 and 6,405 tokens.
    VarConfig model = VarConfig::for_depth(30, {1, 2, 4, 6, 8, 12, 16, 20, 24, 32, 40, 48, 64});
    auto cfg = on();
    for (int64_t tile : {0, 1}) {
        cfg.key_tile = tile;
        const auto b = resolve_ams_kv_budgets(cfg, model);
        EXPECT_EQ(b.c_min, 2309) << tile;
        EXPECT_EQ(b.c_max, 6405) << tile;
    }
    cfg.key_tile = 128;
    auto b = resolve_ams_kv_budgets(cfg, model);
    EXPECT_EQ(b.c_min, 2432);  // 19 x 128
    EXPECT_EQ(b.c_max, 6528);  // 51 x 128
    EXPECT_TRUE(b.bounded);
    cfg.c_min = 2304;  // a given budget already on the tile stays
    b = resolve_ams_kv_budgets(cfg, model);
    EXPECT_EQ(b.c_min, 2304);
    // A tile past the schedule's 10,521 tokens leaves nothing to evict: the baseline's cache.
    cfg.key_tile = 4096;
    b = resolve_ams_kv_budgets(cfg, model);
    EXPECT_EQ(b.c_min, 4096);
    EXPECT_EQ(b.c_max, 8192);
    EXPECT_TRUE(b.bounded);
    cfg.c_max = 9000;
    EXPECT_FALSE(resolve_ams_kv_budgets(cfg, model).bounded);  // 12,288 >= 10,521
    // The setting travels through JSON, and the preset carries it.
    EXPECT_EQ(AmsKvConfig::from_json({{"key_tile", 128}}).key_tile, 128);
    EXPECT_EQ(AccelConfig::from_argument("ams_kv-tile128").ams_kv.key_tile, 128);
    EXPECT_EQ(AccelConfig::from_argument("ams_kv").ams_kv.key_tile, 0);
    EXPECT_EQ(config_error([] {
                  AmsKvConfig::from_json({{"key_tile", -128}});
              }),
              "ams_kv.key_tile: must be in [0, 4096], got -128");
}

TEST(AmsKv, ConfigErrorsNameTheField) {
    EXPECT_EQ(config_error([] {
                  AmsKvConfig::from_json({{"theta", 0.5}});
              }),
              "ams_kv.theta: must be in [-1, 0], got 0.5");
    EXPECT_EQ(config_error([] {
                  AmsKvConfig::from_json({{"c_min", -3}});
              }),
              "ams_kv.c_min: must be in [0, 100000], got -3");
    EXPECT_EQ(config_error([] {
                  AmsKvConfig::from_json({{"c_cds", 1.5}});
              }),
              "ams_kv.c_cds: must be an integer, got 1.5");
    EXPECT_NE(config_error([] {
                  AmsKvConfig::from_json({{"cmin", 3}});
              }).find("ams_kv.cmin: unknown"),
              std::string::npos);
    const auto model = schedule({1, 2, 3, 4, 6, 8}, 4);
    EXPECT_EQ(config_error([&] { make_ams_kv(on(6), model, nullptr); }),
              "ams_kv.c_cds: must be below the model's 6 scales, got 6");
    EXPECT_EQ(config_error([&] { make_ams_kv(on(2, 5), model, nullptr); }),
              "ams_kv.c_min: must exceed the 5 tokens of the 2 condensed scales, got 5");
    EXPECT_EQ(config_error([&] { make_ams_kv(on(3, 200, 0), model, nullptr); }),
              "ams_kv.c_max: must be at least c_min (200 tokens), got the paper's setting 114 "
              "(c_max = 0)");
    EXPECT_EQ(config_error([&] { make_ams_kv(on(2, 50, 40), model, nullptr); }),
              "ams_kv.c_max: must be at least c_min (50 tokens), got 40");
    EXPECT_EQ(config_error([&] { make_ams_kv(on(2, 41, 105), model, nullptr); }), "(no error)");
}

// ---- CUDA graphs: which steps are captured --------------------------------------------------

TEST(AmsKv, StepsAreGraphableUntilALayerMayBePromoted) {
    const std::vector<int64_t> px256 = {1, 2, 3, 4, 5, 6, 8, 10, 13, 16},
                               px1024 = {1, 2, 4, 6, 8, 12, 16, 20, 24, 32, 40, 48, 64};
    struct Case {
        std::vector<int64_t> patch_nums;
        AmsKvConfig cfg;
        int64_t first_eager;
    };
    const Case cases[] = {
        // 155 tokens up to scale 6 fit C_min = 169 + 5; scale 7 takes them to 255.
        {px256, on(), 7},
        // 1497 tokens up to scale 8 fit C_min = 2304 + 5; scale 9 takes them to 2521.
        {px1024, on(), 9},
        // C_max = C_min: evictions, but no promotion, so nothing depends on values.
        {px256, on(2, 174, 174), 10},
        // Off: budgets of the whole schedule never overflow.
        {px256, on(2, 680, 680), 10},
        // Other budgets: 91 tokens at scale 5 overflow C_min = 60 first.
        {px256, on(2, 60, 80), 5},
    };
    for (const auto& c : cases) {
        const auto model = schedule(c.patch_nums, 2);
        SCOPED_TRACE(::testing::Message() << model.num_scales() << " scales, c_min " << c.cfg.c_min
                                          << ", c_max " << c.cfg.c_max);
        Driver d(model, c.cfg, {true, false});
        ASSERT_TRUE(d.policy->graph_signature(model).has_value());
        d.run();  // (a promotion check in a graphable step would throw)
        ASSERT_EQ(d.graphable.size(), c.patch_nums.size());
        for (size_t si = 0; si < d.graphable.size(); ++si)
            EXPECT_EQ(d.graphable[si], static_cast<int64_t>(si) < c.first_eager) << si;
    }
    // Profiling synchronises around every part: no step is graphable.
    Driver profiled(schedule(px256, 1), on(), {true});
    profiled.exec.profile_ams_kv = true;
    profiled.run();
    EXPECT_EQ(std::count(profiled.graphable.begin(), profiled.graphable.end(), true), 0);
}

TEST(AmsKv, GraphSignatureNamesTheBudgets) {
    const auto model = schedule({1, 2, 3, 4, 6, 8}, 2);  // 130 tokens
    const auto paper = make_ams_kv(on(), model, nullptr)->graph_signature(model);
    ASSERT_TRUE(paper.has_value());
    EXPECT_EQ(make_ams_kv(on(2, 41, 105), model, nullptr)->graph_signature(model), paper);
    EXPECT_NE(make_ams_kv(on(2, 50, 105), model, nullptr)->graph_signature(model), paper);
    auto other_theta = on();
    other_theta.theta = -0.01;
    EXPECT_NE(make_ams_kv(other_theta, model, nullptr)->graph_signature(model), paper);
    // Its probe records come from the block-level calls.
    ProbeRecorder probe;
    EXPECT_FALSE(make_ams_kv(on(), model, &probe)->graph_signature(model).has_value());
    // C_max >= the schedule's tokens > C_min: promotions without a compact cache, which the
    // Infinity loop would graph and cannot run eagerly: no graphs.
    EXPECT_FALSE(make_ams_kv(on(2, 41, 130), model, nullptr)->graph_signature(model).has_value());
    EXPECT_TRUE(make_ams_kv(on(2, 130, 130), model, nullptr)->graph_signature(model).has_value());
}

// ---- end to end in the sampling loop -------------------------------------------------------

TEST(AmsKv, UnlimitedBudgetAndDisabledReproduceTheBaseline) {
    auto p = small_pipeline();
    const auto base = p.generate(options());
    const int64_t total = p.var_config().total_tokens();
    auto unlimited = make_ams_kv(on(2, total, total), p.var_config(), nullptr);
    const auto same = p.generate(options(), unlimited.get());
    ASSERT_EQ(same.tokens.size(), base.tokens.size());
    for (size_t si = 0; si < base.tokens.size(); ++si)
        EXPECT_TRUE(same.tokens[si].equal(base.tokens[si])) << si;
    EXPECT_TRUE(same.images.equal(base.images));
    EXPECT_EQ(same.kv_bytes, base.kv_bytes);

    auto cfg = AccelConfig::from_json({{"ams_kv", {{"enabled", false}}}});
    EXPECT_EQ(build_accelerators(cfg, p.var_config()), nullptr);
}

TEST(AmsKv, RunsEndToEndWithFewerKvBytesAndRespectsBudgets) {
    auto p = small_pipeline();
    const auto base = p.generate(options());
    ProbeRecorder probe;
    auto cfg = AccelConfig::from_json({{"ams_kv", {{"enabled", true}}}});
    auto hooks = build_accelerators(cfg, p.var_config(), &probe);
    ASSERT_NE(hooks, nullptr);
    const auto res = p.generate(options(), hooks.get(), &probe);
    ASSERT_EQ(res.tokens.size(), base.tokens.size());
    EXPECT_LT(res.kv_bytes, base.kv_bytes);
    EXPECT_TRUE(res.images.isfinite().all().item<bool>());

    const auto b = resolve_ams_kv_budgets(cfg.ams_kv, p.var_config());
    const auto occ = probe.accel(probe_kinds::kKvOccupancy);
    const auto dem = probe.accel(probe_kinds::kAmsKvDemanding);
    const auto bytes = probe.accel(probe_kinds::kKvBytes);
    ASSERT_EQ(occ.size(), 6u);
    ASSERT_EQ(dem.size(), 6u);
    for (size_t i = 0; i < occ.size(); ++i)
        for (int64_t l = 0; l < p.var_config().depth; ++l) {
            const int64_t held = occ[i].data[l].sum().item<int64_t>();
            const int64_t budget = dem[i].data[l].item<bool>() ? b.c_max : b.c_min;
            EXPECT_LE(held, budget) << "scale " << i << " layer " << l;
            for (int64_t s = 0; s < std::min<int64_t>(b.c_cds, i + 1); ++s)  // condensed: held
                EXPECT_EQ(occ[i].data[l][s].item<int64_t>(),
                          p.var_config().patch_nums[s] * p.var_config().patch_nums[s]);
        }
    EXPECT_EQ(bytes.back().values.at("total"), static_cast<double>(res.kv_bytes));
    // Deterministic: the same seed gives the same tokens with the policy on.
    const auto again = p.generate(options(), hooks.get());
    for (size_t si = 0; si < res.tokens.size(); ++si)
        EXPECT_TRUE(again.tokens[si].equal(res.tokens[si])) << si;
}

TEST(AmsKv, EmbeddedModel) {
    ASSERT_TRUE(embedded_model_available());
    auto p = VarPipeline::load(embedded_model_files(), {});
    const auto o = options({1891}, 3);
    const auto base = p.generate(o);
    const int64_t total = p.var_config().total_tokens();
    auto unlimited = make_ams_kv(on(2, total, total), p.var_config(), nullptr);
    const auto same = p.generate(o, unlimited.get());
    for (size_t si = 0; si < base.tokens.size(); ++si)
        EXPECT_TRUE(same.tokens[si].equal(base.tokens[si])) << si;
    EXPECT_TRUE(same.images.equal(base.images));

    ProbeRecorder probe;
    auto paper = make_ams_kv(on(), p.var_config(), &probe);
    const auto res = p.generate(o, paper.get(), &probe);
    // 8 layers of 680 tokens in the baseline; at most 430 per layer with the paper's budgets.
    EXPECT_LE(res.kv_bytes * 680, base.kv_bytes * 430);
    EXPECT_TRUE(res.images.isfinite().all().item<bool>());
    // The coarse scales run unchanged (nothing evicted before the cache first overflows C_min).
    EXPECT_TRUE(res.tokens[0].equal(base.tokens[0]));
    EXPECT_TRUE(res.tokens[1].equal(base.tokens[1]));
    const auto dem = probe.accel(probe_kinds::kAmsKvDemanding);
    ASSERT_EQ(dem.size(), 10u);
    EXPECT_EQ(dem.back().values.count("similarity.0"), 1u);
}

TEST(AmsKv, CombinesWithGroupedStepsAndTokenPruning) {
    // LazyVAR's grouped steps need the step's own keys (the block-causal mask); FastVAR appends
    // only the pivotal tokens' keys. Both run with AMS-KV on and hold fewer KV bytes.
    auto p = small_pipeline();
    const auto base = p.generate(options());
    const nlohmann::json others[] = {
        // scales 4 and 5 decoded in one step
        {{"lazyvar", {{"start_scale", 4}, {"group_size", 2}, {"ratios", {1.0}}}}},
        {{"fastvar", nlohmann::json::object()}}};
    for (const auto& j : others) {
        const std::string other = j.begin().key();
        auto cfg = AccelConfig::from_json(j);
        const auto alone = p.generate(options(), build_accelerators(cfg, p.var_config()).get());
        cfg.ams_kv = AmsKvConfig::from_json({{"c_min", 20}, {"c_max", 60}});
        ProbeRecorder probe;
        auto hooks = build_accelerators(cfg, p.var_config(), &probe);
        const auto res = p.generate(options(), hooks.get(), &probe);
        EXPECT_EQ(res.tokens.size(), base.tokens.size()) << other;
        EXPECT_LT(res.kv_bytes, alone.kv_bytes) << other;
        EXPECT_TRUE(res.images.isfinite().all().item<bool>()) << other;
        const auto occ = probe.accel(probe_kinds::kKvOccupancy);
        ASSERT_FALSE(occ.empty()) << other;
        // Condensed scales stay in every layer to the end.
        EXPECT_TRUE(occ.back().data.select(1, 0).eq(1).all().item<bool>()) << other;
        EXPECT_TRUE(occ.back().data.select(1, 1).eq(4).all().item<bool>()) << other;
    }
}

// ---- the graph form, emulated on the CPU ----------------------------------------------------

namespace {

// The VAR loop under CUDA graphs, on every call after the capturing one (the capture exists on
// CUDA only): the graphed steps' block-level work is replayed from the capture, which the hook
// made on an earlier call, so the hook sees only their step-level calls. Here a twin policy
// (fresh, same settings) does that work on the cache, and the policy under test gets the
// block-level calls only from the first step it declares not graphable (ScaleContext::graphable)
// on, which it must then run from the state it kept on the earlier call.
class ReplayEmulation : public SamplingHooks {
  public:
    ReplayEmulation(std::shared_ptr<SamplingHooks> tested, std::shared_ptr<SamplingHooks> twin)
        : tested_(std::move(tested)), twin_(std::move(twin)) {}
    std::vector<bool> graphable;  // per step

    bool compact_kv_cache(const VarConfig& c) override { return tested_->compact_kv_cache(c); }
    void on_scale_begin(ScaleContext& ctx) override {
        if (ctx.step == 0) eager_ = false;
        tested_->on_scale_begin(ctx);
        eager_ = eager_ || !ctx.graphable;
        if (!eager_) {
            ScaleContext copy = ctx;
            twin_->on_scale_begin(copy);
        }
        graphable.push_back(ctx.graphable);
    }
    void on_kv_append(const BlockContext& ctx) override {
        (eager_ ? tested_ : twin_)->on_kv_append(ctx);
    }
    void on_scale_end(const ScaleContext& ctx, const ScaleSegment& seg, const at::Tensor& tokens,
                      const at::Tensor& f_hat) override {
        tested_->on_scale_end(ctx, seg, tokens, f_hat);
    }

  private:
    std::shared_ptr<SamplingHooks> tested_, twin_;
    bool eager_ = false;
};

// Every block's output (after attention and FFN), in call order.
struct BlockOutputs : SamplingHooks {
    std::vector<at::Tensor> outputs;
    void on_block_output(const BlockContext&, const at::Tensor& x) override {
        outputs.push_back(x.clone());
    }
};

void expect_same_run(const VarSampleResult& got, const VarSampleResult& want, const char* what) {
    ASSERT_EQ(got.tokens.size(), want.tokens.size()) << what;
    for (size_t si = 0; si < want.tokens.size(); ++si)
        EXPECT_TRUE(got.tokens[si].equal(want.tokens[si])) << what << ": scale " << si;
    EXPECT_TRUE(got.f_hat.equal(want.f_hat)) << what;
    EXPECT_EQ(got.kv_bytes, want.kv_bytes) << what;
    EXPECT_EQ(got.kv_bytes_peak, want.kv_bytes_peak) << what;
}

}  // namespace

// The graph form's steps (graphed prefix replayed, eager rest from the kept state) give exactly
// the tokens, block outputs and KV bytes of today's eager AMS-KV: where layers are promoted,
// where none is, where none can be, off (== the baseline), and with LazyVAR's grouped steps
// inside and after the graphed prefix.
TEST(AmsKv, GraphFormGivesTheEagerTokensAndBlockOutputs) {
    auto p = small_pipeline();  // scales 1, 2, 3, 4, 6, 8: 130 tokens
    const auto& model = p.var_config();
    const int64_t total = model.total_tokens();
    auto theta = [](double t, AmsKvConfig c = on()) {
        c.theta = t;
        return c;
    };
    const nlohmann::json none;
    // LazyVAR groups the last scales: 4 and 5, or 2 to 5.
    const nlohmann::json group2 = {
        {"lazyvar", {{"start_scale", 4}, {"group_size", 2}, {"ratios", {1.0}}}}};
    const nlohmann::json group4 = {
        {"lazyvar", {{"start_scale", 4}, {"group_size", 4}, {"ratios", {1.0}}}}};
    struct Case {
        const char* name;
        nlohmann::json others;
        AmsKvConfig cfg;
        std::vector<bool> graphable;  // per step
        int promoted;                 // some layer is cache-demanding at the end (-1: either)
    };
    const Case cases[] = {
        // C_min 41: 30 tokens up to scale 3, scale 4 takes them to 66.
        {"every check promotes", none, theta(0.0), {true, true, true, true, false, false}, 1},
        {"no check promotes", none, theta(-1.0), {true, true, true, true, false, false}, 0},
        {"paper", none, on(), {true, true, true, true, false, false}, -1},
        {"no promotion possible", none, on(2, 41, 41), std::vector<bool>(6, true), 0},
        {"off", none, on(2, total, total), std::vector<bool>(6, true), 0},
        {"grouped step graphed", group2, on(2, 60, 60), std::vector<bool>(5, true), 0},
        {"grouped step eager", group4, theta(0.0), {true, true, false}, 1},
        {"eager before a grouped step",
         group2,
         theta(0.0, on(2, 20, 60)),
         {true, true, true, false, false},
         1},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.name);
        auto others = c.others.is_null() ? AccelConfig{} : AccelConfig::from_json(c.others);
        auto with_ams = others;
        with_ams.ams_kv = c.cfg;
        with_ams.ams_kv.enabled = true;
        // Today's eager AMS-KV (after LazyVAR, as build_accelerators orders them).
        HookChain eager;
        eager.add(build_accelerators(with_ams, model));
        auto eager_out = std::make_shared<BlockOutputs>();
        eager.add(eager_out);
        ProbeRecorder probe;
        auto probed = build_accelerators(with_ams, model, &probe);
        const auto want = p.generate(options(), &eager);
        // (the probe's own run: whether a layer was promoted)
        p.generate(options(), probed.get(), &probe);
        const auto dem = probe.accel(probe_kinds::kAmsKvDemanding);
        ASSERT_FALSE(dem.empty());
        if (c.promoted >= 0) {
            EXPECT_EQ(dem.back().data.any().item<bool>(), c.promoted == 1);
        }

        // The capturing call: every block-level call reaches the policy.
        auto tested = make_ams_kv(with_ams.ams_kv, model, nullptr);
        ASSERT_TRUE(tested->graph_signature(model).has_value());
        HookChain capture;
        if (others.any_enabled()) capture.add(build_accelerators(others, model));
        capture.add(tested);
        expect_same_run(p.generate(options(), &capture), want, "capturing call");

        // Two replaying calls.
        for (int call = 0; call < 2; ++call) {
            auto emulation = std::make_shared<ReplayEmulation>(
                tested, make_ams_kv(with_ams.ams_kv, model, nullptr));
            auto out = std::make_shared<BlockOutputs>();
            HookChain replay;
            if (others.any_enabled()) replay.add(build_accelerators(others, model));
            replay.add(emulation);
            replay.add(out);
            expect_same_run(p.generate(options(), &replay), want, "replaying call");
            EXPECT_EQ(emulation->graphable, c.graphable);
            ASSERT_EQ(out->outputs.size(), eager_out->outputs.size());
            for (size_t i = 0; i < out->outputs.size(); ++i)
                EXPECT_TRUE(out->outputs[i].equal(eager_out->outputs[i])) << "block output " << i;
        }
        if (c.cfg.c_min == total) {  // off: the baseline's tokens
            const auto base = p.generate(options());
            for (size_t si = 0; si < base.tokens.size(); ++si)
                EXPECT_TRUE(want.tokens[si].equal(base.tokens[si])) << si;
        }
    }
}
