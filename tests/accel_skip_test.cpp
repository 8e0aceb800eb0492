// Scale skipping: last_n = 0 is the baseline; last_n = k runs the first S-k scales exactly as
// the baseline does and decodes the f_hat they accumulated; settings the model cannot take fail.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include "core/accel/accel_config.h"
#include "core/accel/scale_skip.h"
#include "core/resources.h"
#include "tests/error_of.h"
#include "tests/tiny_models.h"

using namespace varscope;
using varscope::testing::small_pipeline;

namespace {

struct ScaleCounter : SamplingHooks {
    std::vector<int64_t> ended;
    void on_scale_end(const ScaleContext&, const ScaleSegment& seg, const at::Tensor&,
                      const at::Tensor&) override {
        ended.push_back(seg.scale);
    }
};

VarSampleOptions options(std::vector<int64_t> classes = {3, 5}, uint64_t seed = 11) {
    return varscope::testing::exact_options(std::move(classes), seed);
}

VarSampleResult run_skip(VarPipeline& p, int64_t last_n, const VarSampleOptions& o,
                         ScaleCounter* counter = nullptr) {
    ScaleSkipConfig c;
    c.enabled = true;
    c.last_n = last_n;
    HookChain chain;
    chain.add(make_scale_skip(c, p.var_config(), nullptr));
    if (counter) chain.add(std::shared_ptr<SamplingHooks>(counter, [](SamplingHooks*) {}));
    return p.generate(o, &chain);
}

at::Tensor decode(VarPipeline& p, const at::Tensor& f_hat) {
    c10::InferenceMode guard;
    return p.sampler().vqvae()->decode(f_hat).add(1).mul(0.5);
}

// Skipping k scales equals the baseline cut after scale S-k-1: same tokens, f_hat and image.
void expect_cut_baseline(VarPipeline& p, const VarSampleOptions& o, int64_t k) {
    const int64_t S = p.var_config().num_scales();
    ProbeRecorder probe(ProbeRecorder::Selection{{}, {}, true});
    const auto base = p.generate(o, nullptr, &probe);
    ScaleCounter counter;
    const auto skipped = run_skip(p, k, o, &counter);

    std::vector<int64_t> expected_scales;
    for (int64_t si = 0; si < S - k; ++si) expected_scales.push_back(si);
    EXPECT_EQ(counter.ended, expected_scales) << "k=" << k;
    ASSERT_GE(static_cast<int64_t>(skipped.tokens.size()), S - k);
    for (int64_t si = 0; si < S - k; ++si)
        EXPECT_TRUE(skipped.tokens[si].equal(base.tokens[si])) << "k=" << k << " scale " << si;

    at::Tensor f_cut;
    for (const auto& r : probe.scales())
        if (r.scale == S - k - 1) f_cut = r.f_hat;
    ASSERT_TRUE(f_cut.defined());
    EXPECT_TRUE(skipped.f_hat.cpu().equal(f_cut)) << "k=" << k;
    EXPECT_TRUE(
        at::allclose(skipped.images.cpu(), decode(p, f_cut.to(p.device())).cpu(), 1e-6, 1e-6))
        << "k=" << k;
    EXPECT_FALSE(skipped.images.equal(base.images)) << "k=" << k;
}

}  // namespace

TEST(ScaleSkip, ZeroSkippedScalesIsTheBaseline) {
    auto p = small_pipeline();
    const auto base = p.generate(options());
    ScaleCounter counter;
    const auto r = run_skip(p, 0, options(), &counter);
    EXPECT_EQ(counter.ended.size(), 6u);
    ASSERT_EQ(r.tokens.size(), base.tokens.size());
    for (size_t si = 0; si < base.tokens.size(); ++si)
        EXPECT_TRUE(r.tokens[si].equal(base.tokens[si])) << si;
    EXPECT_TRUE(r.images.equal(base.images));
}

TEST(ScaleSkip, RunsTheFirstScalesAndDecodesTheirFHat) {
    auto p = small_pipeline();
    for (int64_t k : {1, 2, 4, 5}) expect_cut_baseline(p, options(), k);
}

TEST(ScaleSkip, EmbeddedModel) {
    ASSERT_TRUE(embedded_model_available());
    auto p = VarPipeline::load(embedded_model_files(), {});
    expect_cut_baseline(p, options({1891}, 3), 1);
    const auto base = p.generate(options({1891}, 3));
    const auto zero = run_skip(p, 0, options({1891}, 3));
    EXPECT_TRUE(zero.images.equal(base.images));
}

TEST(ScaleSkip, ThroughTheAcceleratorConfig) {
    auto p = small_pipeline();
    auto cfg = AccelConfig::from_json({{"skip", {{"last_n", 2}}}});
    EXPECT_TRUE(cfg.skip.enabled);
    EXPECT_EQ(cfg.summary(), "skip-2");
    auto hooks = build_accelerators(cfg, p.var_config());
    EXPECT_EQ(hooks->scales_to_run(p.var_config()), 4);
    EXPECT_EQ(ScaleSkipConfig::from_json(cfg.skip.to_json()).last_n, 2);
}

TEST(ScaleSkip, SettingsTheModelCannotTakeAreNamed) {
    auto message = [](const std::function<void()>& f) {
        return varscope::testing::error_of<AccelConfigError>(f, "(no error)");
    };
    const auto model = small_pipeline().var_config();
    ScaleSkipConfig c;
    c.enabled = true;
    c.last_n = 6;
    EXPECT_EQ(message([&] { make_scale_skip(c, model, nullptr); }),
              "skip.last_n: must be below the model's 6 scales, got 6");
    c.last_n = 5;
    EXPECT_EQ(message([&] { make_scale_skip(c, model, nullptr); }), "(no error)");
    EXPECT_EQ(message([] {
                  ScaleSkipConfig::from_json({{"last_n", -1}});
              }),
              "skip.last_n: must be in [0, 12], got -1");
    EXPECT_EQ(message([] {
                  ScaleSkipConfig::from_json({{"last_n", 1.5}});
              }),
              "skip.last_n: must be an integer, got 1.5");
    EXPECT_EQ(message([] {
                  ScaleSkipConfig::from_json({{"lastn", 1}});
              }).rfind("skip.lastn: unknown field", 0),
              0u);
}
