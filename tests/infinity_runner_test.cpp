// Infinity behind the Runner interface: detected from its tensor names by open_runner, teacher
// forward and generation on the tiny official fixture (tools/parity/infinity_parity.py), the VAR
// accelerators as Infinity plans.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/infinity_pipeline.h"
#include "core/io/checkpoint.h"
#include "core/runner/runner.h"
#include "tests/test_util.h"
#include "tests/tiny_bsq_vae.h"

using namespace varscope;

namespace {

std::string fixture(const std::string& name) {
    return varscope::testing::source_dir() + "/tests/fixtures/infinity_tiny/" + name;
}

std::unique_ptr<Runner> open_tiny() {
    ModelSpec spec;
    spec.model_path = fixture("infinity_tiny.pth");
    return open_runner(spec, load_options("cpu", "fp32"));
}

}  // namespace

TEST(InfinityRunner, OpenRunnerDetectsInfinity) {
    EXPECT_EQ(detect_runner_family(fixture("infinity_tiny.pth")), Family::Infinity);
    const auto r = open_tiny();
    EXPECT_EQ(r->family(), Family::Infinity);
    EXPECT_STREQ(family_id(Family::Infinity), "infinity");
    EXPECT_EQ(family_from_id("infinity"), Family::Infinity);
    EXPECT_NE(r->describe().find("depth 6"), std::string::npos) << r->describe();
    EXPECT_FALSE(r->has_decoder());
    EXPECT_EQ(r->shape().layers, 6);
    ModelSpec spec;
    spec.model_path = fixture("infinity_tiny.pth");
    // bf16 is the official bf16 mode; fp16 has no official counterpart.
    EXPECT_THROW(open_runner(spec, load_options("cpu", "fp16")), std::invalid_argument);
    EXPECT_NO_THROW(open_runner(spec, load_options("cpu", "bf16")));
    EXPECT_NO_THROW(open_runner(spec, load_options("cpu", "bf16-autocast")));
}

TEST(InfinityRunner, TeacherForwardMatchesTheOfficialLogits) {
    const auto r = open_tiny();
    const auto in = load_safetensors(fixture("teacher.safetensors"));
    const auto out = r->teacher_forward(in, "teacher.safetensors", false);
    const auto& e = in.at("logits");
    const double err = ((out.at("logits") - e).norm() / e.norm()).item<double>();
    EXPECT_LE(err, 1e-4);
    StateDict bad = in;
    bad.erase("scales");
    EXPECT_THROW(r->teacher_forward(bad, "x", false), std::invalid_argument);
}

TEST(InfinityRunner, GeneratesWhatThePipelineGenerates) {
    const auto r = open_tiny();
    SampleSettings s = r->defaults();
    s.text_features = fixture("teacher.safetensors");
    s.h_div_w = 1.333;
    s.pixels = "0.06M";
    s.seed = 9;
    const auto a = r->generate(s);
    ASSERT_EQ(a.step_tokens.size(), 7u);
    EXPECT_FALSE(a.images.defined());
    auto p = InfinityPipeline::load(fixture("infinity_tiny.pth"), "");
    InfinitySampleOptions o;
    o.seed = 9;
    o.cfg = 4.0;
    o.tau = 0.5;
    o.top_k = 900;
    o.top_p = 0.97;
    const auto b =
        p.generate(load_text_features(s.text_features), infinity_schedule(1.333, "0.06M"), o);
    for (size_t si = 0; si < 7; ++si)
        EXPECT_TRUE(at::equal(a.step_tokens[si], b.sample.tokens[si])) << si;
    // Prompts wait for the T5 encoder; no text at all is refused.
    s.prompts = {"a cat"};
    EXPECT_THROW(r->generate(s), std::invalid_argument);
    s.prompts.clear();
    s.text_features.clear();
    EXPECT_THROW(r->validate(s), std::invalid_argument);
}

// A features file's rows repeated to another batch (bench e2e --max-batch sizes its tries so):
// in order, each row's keys as they were; the runner makes that many images.
TEST(InfinityRunner, TextRowsRepeatTheFeaturesRows) {
    const InfinityText t = load_text_features(fixture("teacher.safetensors"));
    ASSERT_EQ(t.lens, (std::vector<int64_t>{5, 11}));
    const InfinityText five = repeat_text_rows(t, 5);
    EXPECT_EQ(five.lens, (std::vector<int64_t>{5, 11, 5, 11, 5}));
    ASSERT_EQ(five.kv_compact.size(0), 37);
    EXPECT_TRUE(at::equal(five.kv_compact.narrow(0, 16, 5), t.kv_compact.narrow(0, 0, 5)));
    EXPECT_TRUE(at::equal(five.kv_compact.narrow(0, 21, 11), t.kv_compact.narrow(0, 5, 11)));
    EXPECT_EQ(repeat_text_rows(t, 1).lens, (std::vector<int64_t>{5}));
    EXPECT_THROW(repeat_text_rows(t, 0), std::invalid_argument);

    const auto r = open_tiny();
    SampleSettings s = r->defaults();
    s.text_features = fixture("teacher.safetensors");
    s.pixels = "0.06M";
    s.decode = false;
    s.text_rows = 3;
    const auto three = r->generate(s);
    ASSERT_FALSE(three.step_tokens.empty());
    EXPECT_EQ(three.step_tokens[0].size(0), 3);
    s.text_rows = 0;  // the file's own rows
    EXPECT_EQ(r->generate(s).step_tokens[0].size(0), 2);
    s.text_rows = -1;
    EXPECT_THROW(r->validate(s), std::invalid_argument);
}

TEST(InfinityRunner, VarAcceleratorsRunAsInfinityPlans) {
    const auto r = open_tiny();
    SampleSettings s = r->defaults();
    s.text_features = fixture("teacher.safetensors");
    s.pixels = "0.06M";  // h_div_w 1: square scales up to 16 x 16
    const auto plan = r->accel_from_argument("fastvar");
    EXPECT_EQ(plan->family(), Family::Infinity);
    const auto base = r->generate(s), fast = r->generate(s, plan.get());
    const auto cmp = r->compare_steps(base, fast);
    ASSERT_EQ(cmp.size(), 7u);
    EXPECT_EQ(cmp[0]["identical_tokens"].get<double>(), 1.0);
    EXPECT_LT(fast.attention_flops, base.attention_flops);
    EXPECT_THROW(r->generate(s, accel_plan(Family::Var, "fastvar").get()), std::invalid_argument);
    s.h_div_w = 1.333;
    EXPECT_THROW(r->generate(s, plan.get()), std::invalid_argument);
}

// A prompt longer than the tokenizer's limit (512 tokens with EOS) is cut as the official
// encode_prompt cuts it, and the run says so; a short one gives no notice.
TEST(InfinityRunner, ALongPromptIsCutWithANotice) {
    namespace fs = std::filesystem;
    varscope::testing::TempDir dir;
    const fs::path t5 = dir.path() / "t5";
    fs::create_directories(t5);
    const std::string t5_fixture = varscope::testing::source_dir() + "/tests/fixtures/t5_tiny/";
    for (const char* f : {"config.json", "model.safetensors"})
        fs::copy_file(t5_fixture + "model/" + f, t5 / f);
    fs::copy_file(t5_fixture + "spiece.model", t5 / "spiece.model");
    InfinityConfig c;  // small, with the tiny T5's width (32) as the text width
    c.depth = 2;
    c.embed_dim = 32;
    c.num_heads = 2;
    c.mlp_hidden = 64;
    c.text_channels = 32;
    c.pool_heads = 1;
    c.codebook_dim = 8;
    const BsqVaeConfig v = varscope::testing::tiny_bsq_vae_config(8, {1, 1, 1});
    const auto r = random_infinity_runner(c, v, 1, load_options("cpu", "fp32"), t5.string());
    SampleSettings s = r->defaults();
    s.pixels = "0.06M";
    s.decode = false;
    std::string long_prompt;
    for (int i = 0; i < 700; ++i) long_prompt += "red fox ";
    s.prompts = {"a red fox", long_prompt};
    const auto res = r->generate(s);
    ASSERT_EQ(res.notices.size(), 1u);
    EXPECT_NE(res.notices[0].find("prompt 2 is longer than the text encoder's limit of 512"),
              std::string::npos)
        << res.notices[0];
    s.prompts = {"a red fox"};
    EXPECT_TRUE(r->generate(s).notices.empty());
}
