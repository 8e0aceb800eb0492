// The papers' Infinity-2B presets (core/accel/accel_config.h, infinity_accel_presets): the
// settings the papers give for the 13-scale 1024^2 schedule, each running through the Infinity
// loop's hooks on a tiny random model with that schedule, the scales before the method's first
// one untouched, and each the baseline at its off setting; on shorter schedules the presets
// counted from the end still run and LazyVAR's start scale is refused naming the field.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/accel/accel_config.h"
#include "core/sampling/infinity_sampler.h"
#include "tests/tiny_infinity.h"

using namespace varscope;

namespace {

const std::vector<std::string> kInfinityPresets = {"infinity-fastvar", "infinity-lazyvar",
                                                   "infinity-sparvar", "infinity-sparvar+skip"};

InfinityConfig tiny_config() {
    return varscope::testing::tiny_preset_infinity_config();
}

InfinitySampler tiny_sampler() {
    return varscope::testing::tiny_preset_infinity_sampler();
}

InfinityText text() {
    return varscope::testing::tiny_preset_infinity_text();
}

InfinitySampleOptions options() {
    InfinitySampleOptions o;
    o.seed = 11;
    o.cfg = 3.0;
    o.top_k = 0;
    o.top_p = 0.0;
    return o;
}

std::string error_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const std::exception& e) {
        return e.what();
    }
    return {};
}

}  // namespace

TEST(InfinityPresets, AreThePapersInfinity2BSettings) {
    const auto& all = infinity_accel_presets();
    for (const auto& [name, json] : accel_presets()) {  // the VAR presets apply to Infinity too
        ASSERT_TRUE(all.count(name)) << name;
        EXPECT_EQ(all.at(name), json) << name;
    }
    for (const auto& name : kInfinityPresets) {
        ASSERT_TRUE(all.count(name)) << name;
        EXPECT_FALSE(accel_presets().count(name)) << name << " belongs to Infinity only";
    }
    const auto s = infinity_schedule(1.0, "1M");
    ASSERT_EQ(s.num_scales(), 13);
    EXPECT_EQ(s.scales.back()[0], 64);
    const auto view = infinity_hook_view(InfinityConfig::infinity_2b(), s);
    ASSERT_TRUE(view.has_value());

    const auto fastvar = AccelConfig::from_argument("infinity-fastvar");
    EXPECT_EQ(fastvar.fastvar.ratios, (std::vector<double>{0.4, 0.5, 1.0, 1.0}));
    // Two scales at 100 %: skipped (13 - 2 run).
    EXPECT_EQ(build_accelerators(fastvar, *view)->scales_to_run(*view), 11);

    const auto lazy = AccelConfig::from_argument("infinity-lazyvar");
    EXPECT_EQ(lazy.lazyvar.start_scale, 9);  // the 10th scale (32 x 32)
    EXPECT_EQ(view->patch_nums[9], 32);
    EXPECT_EQ(lazy.lazyvar.group_size, 4);
    EXPECT_EQ(lazy.lazyvar.ratios, (std::vector<double>{0.2, 0.1, 0.05, 0.01}));
    EXPECT_TRUE(lazy.lazyvar.cumulative);
    const ExecPolicy exec;
    const auto hooks = build_accelerators(lazy, *view);
    ScaleContext at9{*view, 9, 32, 1, view->scale_begin(9), at::Tensor(), {}, 9, exec};
    EXPECT_EQ(hooks->group_size(at9), 4);  // scales 10-13 in one pass

    const auto sparvar = AccelConfig::from_argument("infinity-sparvar");
    EXPECT_EQ(sparvar.sparvar.sparse_scales, 2);  // decision scale 11 (1-based)
    EXPECT_DOUBLE_EQ(sparvar.sparvar.cs4a_fraction, 0.6);
    EXPECT_EQ(build_accelerators(sparvar, *view)->scales_to_run(*view), 13);
    const auto sparvar_skip = AccelConfig::from_argument("infinity-sparvar+skip");
    EXPECT_EQ(sparvar_skip.sparvar.sparse_scales, 3);  // decision scale 10, scale 11 sparse
    EXPECT_TRUE(sparvar_skip.skip.enabled);
    EXPECT_EQ(sparvar_skip.skip.last_n, 2);
    EXPECT_EQ(build_accelerators(sparvar_skip, *view)->scales_to_run(*view), 11);
}

// A tiny model on the 13-scale schedule: each preset changes nothing before its first scale,
// changes something from there on, and each is the baseline at its off setting.
TEST(InfinityPresets, RunOnATinyInfinityAndAreTheBaselineWhenOff) {
    c10::InferenceMode guard;
    auto sampler = tiny_sampler();
    const auto s = infinity_schedule(1.0, "1M");
    const auto view = infinity_hook_view(tiny_config(), s);
    ASSERT_TRUE(view.has_value());
    const auto o = options();
    const auto base = sampler.sample(text(), s, o);
    struct Case {
        std::string name;
        int64_t first;       // the method's first scale (si)
        nlohmann::json off;  // the preset's knobs at their off settings
    };
    const std::vector<Case> cases = {
        {"infinity-fastvar", 9, {{"fastvar", {{"ratios", {0.0, 0.0, 0.0, 0.0}}}}}},
        {"infinity-lazyvar", 9, {{"lazyvar", {{"group_size", 1}, {"ratios", {1.0}}}}}},
        {"infinity-sparvar",
         11,
         {{"sparvar", {{"top_k", 1.0}, {"windows", {255}}, {"middle_window", 255}}}}},
        {"infinity-sparvar+skip",
         10,
         {{"sparvar", {{"top_k", 1.0}, {"windows", {255}}, {"middle_window", 255}}},
          {"skip", {{"last_n", 0}}}}},
    };
    for (const auto& k : cases) {
        SCOPED_TRACE(k.name);
        const auto preset = infinity_accel_presets().at(k.name);
        const auto on = sampler.sample(
            text(), s, o, build_accelerators(AccelConfig::from_json(preset), *view).get());
        ASSERT_LE(on.bits.size(), base.bits.size());
        EXPECT_TRUE(at::isfinite(on.summed_codes).all().item<bool>());
        bool changed = on.bits.size() < base.bits.size();
        for (size_t si = 0; si < on.bits.size(); ++si) {
            const bool same = at::equal(on.bits[si], base.bits[si]);
            if (static_cast<int64_t>(si) < k.first) {
                EXPECT_TRUE(same) << "scale " << si;
            }
            changed = changed || !same;
        }
        EXPECT_TRUE(changed);
        nlohmann::json off = preset;
        off.merge_patch(k.off);
        const auto r = sampler.sample(text(), s, o,
                                      build_accelerators(AccelConfig::from_json(off), *view).get());
        ASSERT_EQ(r.bits.size(), base.bits.size()) << off.dump();
        for (size_t si = 0; si < r.bits.size(); ++si)
            EXPECT_TRUE(at::equal(r.bits[si], base.bits[si])) << off.dump() << " scale " << si;
        EXPECT_TRUE(at::equal(r.summed_codes, base.summed_codes)) << off.dump();
        std::printf("[infinity presets] %s: %zu scales run; off setting = baseline\n",
                    k.name.c_str(), on.bits.size());
    }
}

// Shorter schedules: FastVAR's ratios, SparVAR's sparse scales and skipping count from the end
// and build; LazyVAR's start scale 9 is refused (not clipped) with the field named and a
// setting that fits the schedule suggested.
TEST(InfinityPresets, ShorterSchedulesRefuseLazyVarsStartScaleByName) {
    for (const char* pixels : {"0.25M", "0.06M"}) {
        SCOPED_TRACE(pixels);
        const auto view = infinity_hook_view(tiny_config(), infinity_schedule(1.0, pixels));
        ASSERT_TRUE(view.has_value());
        for (const auto& name : kInfinityPresets) {
            const auto cfg = AccelConfig::from_argument(name);
            const auto message = error_of([&] { build_accelerators(cfg, *view); });
            if (name == "infinity-lazyvar") {
                EXPECT_EQ(message.rfind("lazyvar.", 0), 0u) << message;
                // It names a setting that fits, and that setting builds.
                const std::string lead = "with the pruned scales at the end: ";
                const auto at = message.find(lead);
                ASSERT_NE(at, std::string::npos) << message;
                const std::string json =
                    message.substr(at + lead.size(), message.size() - at - lead.size() - 1);
                EXPECT_EQ(
                    error_of([&] { build_accelerators(AccelConfig::from_argument(json), *view); }),
                    "")
                    << json;
            } else {
                EXPECT_EQ(message, "") << name;
            }
        }
    }
    EXPECT_NE(error_of([&] {
                  build_accelerators(
                      AccelConfig::from_argument("infinity-lazyvar"),
                      *infinity_hook_view(tiny_config(), infinity_schedule(1.0, "0.06M")));
              }).find("start_scale"),
              std::string::npos);
}
