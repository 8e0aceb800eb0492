// FastVAR: off settings are the baseline; pruning computes fewer rows; PTS keeps the top
// scores; CTR fills pruned slots from the interpolated cache; ratio 1 skips; precise errors.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <utility>

#include "core/accel/accel_config.h"
#include "core/accel/fastvar.h"
#include "core/accel/probe_kinds.h"
#include "core/resources.h"
#include "tests/error_of.h"
#include "tests/tiny_models.h"

using namespace varscope;
using varscope::testing::small_pipeline;

namespace {

using Key = std::pair<int64_t, int64_t>;  // (scale, layer)

// Sees every block before the accelerators do (first in the chain) and answers nothing.
struct BlockRecorder : SamplingHooks {
    std::map<Key, at::Tensor> inputs, outputs;
    std::map<Key, int64_t> query_rows;
    int64_t scales_ended = 0;
    at::Tensor select_tokens(const BlockContext& c, const at::Tensor& x) override {
        inputs[{c.scale.scale, c.layer}] = x.clone();
        return {};
    }
    at::Tensor attend(const BlockContext& c, const at::Tensor& q, const at::Tensor&,
                      const at::Tensor&, double) override {
        query_rows[{c.scale.scale, c.layer}] = q.size(2);
        return {};
    }
    void on_block_output(const BlockContext& c, const at::Tensor& y) override {
        outputs[{c.scale.scale, c.layer}] = y.clone();
    }
    void on_scale_end(const ScaleContext&, const ScaleSegment&, const at::Tensor&,
                      const at::Tensor&) override {
        ++scales_ended;
    }
};

VarSampleOptions options(std::vector<int64_t> classes = {3, 5}, uint64_t seed = 7) {
    return varscope::testing::exact_options(std::move(classes), seed);
}

// Runs `accel` (AccelConfig JSON) with an optional recorder placed first in the chain.
VarSampleResult run(VarPipeline& p, const nlohmann::json& accel, const VarSampleOptions& o,
                    ProbeSink* probe = nullptr, BlockRecorder* recorder = nullptr) {
    auto hooks = build_accelerators(AccelConfig::from_json(accel), p.var_config(), probe);
    HookChain chain;
    if (recorder) chain.add(std::shared_ptr<SamplingHooks>(recorder, [](SamplingHooks*) {}));
    if (hooks) chain.add(hooks);
    return p.generate(o, chain.empty() ? nullptr : &chain, probe);
}

nlohmann::json fastvar_on(std::vector<double> ratios) {
    return {{"fastvar", {{"enabled", true}, {"ratios", ratios}}}};
}

void expect_same_tokens(const VarSampleResult& a, const VarSampleResult& b) {
    ASSERT_EQ(a.tokens.size(), b.tokens.size());
    for (size_t i = 0; i < a.tokens.size(); ++i)
        EXPECT_TRUE(a.tokens[i].equal(b.tokens[i])) << "scale " << i;
}

bool same_tokens(const VarSampleResult& a, const VarSampleResult& b) {
    if (a.tokens.size() != b.tokens.size()) return false;
    for (size_t i = 0; i < a.tokens.size(); ++i)
        if (!a.tokens[i].equal(b.tokens[i])) return false;
    return true;
}

// Area interpolation written out: output cell i averages input cells
// [floor(i*pc/pn), ceil((i+1)*pc/pn)) in each direction. map: (pc, pc, C) -> (pn, pn, C).
at::Tensor area_interpolate(const at::Tensor& map, int64_t pn) {
    const int64_t pc = map.size(0);
    auto out = at::zeros({pn, pn, map.size(2)}, map.options());
    for (int64_t i = 0; i < pn; ++i)
        for (int64_t j = 0; j < pn; ++j) {
            const int64_t i0 = i * pc / pn, i1 = ((i + 1) * pc + pn - 1) / pn;
            const int64_t j0 = j * pc / pn, j1 = ((j + 1) * pc + pn - 1) / pn;
            out[i][j] = map.slice(0, i0, i1).slice(1, j0, j1).mean(at::IntArrayRef{0, 1});
        }
    return out;
}

}  // namespace

TEST(FastVar, OffSettingsReproduceTheBaseline) {
    auto p = small_pipeline();
    const auto base = run(p, nlohmann::json::object(), options());
    for (const auto& accel :
         {nlohmann::json{{"fastvar", {{"enabled", false}, {"ratios", {0.9, 0.9}}}}},
          fastvar_on({0.0, 0.0}), fastvar_on({0.0, 0.0, 0.0, 0.0, 0.0})}) {
        const auto r = run(p, accel, options());
        expect_same_tokens(base, r);
        EXPECT_TRUE(base.images.equal(r.images)) << accel.dump();
    }
}

TEST(FastVar, OffSettingReproducesTheEmbeddedModel) {
    ASSERT_TRUE(embedded_model_available());
    auto p = VarPipeline::load(embedded_model_files(), {});
    const auto o = options({1891}, 3);  // red heart
    const auto base = run(p, nlohmann::json::object(), o);
    const auto off = run(p, fastvar_on({0.0, 0.0}), o);
    expect_same_tokens(base, off);
    EXPECT_TRUE(base.images.equal(off.images));

    // The default setting keeps the structure scales exact, and at the first pruned scale (same
    // inputs as the baseline there) its logits are nearer the baseline's than heavy pruning's.
    struct LogitsAt : SamplingHooks {
        int64_t scale;
        at::Tensor logits;
        explicit LogitsAt(int64_t s) : scale(s) {}
        void on_logits(const ScaleContext& c, at::Tensor& l) override {
            if (c.scale == scale) logits = l.clone();
        }
    };
    const int64_t first_pruned = p.var_config().num_scales() - 2;
    auto logits_with = [&](const nlohmann::json& accel, VarSampleResult* out = nullptr) {
        auto hooks = build_accelerators(AccelConfig::from_json(accel), p.var_config());
        HookChain chain;
        auto rec = std::make_shared<LogitsAt>(first_pruned);
        chain.add(rec);
        if (hooks) chain.add(hooks);
        auto r = p.generate(o, &chain);
        if (out) *out = r;
        return rec->logits;
    };
    VarSampleResult fast;
    const auto l_base = logits_with(nlohmann::json::object());
    const auto l_fast = logits_with({{"fastvar", {{"enabled", true}}}}, &fast);
    const auto l_heavy = logits_with(fastvar_on({0.9, 0.9}));
    for (int64_t si = 0; si < first_pruned; ++si)
        EXPECT_TRUE(base.tokens[si].equal(fast.tokens[si])) << "scale " << si;
    const double e_fast = (l_fast - l_base).abs().mean().item<double>();
    const double e_heavy = (l_heavy - l_base).abs().mean().item<double>();
    EXPECT_GT(e_fast, 0.0);
    EXPECT_LT(e_fast, e_heavy);
}

TEST(FastVar, PrunedBlocksComputeFewerRowsAndChangeTheTokens) {
    auto p = small_pipeline();  // scales 1, 2, 3, 4, 6, 8; depth 4
    BlockRecorder rec;
    run(p, fastvar_on({0.5, 0.75}), options(), nullptr, &rec);
    const int64_t depth = p.var_config().depth;
    for (int64_t l = 0; l < depth; ++l) {
        EXPECT_EQ(rec.query_rows.at({3, l}), 16) << l;  // cache scale: all of 4x4
        EXPECT_EQ(rec.query_rows.at({4, l}), 36 - 18) << l;
        EXPECT_EQ(rec.query_rows.at({5, l}), 64 - 48) << l;
    }
    const auto base = run(p, nlohmann::json::object(), options());
    const auto pruned = run(p, fastvar_on({0.9, 0.9}), options());
    EXPECT_FALSE(same_tokens(base, pruned));
    for (int si = 0; si < 4; ++si) EXPECT_TRUE(base.tokens[si].equal(pruned.tokens[si])) << si;
}

TEST(FastVar, PivotalTokenSelectionKeepsTheHighestScores) {
    auto p = small_pipeline();
    BlockRecorder rec;
    ProbeRecorder probe;
    run(p, fastvar_on({0.5, 0.75}), options(), &probe, &rec);
    for (int64_t si : {4, 5}) {
        const int64_t pn = p.var_config().patch_nums[si], n = pn * pn;
        const int64_t keep = si == 4 ? 18 : 16;
        auto kept = probe.accel(probe_kinds::kPtsKept, si);
        ASSERT_EQ(static_cast<int64_t>(kept.size()), p.var_config().depth);
        auto scores = probe.accel(probe_kinds::kPtsScores, si);
        ASSERT_EQ(scores.size(), 1u);
        EXPECT_EQ(scores[0].layer, 0);
        EXPECT_DOUBLE_EQ(scores[0].values.at("ratio"), si == 4 ? 0.5 : 0.75);
        for (const auto& k : kept) {
            EXPECT_EQ(k.method, "fastvar");
            EXPECT_EQ(k.values.at("kept"), keep);
            ASSERT_EQ(k.data.sizes(), (at::IntArrayRef{pn, pn}));
            ASSERT_EQ(k.data.scalar_type(), at::kByte);
            // Direct score of the first conditional row of this block's input.
            auto x = rec.inputs.at({si, k.layer})[0].to(at::kDouble);  // (n, C)
            auto direct = at::zeros({n}, at::kDouble);
            auto mean = x.sum(0) / static_cast<double>(n);
            for (int64_t t = 0; t < n; ++t) direct[t] = (x[t] - mean).pow(2).sum();
            auto mask = k.data.view({n}).to(at::kBool);
            EXPECT_EQ(mask.sum().item<int64_t>(), keep);
            EXPECT_GT(direct.masked_select(mask).min().item<double>(),
                      direct.masked_select(~mask).max().item<double>())
                << "scale " << si << " layer " << k.layer;
            if (k.layer == 0) {
                EXPECT_TRUE(
                    at::allclose(scores[0].data.view({n}).to(at::kDouble), direct, 1e-4, 1e-5));
            }
        }
    }
}

TEST(FastVar, CachedTokenRestorationFillsPrunedSlotsFromTheInterpolatedCache) {
    auto p = small_pipeline();
    BlockRecorder rec;
    ProbeRecorder probe;
    run(p, fastvar_on({0.5, 0.75}), options({4}), &probe, &rec);  // one image: rows cond, uncond
    const int64_t cache_scale = 3, pc = 4;
    for (int64_t si : {4, 5}) {
        const int64_t pn = p.var_config().patch_nums[si], n = pn * pn;
        for (const auto& k : probe.accel(probe_kinds::kPtsKept, si)) {
            const auto in = rec.inputs.at({si, k.layer}), out = rec.outputs.at({si, k.layer});
            const auto update = rec.outputs.at({cache_scale, k.layer}) -
                                rec.inputs.at({cache_scale, k.layer});  // (2, 16, C)
            const auto pruned = (k.data.view({n}) == 0).nonzero().view({-1});
            ASSERT_EQ(pruned.numel(), n - static_cast<int64_t>(k.values.at("kept")));
            for (int64_t row = 0; row < 2; ++row) {  // CFG rows share the selection
                auto up = area_interpolate(update[row].view({pc, pc, -1}), pn).view({n, -1});
                auto expected = in[row] + up;
                EXPECT_TRUE(at::allclose(out[row].index_select(0, pruned),
                                         expected.index_select(0, pruned), 1e-5, 1e-5))
                    << "scale " << si << " layer " << k.layer << " row " << row;
                // Computed slots are the block's own output, not the cache.
                const auto computed = k.data.view({n}).nonzero().view({-1});
                EXPECT_FALSE(at::allclose(out[row].index_select(0, computed),
                                          expected.index_select(0, computed), 1e-3, 1e-3));
            }
        }
    }
}

TEST(FastVar, FullRatioSkipsTheScale) {
    auto p = small_pipeline();
    const auto skip = run(p, {{"skip", {{"enabled", true}, {"last_n", 2}}}}, options());
    const auto full = run(p, fastvar_on({1.0, 1.0}), options());
    expect_same_tokens(skip, full);
    EXPECT_TRUE(skip.images.equal(full.images));

    BlockRecorder rec;
    ProbeRecorder probe;
    run(p, fastvar_on({0.5, 1.0}), options(), &probe, &rec);
    EXPECT_EQ(rec.scales_ended, 5);
    EXPECT_FALSE(probe.accel(probe_kinds::kPtsKept, 4).empty());
    EXPECT_TRUE(probe.accel(probe_kinds::kPtsKept, 5).empty());
}

TEST(FastVar, OneHookServesSeveralRuns) {
    auto p = small_pipeline();
    FastVarConfig c;
    c.enabled = true;
    c.ratios = {0.5, 0.5};
    auto hooks = make_fastvar(c, p.var_config(), nullptr);
    const auto a = p.generate(options(), hooks.get());
    const auto other = p.generate(options({1, 2, 3}, 9), hooks.get());  // other batch size
    const auto b = p.generate(options(), hooks.get());
    expect_same_tokens(a, b);
    EXPECT_EQ(other.tokens.back().size(0), 3);
}

TEST(FastVar, ProbesOnlyWhenWanted) {
    struct Refusing : ProbeRecorder {
        bool wants_accel(const std::string&, const std::string&) const override { return false; }
    } probe;
    auto p = small_pipeline();
    run(p, fastvar_on({0.5, 0.5}), options(), &probe);
    EXPECT_TRUE(probe.accel().empty());
}

TEST(FastVar, ConfigRoundTripsAndDefaults) {
    const auto d = FastVarConfig::from_json(FastVarConfig::spec().defaults());
    EXPECT_FALSE(d.enabled);
    EXPECT_EQ(d.ratios, (std::vector<double>{0.4, 0.5}));
    FastVarConfig c;
    c.enabled = true;
    c.ratios = {0.25, 0.5, 1.0};
    const auto back = FastVarConfig::from_json(c.to_json());
    EXPECT_TRUE(back.enabled);
    EXPECT_EQ(back.ratios, c.ratios);
}

TEST(FastVar, ConfigErrorsNameTheField) {
    auto message = [](const std::function<void()>& f) {
        return varscope::testing::error_of<AccelConfigError>(f, "(no error)");
    };
    auto parse = [&](const nlohmann::json& j) {
        return message([&] { FastVarConfig::from_json(j); });
    };
    EXPECT_EQ(parse({{"ratios", {0.5, 1.5}}}), "fastvar.ratios[1]: must be in [0, 1], got 1.5");
    EXPECT_EQ(parse({{"ratios", {0.5, "x"}}}), "fastvar.ratios[1]: must be a number, got \"x\"");
    EXPECT_EQ(parse({{"ratios", nlohmann::json::array()}}),
              "fastvar.ratios: must have 1 to 16 entries, got 0");
    EXPECT_EQ(parse({{"ratio", {0.5}}}).rfind("fastvar.ratio: unknown field", 0), 0u);

    const auto model = small_pipeline().var_config();  // 6 scales
    auto make = [&](std::vector<double> ratios) {
        FastVarConfig c;
        c.enabled = true;
        c.ratios = std::move(ratios);
        return message([&] { make_fastvar(c, model, nullptr); });
    };
    EXPECT_EQ(make({0.1, 0.1, 0.1, 0.1, 0.1, 0.1}).rfind("fastvar.ratios: has 6 entries", 0), 0u);
    EXPECT_NE(make({0.1, 0.1, 0.1, 0.1, 0.1, 0.1}).find("1 to 5"), std::string::npos);
    EXPECT_EQ(make({1.0, 0.5}).rfind("fastvar.ratios[1]: a skipped scale", 0), 0u);
    EXPECT_EQ(make({0.1, 0.1, 0.1, 0.1, 0.1}), "(no error)");
    // Through the aggregate config as the CLI and GUI use it.
    EXPECT_EQ(message([&] {
                  build_accelerators(
                      AccelConfig::from_json(fastvar_on({0.5, 0.5, 0.5, 0.5, 0.5, 0.5})), model);
              }).rfind("fastvar.ratios: has 6 entries", 0),
              0u);
}
