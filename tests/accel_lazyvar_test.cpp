// LazyVAR: the update index, update-index-guided pruning, the cumulative retention index,
// parallel group decoding through the sampling loop, the off setting and config errors.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "core/accel/accel_config.h"
#include "core/accel/lazyvar.h"
#include "core/resources.h"
#include "tests/emoji_model.h"
#include "tests/tiny_models.h"

using namespace varscope;
using varscope::testing::small_pipeline;

namespace {

VarSampleOptions small_options(uint64_t seed = 5) {
    return varscope::testing::exact_options({3}, seed);
}

LazyVarConfig lazy(int64_t start, int64_t group, std::vector<double> ratios,
                   bool cumulative = true) {
    LazyVarConfig c;
    c.enabled = true;
    c.start_scale = start;
    c.group_size = group;
    c.ratios = std::move(ratios);
    c.cumulative = cumulative;
    return c;
}

std::string config_error(const nlohmann::json& j, const VarConfig* model = nullptr) {
    try {
        auto c = LazyVarConfig::from_json(j);
        if (model) make_lazyvar(c, *model, nullptr);
    } catch (const AccelConfigError& e) {
        return e.what();
    }
    return "";
}

// Positions of the final grid covered by a scale's kept tokens (final side divisible by pn).
std::set<int64_t> footprint(const at::Tensor& rows, int64_t pn, int64_t side) {
    std::set<int64_t> out;
    const int64_t f = side / pn;
    for (int64_t r :
         std::vector<int64_t>(rows.data_ptr<int64_t>(), rows.data_ptr<int64_t>() + rows.numel()))
        for (int64_t dy = 0; dy < f; ++dy)
            for (int64_t dx = 0; dx < f; ++dx)
                out.insert(((r / pn) * f + dy) * side + (r % pn) * f + dx);
    return out;
}

int64_t count_computed(const at::Tensor& tokens) {
    return tokens.ge(0).sum().item<int64_t>();
}

}  // namespace

TEST(LazyVar, UpdateIndexIsOneMinusChannelCosine) {
    at::manual_seed(3);
    auto a = at::randn({2, 5, 3, 4}), b = a + 0.7 * at::randn({2, 5, 3, 4});
    b[1].select(1, 2).select(1, 3).zero_();  // a zero vector: cosine 0, index 1
    const auto ui = lazyvar_update_index(a, b);
    ASSERT_EQ(ui.sizes(), (at::IntArrayRef{2, 3, 4}));
    for (int64_t n = 0; n < 2; ++n)
        for (int64_t y = 0; y < 3; ++y)
            for (int64_t x = 0; x < 4; ++x) {
                double dot = 0, na = 0, nb = 0;
                for (int64_t c = 0; c < 5; ++c) {
                    const double u = a[n][c][y][x].item<double>(), v = b[n][c][y][x].item<double>();
                    dot += u * v, na += u * u, nb += v * v;
                }
                const double cosine = na * nb > 0 ? dot / std::sqrt(na * nb) : 0.0;
                EXPECT_NEAR(ui[n][y][x].item<double>(), 1.0 - cosine, 1e-5) << n << y << x;
            }
    EXPECT_NEAR(ui[1][2][3].item<double>(), 1.0, 1e-6);
    EXPECT_NEAR(lazyvar_update_index(a, 3.0 * a).abs().max().item<double>(), 0.0, 1e-5);
    EXPECT_NEAR(lazyvar_update_index(a, -a).min().item<double>(), 2.0, 1e-5);
}

TEST(LazyVar, SelectionKeepsTheTopRatioOfTheDownsampledIndex) {
    at::manual_seed(4);
    const auto ui = at::rand({8, 8});
    const std::vector<int64_t> pns{3, 4, 6, 8};
    const std::vector<double> ratios{1.0, 0.5, 0.3, 0.01};
    const auto sel = lazyvar_select_rows(ui, pns, ratios, /*cumulative=*/false);
    ASSERT_EQ(sel.size(), 4u);
    EXPECT_FALSE(sel[0].rows.defined());               // ratio 1: every token
    const std::vector<int64_t> expected{9, 8, 11, 1};  // round(r * pn^2), at least one
    for (size_t j = 1; j < 4; ++j) {
        const int64_t pn = pns[j];
        const auto& rows = sel[j].rows;
        ASSERT_TRUE(rows.defined()) << j;
        EXPECT_EQ(rows.numel(), expected[j]) << j;
        EXPECT_EQ(sel[j].rank_begin, 0);
        EXPECT_TRUE(rows.equal(std::get<0>(rows.sort()))) << "ascending";
        EXPECT_EQ(std::get<0>(at::_unique(rows)).numel(), rows.numel());
        // Every kept token scores at least as high as every dropped one (area-downsampled).
        const auto scores = at::adaptive_avg_pool2d(ui.view({1, 1, 8, 8}), {pn, pn}).flatten();
        auto kept = at::zeros({pn * pn}, at::kBool).index_fill_(0, rows, true);
        EXPECT_GE(scores.masked_select(kept).min().item<float>(),
                  scores.masked_select(kept.logical_not()).max().item<float>())
            << j;
    }
}

TEST(LazyVar, CumulativeIndexGivesDisjointPositionsInsideAGroup) {
    // A hierarchical index: coarse blocks rank first, then finer cells inside them, so every
    // scale's ranking agrees with the larger scales' one and footprints can be compared.
    at::manual_seed(5);
    auto up = [](const at::Tensor& t, int64_t f) {
        return t.repeat_interleave(f, 0).repeat_interleave(f, 1);
    };
    const auto ui = up(at::randperm(4).to(at::kFloat).view({2, 2}), 4) +
                    0.01 * up(at::rand({4, 4}), 2) + 1e-4 * at::rand({8, 8});
    const std::vector<int64_t> pns{2, 4, 8};
    const std::vector<double> ratios{0.25, 0.25, 0.25};  // 1, 4 and 16 tokens
    const auto cum = lazyvar_select_rows(ui, pns, ratios, /*cumulative=*/true);
    EXPECT_EQ(cum[2].rank_begin, 0);
    EXPECT_EQ(cum[1].rank_begin, 4);      // 16 * 16/64
    EXPECT_EQ(cum[0].rank_begin, 1 + 1);  // 16 * 4/64 + 4 * 4/16
    std::vector<std::set<int64_t>> covered;
    for (size_t j = 0; j < 3; ++j) covered.push_back(footprint(cum[j].rows, pns[j], 8));
    for (size_t i = 0; i < 3; ++i)
        for (size_t j = i + 1; j < 3; ++j)
            for (int64_t p : covered[i]) EXPECT_FALSE(covered[j].count(p)) << i << j << p;
    // The largest scale holds the highest-update positions (the block ranked first).
    EXPECT_GE(ui.flatten().index_select(0, cum[2].rows).min().item<float>(), 3.0f);

    // Without the cumulative index every scale takes the top block: they overlap.
    const auto plain = lazyvar_select_rows(ui, pns, ratios, /*cumulative=*/false);
    const auto a = footprint(plain[0].rows, 2, 8), b = footprint(plain[2].rows, 8, 8);
    int64_t shared = 0;
    for (int64_t p : b) shared += a.count(p);
    EXPECT_EQ(shared, 16);
}

TEST(LazyVar, CumulativeStartIsClampedSoTheRatioIsKept) {
    const auto ui = at::rand({8, 8});
    const auto sel = lazyvar_select_rows(ui, {4, 8}, {0.75, 0.5}, true);
    EXPECT_EQ(sel[0].rows.numel(), 12);
    EXPECT_EQ(sel[0].rank_begin, 16 - 12);  // 32 * 16/64 = 8 would leave only 8 ranks
}

TEST(LazyVar, PrunedScalesComputeTheRatioOfTokensGuidedByThePreviousIndex) {
    auto pipe = small_pipeline();  // scales 1, 2, 3, 4, 6, 8
    const auto& model = pipe.var_config();
    auto hooks = make_lazyvar(lazy(3, 1, {0.5, 0.3, 0.2}), model, nullptr);
    ProbeRecorder rec;
    auto hooks_probed = make_lazyvar(lazy(3, 1, {0.5, 0.3, 0.2}), model, &rec);
    const auto res = pipe.generate(small_options(), hooks_probed.get(), &rec);
    const std::vector<int64_t> kept{1, 4, 9, 8, 11, 13};  // round(0.5*16), (0.3*36), (0.2*64)
    for (int64_t si = 0; si < 6; ++si) EXPECT_EQ(count_computed(res.tokens[si]), kept[si]) << si;
    EXPECT_TRUE(res.images.isfinite().all().item<bool>());

    for (int64_t si = 3; si < 6; ++si) {
        const int64_t pn = model.patch_nums[si];
        auto k = rec.accel("lazyvar_kept", si);
        ASSERT_EQ(k.size(), 1u) << si;
        EXPECT_EQ(k[0].method, "lazyvar");
        ASSERT_EQ(k[0].data.sizes(), (at::IntArrayRef{pn, pn}));
        EXPECT_TRUE(k[0].data.flatten().equal(res.tokens[si][0].cpu().ge(0))) << si;
        EXPECT_EQ(k[0].values.at("kept"), kept[si]);
        // The kept tokens are the top of the previous scale's index, area-downsampled.
        auto prev = rec.accel("update_index", si - 1);
        ASSERT_EQ(prev.size(), 1u);
        ASSERT_EQ(prev[0].data.sizes(), (at::IntArrayRef{8, 8}));
        const auto scores =
            at::adaptive_avg_pool2d(prev[0].data.view({1, 1, 8, 8}), {pn, pn}).flatten();
        const auto mask = k[0].data.flatten();
        EXPECT_GE(scores.masked_select(mask).min().item<float>(),
                  scores.masked_select(mask.logical_not()).max().item<float>())
            << si;
    }
    EXPECT_TRUE(rec.accel("lazyvar_kept", 2).empty());
    EXPECT_TRUE(rec.accel("lazyvar_group").empty());
    EXPECT_EQ(rec.accel("update_index").size(), 6u);  // every scale, for the inspector
    // The probes do not change the result.
    const auto quiet = pipe.generate(small_options(), hooks.get());
    for (int64_t si = 0; si < 6; ++si) EXPECT_TRUE(quiet.tokens[si].equal(res.tokens[si])) << si;
}

TEST(LazyVar, UpdateIndexProbeMatchesTheAccumulatedFeatures) {
    auto pipe = small_pipeline();
    ProbeRecorder rec(ProbeRecorder::Selection{{}, {}, /*fhat=*/true});
    auto hooks = make_lazyvar(lazy(4, 1, {0.5}), pipe.var_config(), &rec);
    pipe.generate(small_options(), hooks.get(), &rec);
    const auto scales = rec.scales();
    ASSERT_EQ(scales.size(), 6u);
    for (int64_t si = 1; si < 6; ++si) {
        const auto expect = lazyvar_update_index(scales[si - 1].f_hat, scales[si].f_hat)[0];
        const auto got = rec.accel("update_index", si);
        ASSERT_EQ(got.size(), 1u);
        EXPECT_TRUE(at::allclose(got[0].data, expect, 1e-5, 1e-6)) << si;
    }
}

TEST(LazyVar, GroupDecodingRunsFewerStepsAndMakesAValidImage) {
    auto pipe = small_pipeline();
    const auto& model = pipe.var_config();
    ProbeRecorder base_rec;
    const auto base = pipe.generate(small_options(), nullptr, &base_rec);
    ProbeRecorder rec;
    auto hooks = make_lazyvar(lazy(5, 3, {1.0}), model, &rec);  // group 3,4,5; no pruning
    const auto res = pipe.generate(small_options(), hooks.get(), &rec);

    std::set<int64_t> steps, base_steps;
    for (const auto& s : base_rec.scales()) base_steps.insert(s.step);
    const auto scales = rec.scales();
    ASSERT_EQ(scales.size(), 6u);
    for (const auto& s : scales) steps.insert(s.step);
    EXPECT_EQ(base_steps.size(), 6u);
    EXPECT_EQ(steps.size(), 4u);  // 0, 1, 2 and the group
    EXPECT_EQ(scales[3].step, scales[5].step);
    EXPECT_EQ(scales[4].step, scales[5].step);
    EXPECT_NE(scales[2].step, scales[3].step);
    // Attention FLOPs per scale record: the group's on its first scale, and they add up to the
    // run's (the GUI's per-scale table shows them).
    double booked = 0, base_booked = 0;
    for (const auto& s : scales) booked += s.attention_flops;
    for (const auto& s : base_rec.scales()) {
        EXPECT_GT(s.attention_flops, 0.0) << s.scale;
        base_booked += s.attention_flops;
    }
    EXPECT_GT(scales[3].attention_flops, 0.0);
    EXPECT_EQ(scales[4].attention_flops, 0.0);
    EXPECT_EQ(scales[5].attention_flops, 0.0);
    EXPECT_NEAR(booked, res.attention_flops, 1e-9 * res.attention_flops);
    EXPECT_NEAR(base_booked, base.attention_flops, 1e-9 * base.attention_flops);

    auto groups = rec.accel("lazyvar_group");
    ASSERT_EQ(groups.size(), 1u);
    EXPECT_EQ(groups[0].scale, 3);
    EXPECT_EQ(groups[0].values.at("size"), 3);
    EXPECT_TRUE(groups[0].data.equal(at::tensor(std::vector<int64_t>{3, 4, 5})));

    ASSERT_EQ(res.images.sizes(), base.images.sizes());
    EXPECT_TRUE(res.images.isfinite().all().item<bool>());
    EXPECT_GE(res.images.min().item<float>(), 0.0f);
    EXPECT_LE(res.images.max().item<float>(), 1.0f);
    for (int64_t si = 0; si < 6; ++si) {
        EXPECT_EQ(count_computed(res.tokens[si]), res.tokens[si].numel()) << si;
        EXPECT_LT(res.tokens[si].max().item<int64_t>(), model.vocab_size);
    }
    // Scales before the group are untouched, and so is the group's first scale: its input is
    // exact and the block-causal mask hides the later scales of the group from it.
    for (int64_t si = 0; si < 4; ++si) EXPECT_TRUE(res.tokens[si].equal(base.tokens[si])) << si;
    bool changed = false;
    for (int64_t si = 4; si < 6; ++si) changed = changed || !res.tokens[si].equal(base.tokens[si]);
    EXPECT_TRUE(changed) << "scales 4 and 5 should see f_hat from before the group";
}

TEST(LazyVar, GroupWithPruningUsesTheCumulativeIndex) {
    auto pipe = small_pipeline();
    ProbeRecorder rec;
    auto hooks = make_lazyvar(lazy(4, 2, {0.5, 0.25}), pipe.var_config(), &rec);
    const auto res = pipe.generate(small_options(), hooks.get(), &rec);
    EXPECT_EQ(count_computed(res.tokens[4]), 18);  // 0.5 * 36
    EXPECT_EQ(count_computed(res.tokens[5]), 16);  // 0.25 * 64
    auto k4 = rec.accel("lazyvar_kept", 4), k5 = rec.accel("lazyvar_kept", 5);
    ASSERT_EQ(k4.size(), 1u);
    ASSERT_EQ(k5.size(), 1u);
    EXPECT_EQ(k5[0].values.at("rank_begin"), 0);
    EXPECT_EQ(k4[0].values.at("rank_begin"), 9);  // 16 * 36/64
    // Both scales ranked by the index of scale 3, the last one before the group.
    const auto ui = rec.accel("update_index", 3).at(0).data;
    const auto expect = lazyvar_select_rows(ui, {6, 8}, {0.5, 0.25}, true);
    EXPECT_TRUE(k4[0].data.flatten().equal(
        at::zeros({36}, at::kBool).index_fill_(0, expect[0].rows, true)));
    EXPECT_TRUE(k5[0].data.flatten().equal(
        at::zeros({64}, at::kBool).index_fill_(0, expect[1].rows, true)));
    EXPECT_TRUE(res.images.isfinite().all().item<bool>());
}

TEST(LazyVar, GroupWhoseFirstScaleIsNotPrunedIsGuidedByTheIndexBeforeIt) {
    auto pipe = small_pipeline();
    auto hooks = make_lazyvar(lazy(5, 2, {0.5}), pipe.var_config(), nullptr);  // no probes
    const auto res = pipe.generate(small_options(), hooks.get());
    EXPECT_EQ(count_computed(res.tokens[4]), 36);
    EXPECT_EQ(count_computed(res.tokens[5]), 32);
}

TEST(LazyVar, OffSettingReproducesTheBaseline) {
    auto pipe = small_pipeline();
    const auto base = pipe.generate(small_options());
    ProbeRecorder rec;
    auto off = make_lazyvar(lazy(1, 1, {1.0}), pipe.var_config(), &rec);
    const auto res = pipe.generate(small_options(), off.get(), &rec);
    for (size_t si = 0; si < base.tokens.size(); ++si)
        EXPECT_TRUE(res.tokens[si].equal(base.tokens[si])) << si;
    EXPECT_TRUE(res.images.equal(base.images));
    EXPECT_TRUE(rec.accel("lazyvar_kept").empty());
    // Disabled: no hooks at all.
    auto cfg = AccelConfig::from_json({{"lazyvar", {{"enabled", false}}}});
    EXPECT_EQ(build_accelerators(cfg, pipe.var_config()), nullptr);
}

TEST(LazyVar, EmbeddedModelOffIsBaselineAndDefaultsStayClose) {
    ASSERT_TRUE(embedded_model_available());
    auto pipe = VarPipeline::load(embedded_model_files(), {});
    const auto o = varscope::testing::emoji_options({1891, 581, 100, 1500});  // red heart, cat, ...
    const auto base = pipe.generate(o);
    auto off = make_lazyvar(lazy(1, 1, {1.0}), pipe.var_config(), nullptr);
    const auto same = pipe.generate(o, off.get());
    for (size_t si = 0; si < base.tokens.size(); ++si)
        EXPECT_TRUE(same.tokens[si].equal(base.tokens[si])) << si;
    EXPECT_TRUE(same.images.equal(base.images));

    // The defaults for this schedule: pruned from 10x10 on, 13x13 and 16x16 grouped.
    LazyVarConfig def;
    def.enabled = true;
    ProbeRecorder rec;
    auto hooks = make_lazyvar(def, pipe.var_config(), &rec);
    const auto res = pipe.generate(o, hooks.get(), &rec);
    ASSERT_EQ(res.images.sizes(), base.images.sizes());
    EXPECT_TRUE(res.images.isfinite().all().item<bool>());
    for (int64_t si = 0; si < 7; ++si) EXPECT_TRUE(res.tokens[si].equal(base.tokens[si])) << si;
    EXPECT_EQ(count_computed(res.tokens[7]), 4 * 50);   // round(0.5 * 100) per image
    EXPECT_EQ(count_computed(res.tokens[9]), 4 * 102);  // round(0.4 * 256)
    EXPECT_EQ(rec.scales().at(8).step, rec.scales().at(9).step);
    // Same layout as the baseline: each image is much closer to its own baseline than the
    // baseline images of different classes are to each other.
    const auto shifted = base.images.roll(1, 0);
    const double d_lazy = (res.images - base.images).abs().mean().item<double>();
    const double d_class = (shifted - base.images).abs().mean().item<double>();
    EXPECT_LT(d_lazy, 0.5 * d_class) << d_lazy << " vs " << d_class;
}

TEST(LazyVar, ConfigRoundTripsAndErrorsNameTheField) {
    const auto def = LazyVarConfig::from_json(LazyVarConfig::spec().defaults());
    EXPECT_FALSE(def.enabled);
    EXPECT_EQ(def.to_json(), LazyVarConfig().to_json());
    auto c = lazy(2, 3, {0.4, 0.2}, false);
    EXPECT_EQ(LazyVarConfig::from_json(c.to_json()).to_json(), c.to_json());
    EXPECT_DOUBLE_EQ(c.ratio_at(1), 1.0);
    EXPECT_DOUBLE_EQ(c.ratio_at(2), 0.4);
    EXPECT_DOUBLE_EQ(c.ratio_at(9), 0.2);  // a short list repeats its last entry

    EXPECT_EQ(config_error({{"ratios", {0.2, 1.5}}}),
              "lazyvar.ratios[1]: must be in [0, 1], got 1.5");
    EXPECT_EQ(config_error({{"group_size", 0}}), "lazyvar.group_size: must be in [1, 16], got 0");
    EXPECT_EQ(config_error({{"start_scale", 0}}), "lazyvar.start_scale: must be in [1, 63], got 0");
    EXPECT_EQ(config_error({{"cumulative", 1}}),
              "lazyvar.cumulative: must be true or false, got 1");
    EXPECT_EQ(config_error({{"ratios", nlohmann::json::array()}}),
              "lazyvar.ratios: must have 1 to 16 entries, got 0");
    EXPECT_NE(config_error({{"group", 2}}).find("lazyvar.group: unknown field"), std::string::npos);

    const auto model = small_pipeline().var_config();  // 6 scales
    EXPECT_EQ(config_error({{"start_scale", 6}}, &model),
              "lazyvar.start_scale: must be in [1, 5] for the model's 6 scales, got 6");
    EXPECT_EQ(config_error({{"start_scale", 3}, {"group_size", 6}, {"ratios", {0.5}}}, &model),
              "lazyvar.group_size: must be in [1, 5] for the model's 6 scales (the first scale "
              "cannot join a group), got 6");
    EXPECT_EQ(config_error({{"start_scale", 4}, {"ratios", {0.5, 0.4, 0.3}}}, &model),
              "lazyvar.ratios: must have 1 to 2 entries (scales 4..5 of the model), got 3");
    EXPECT_EQ(config_error({{"start_scale", 4}, {"ratios", {0.5, 0.4}}}, &model), "");

    // The preset (paper-style defaults for VAR's 10-scale schedule) fits that schedule.
    const auto preset = AccelConfig::from_argument("lazyvar");
    EXPECT_TRUE(preset.lazyvar.enabled);
    EXPECT_NE(build_accelerators(preset, VarConfig{}), nullptr);
}

// A setting written for a longer schedule, moved onto a shorter one (the app does this for
// presets): the pruned scales stay the last ones, and each change is noted.
TEST(LazyVar, FitToScheduleKeepsThePrunedScalesAtTheEnd) {
    std::vector<std::string> notes;
    // The VAR preset (10 scales) on the 7-scale embedded text-to-image schedule.
    const auto var_preset = AccelConfig::from_argument("lazyvar").lazyvar;
    auto f = fit_to_schedule(var_preset, 7, &notes);
    EXPECT_EQ(f.start_scale, 4);
    EXPECT_EQ(f.ratios, var_preset.ratios);
    EXPECT_EQ(f.group_size, var_preset.group_size);
    EXPECT_EQ(f.cumulative, var_preset.cumulative);
    ASSERT_EQ(notes.size(), 1u);
    EXPECT_EQ(notes[0],
              "lazyvar.start_scale 7 -> 4 (its 3 ratios on the last 3 scales of the model's 7)");
    // ... and the hooks accept it on such a model (6 scales here: start 3).
    const auto model = small_pipeline().var_config();
    notes.clear();
    EXPECT_NO_THROW(
        make_lazyvar(fit_to_schedule(var_preset, model.num_scales(), &notes), model, nullptr));
    EXPECT_EQ(notes.size(), 1u);

    // Infinity's preset (13 scales, group of 4) on 7 scales: start 9 -> 3, the group stays.
    const auto inf = AccelConfig::from_argument("infinity-lazyvar").lazyvar;
    notes.clear();
    f = fit_to_schedule(inf, 7, &notes);
    EXPECT_EQ(f.start_scale, 3);
    EXPECT_EQ(f.ratios, inf.ratios);
    EXPECT_EQ(f.group_size, 4);
    EXPECT_EQ(notes.size(), 1u);

    // Three scales: only two can be pruned, so the last two ratios stay; the group shrinks.
    notes.clear();
    f = fit_to_schedule(lazy(7, 4, {0.5, 0.4, 0.3}), 3, &notes);
    EXPECT_EQ(f.start_scale, 1);
    EXPECT_EQ(f.ratios, (std::vector<double>{0.4, 0.3}));
    EXPECT_EQ(f.group_size, 2);
    ASSERT_EQ(notes.size(), 3u);
    EXPECT_EQ(notes[0], "lazyvar.ratios: the last 2 of 3 kept (the model has 3 scales)");
    EXPECT_EQ(notes[2], "lazyvar.group_size 4 -> 2");

    // What fits, is off, or has no scale to prune is returned as it is, without notes.
    notes.clear();
    EXPECT_EQ(fit_to_schedule(var_preset, 10, &notes).to_json(), var_preset.to_json());
    EXPECT_EQ(fit_to_schedule(inf, 13, &notes).to_json(), inf.to_json());
    LazyVarConfig off = var_preset;
    off.enabled = false;
    EXPECT_EQ(fit_to_schedule(off, 7, &notes).to_json(), off.to_json());
    EXPECT_EQ(fit_to_schedule(var_preset, 1, &notes).to_json(), var_preset.to_json());
    EXPECT_TRUE(notes.empty());
    EXPECT_NO_THROW(fit_to_schedule(var_preset, 7, nullptr));

    // The whole config: only LazyVAR's part moves.
    auto whole = AccelConfig::from_argument("lazyvar+skip");
    notes.clear();
    const auto fitted = fit_to_schedule(whole, 7, &notes);
    EXPECT_EQ(fitted.lazyvar.start_scale, 4);
    EXPECT_EQ(fitted.skip.to_json(), whole.skip.to_json());
    EXPECT_EQ(notes.size(), 1u);
}

// Every enabled setting with at least one ratio, fitted to any schedule of 2..16 scales, is one
// the hooks accept; a setting they accept as it is comes back unchanged and without a note.
TEST(LazyVar, FitToScheduleAlwaysGivesASettingTheHooksAccept) {
    int fitted = 0, kept = 0;
    for (int64_t S = 2; S <= 16; ++S) {
        VarConfig model;
        model.patch_nums.clear();
        for (int64_t s = 1; s <= S; ++s) model.patch_nums.push_back(s);
        for (int64_t start = 0; start <= 18; start += 3)
            for (int64_t group = 0; group <= 18; group += 3)
                for (size_t n : {size_t{1}, size_t{2}, size_t{5}, size_t{17}}) {
                    const auto cfg = lazy(start, group, std::vector<double>(n, 0.5));
                    const bool valid = config_error(cfg.to_json(), &model).empty();
                    std::vector<std::string> notes;
                    const auto f = fit_to_schedule(cfg, S, &notes);
                    SCOPED_TRACE("S " + std::to_string(S) + " start " + std::to_string(start) +
                                 " group " + std::to_string(group) + " ratios " +
                                 std::to_string(n));
                    EXPECT_EQ(config_error(f.to_json(), &model), "");
                    if (valid) {
                        EXPECT_TRUE(notes.empty());
                        EXPECT_EQ(f.to_json(), cfg.to_json());
                        ++kept;
                    } else {
                        EXPECT_FALSE(notes.empty());
                        ++fitted;
                    }
                }
    }
    EXPECT_GT(fitted, 0);
    EXPECT_GT(kept, 0);
}
