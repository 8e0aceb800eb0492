// The inspector's cross-attention maps (issue #33): a probe that records a layer's attention also
// gets, per scale, each image token's attention over the text tokens of the first conditional
// row (method "text", kind "cross_attention", (text tokens, h, w)); nothing when it does not ask.
// The tiny official-code fixture with its text features, CPU.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>

#include "core/infinity_pipeline.h"
#include "core/runner/runner.h"
#include "core/sampling/probes.h"
#include "tests/test_util.h"

using namespace varscope;

namespace {

std::string fixture(const std::string& name) {
    return varscope::testing::source_dir() + "/tests/fixtures/infinity_tiny/" + name;
}

struct TinyRun {
    std::unique_ptr<Runner> runner;
    SampleSettings settings;
};

TinyRun tiny_run() {
    ModelSpec spec;
    spec.model_path = fixture("infinity_tiny.pth");
    TinyRun r{open_runner(spec, load_options("cpu", "fp32")), {}};
    r.settings = r.runner->defaults();
    r.settings.text_features = fixture("teacher.safetensors");
    r.settings.pixels = "0.06M";
    r.settings.decode = false;
    r.settings.seed = 3;
    return r;
}

}  // namespace

TEST(InfinityCrossAttention, ARecordedLayerGivesTextMapsPerScale) {
    TinyRun run = tiny_run();
    const int64_t text_len = load_text_features(fixture("teacher.safetensors")).lens.at(0);
    ProbeRecorder::Selection sel;
    sel.layers = {1};
    ProbeRecorder rec(sel);
    run.runner->generate(run.settings, nullptr, &rec);
    const auto maps = rec.accel("cross_attention");
    const auto schedule = infinity_schedule(1.0, "0.06M");
    ASSERT_EQ(static_cast<int64_t>(maps.size()), schedule.num_scales());
    for (const auto& m : maps) {
        EXPECT_EQ(m.method, "text");
        EXPECT_EQ(m.layer, 1);
        const auto hw = schedule.scales.at(static_cast<size_t>(m.scale));
        ASSERT_EQ(m.data.sizes(), (at::IntArrayRef{text_len, hw[0], hw[1]})) << m.scale;
        EXPECT_EQ(m.values.at("text_tokens"), static_cast<double>(text_len));
        // Each image token's attention is a distribution over the text tokens.
        const auto sums = m.data.sum(0);
        EXPECT_TRUE(at::allclose(sums, at::ones_like(sums), 1e-4, 1e-4)) << m.scale;
        EXPECT_GE(m.data.min().item<float>(), 0.0f);
    }
}

TEST(InfinityCrossAttention, NothingWithoutAnAttentionLayer) {
    TinyRun run = tiny_run();
    ProbeRecorder rec;  // no layers asked for
    const RunResult with = run.runner->generate(run.settings, nullptr, &rec);
    EXPECT_TRUE(rec.accel("cross_attention").empty());
    // Recording does not change the run.
    ProbeRecorder::Selection sel;
    sel.layers = {0};
    ProbeRecorder maps(sel);
    const RunResult recorded = run.runner->generate(run.settings, nullptr, &maps);
    EXPECT_FALSE(maps.accel("cross_attention").empty());
    EXPECT_TRUE(with.latents.equal(recorded.latents));
}
