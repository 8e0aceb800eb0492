// The accelerator configuration as a whole: presets, JSON round trips, combination rules, and
// every preset running end to end on the embedded model.
#include "core/accel/accel_config.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <functional>

#include "core/accel/mar_accel_config.h"
#include "core/pipeline.h"
#include "core/resources.h"
#include "tests/error_of.h"
#include "tests/test_util.h"

using namespace varscope;

namespace {

VarConfig emoji_like_config() {
    return VarConfig::for_depth(8, {1, 2, 3, 4, 5, 6, 8, 10, 13, 16});
}

// Only configuration errors count: any other exception fails the test.
std::string error_of(const std::function<void()>& fn) {
    return varscope::testing::error_of<AccelConfigError>(fn);
}

}  // namespace

TEST(AccelConfig, EveryPresetParsesRoundTripsAndBuilds) {
    ASSERT_GE(accel_presets().size(), 7u);
    for (const auto& [name, json] : accel_presets()) {
        SCOPED_TRACE(name);
        const auto cfg = AccelConfig::from_argument(name);
        EXPECT_EQ(AccelConfig::from_json(cfg.to_json()).to_json(), cfg.to_json());
        EXPECT_EQ(cfg.any_enabled(), name != "baseline");
        const auto hooks = build_accelerators(cfg, emoji_like_config());
        EXPECT_EQ(hooks != nullptr, name != "baseline");
    }
}

TEST(AccelConfig, MethodTablesAreCompleteAndDefaultsValid) {
    for (const auto& m : accel_methods()) {
        SCOPED_TRACE(m.id);
        EXPECT_FALSE(m.title.empty());
        EXPECT_FALSE(m.summary.empty());
        for (const auto& p : m.params) {
            EXPECT_FALSE(p.label.empty()) << p.key;
            EXPECT_FALSE(p.help.empty()) << p.key;
            EXPECT_LE(p.min, p.max) << p.key;
        }
        // The defaults themselves pass validation.
        EXPECT_NO_THROW(AccelConfig::from_json({{m.id, m.defaults()}}));
    }
}

TEST(AccelConfig, ErrorsNameTheFieldAndTheRule) {
    EXPECT_NE(error_of([] {
                  AccelConfig::from_json({{"fastvar", {{"enabled", "yes"}}}});
              }).find("fastvar.enabled: must be true or false"),
              std::string::npos);
    EXPECT_NE(error_of([] {
                  AccelConfig::from_json(nlohmann::json::array());
              }).find("must be a JSON object"),
              std::string::npos);
    EXPECT_NE(error_of([] { AccelConfig::from_argument("{not json"); }).find("not valid JSON"),
              std::string::npos);
    EXPECT_NE(error_of([] {
                  AccelConfig::from_argument("no-such-preset");
              }).find("neither a config file"),
              std::string::npos);
}

// The model bounds that sliders and sweeps use (ParamSpec::counts) agree with what each
// accelerator accepts: its largest value on the model builds, one more is refused.
TEST(AccelConfig, ModelBoundsMatchTheAcceleratorsChecks) {
    const VarConfig model = emoji_like_config();
    ModelCounts counts;
    counts.scales = model.num_scales();
    counts.tokens = model.total_tokens();
    int checked = 0;
    for (const auto& m : accel_methods())
        for (const auto& p : m.params) {
            if (p.counts == ParamCount::None) continue;
            const double top = model_max(p, counts);
            ASSERT_LE(top, p.max) << m.id << "." << p.key;
            nlohmann::json j = {{m.id, {{"enabled", true}, {p.key, int64_t(top)}}}};
            // The others at their most permissive for this one's top (the bound is the largest
            // value some setting of the others accepts).
            if (m.id == "lazyvar") j[m.id]["ratios"] = {0.5};  // one pruned scale at the top
            if (p.key == "sparse_scales") j[m.id]["sink_scales"] = 0;  // sinks before S
            if (p.key == "sink_scales") j[m.id]["sparse_scales"] = 1;  // S as late as can be
            if (p.key == "c_min") j[m.id]["c_max"] = int64_t(top);     // c_max >= c_min
            const std::string at_top =
                error_of([&] { build_accelerators(AccelConfig::from_json(j), model); });
            EXPECT_EQ(at_top, "") << m.id << "." << p.key << " = " << top;
            // A bound "below" a count: one more is an error. (Budgets past the model's tokens
            // are valid and only never evict.)
            // (SparVAR's sink scales are capped at the decision scale instead: not an error.)
            if (top < p.max && p.count_offset < 0 && p.key != "sink_scales") {
                j[m.id][p.key] = int64_t(top) + 1;
                const std::string above =
                    error_of([&] { build_accelerators(AccelConfig::from_json(j), model); });
                EXPECT_NE(above.find(m.id + "." + p.key), std::string::npos)
                    << m.id << "." << p.key << " = " << top + 1 << ": '" << above << "'";
            }
            ++checked;
        }
    EXPECT_EQ(checked, 8);  // skip, SparVAR x2, LazyVAR x2, AMS-KV x3
    // Unknown counts leave the spec's range.
    for (const auto& m : accel_methods())
        for (const auto& p : m.params) EXPECT_EQ(model_max(p, ModelCounts{}), p.max);
}

TEST(AccelConfig, PresetNamesMatchInAnyCase) {
    EXPECT_EQ(AccelConfig::from_argument("FastVAR").to_json(),
              AccelConfig::from_argument("fastvar").to_json());
    EXPECT_TRUE(AccelConfig::from_argument("SPARVAR+Skip").sparvar.enabled);
    EXPECT_NE(
        error_of([] { AccelConfig::from_argument("FastVARx"); }).find("neither a config file"),
        std::string::npos);
    EXPECT_TRUE(MarAccelConfig::from_argument("LazyMAR").lazymar.enabled);
}

TEST(AccelConfig, IncompatibleCombinationsAreRejectedUpFront) {
    auto both = [](const char* a, const char* b) {
        AccelConfig c =
            AccelConfig::from_json({{a, nlohmann::json::object()}, {b, nlohmann::json::object()}});
        return error_of([&] { build_accelerators(c, emoji_like_config()); });
    };
    EXPECT_NE(both("lazyvar", "fastvar").find("lazyvar: cannot be combined"), std::string::npos);
    EXPECT_NE(both("sparvar", "ams_kv").find("sparvar: cannot be combined"), std::string::npos);
    EXPECT_EQ(both("fastvar", "ams_kv"), "");  // the papers' combination
    EXPECT_EQ(both("sparvar", "skip"), "");
}

TEST(AccelConfig, EveryPresetGeneratesOnTheEmbeddedModel) {
    ASSERT_TRUE(embedded_model_available());
    auto files = embedded_model_files();
    VarPipeline pipe = VarPipeline::load(files, {});
    VarSampleOptions opt;
    opt.class_ids = {1891};
    opt.cfg = 3.0;
    const auto base = pipe.generate(opt);
    for (const auto& [name, json] : accel_presets()) {
        SCOPED_TRACE(name);
        const auto hooks = build_accelerators(AccelConfig::from_argument(name), pipe.var_config());
        const auto r = pipe.generate(opt, hooks.get());
        ASSERT_EQ(r.images.sizes(), base.images.sizes());
        EXPECT_TRUE(at::isfinite(r.images).all().item<bool>());
        EXPECT_EQ(r.tokens.size(), base.tokens.size());
        // Scale 0 is never accelerated by any method: same seed, same first token.
        EXPECT_TRUE(r.tokens[0].equal(base.tokens[0]));
        if (name == "baseline") {
            EXPECT_TRUE(r.images.equal(base.images));
        }
    }
}
