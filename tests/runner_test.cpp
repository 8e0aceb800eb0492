// core's one model-family interface: the family is detected from the checkpoint in one place,
// every family samples through the same calls, accelerators are exactly the baseline when off,
// and the embedded models give the same tokens through it as through the pipelines the front
// ends used before they were written once.
#include "core/runner/runner.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <fstream>

#include "core/io/checkpoint.h"
#include "core/models/sampling_recommendation.h"
#include "core/resources.h"
#include "tests/test_util.h"

using namespace varscope;

namespace {

std::unique_ptr<Runner> embedded(Family f) {
    ModelSpec spec;
    spec.embedded = f;
    return open_runner(spec, {});
}

std::string error_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace

TEST(Runner, DetectsTheFamilyFromTheCheckpoint) {
    ASSERT_TRUE(embedded_model_available() && embedded_mar_available()) << resource_dir();
    const auto var = embedded(Family::Var);
    const auto mar = embedded(Family::Mar);
    EXPECT_EQ(var->family(), Family::Var);
    EXPECT_EQ(mar->family(), Family::Mar);
    EXPECT_STREQ(var->step_noun(), "scale");
    EXPECT_STREQ(mar->step_noun(), "step");
    // The embedded MAR named as a file: still MAR, with its respacing recommendation applied.
    ModelSpec spec;
    spec.model_path = embedded_mar_files().mar_path;
    spec.vae_path = embedded_mar_files().vae_path;
    const auto again = open_runner(spec, {});
    EXPECT_EQ(again->family(), Family::Mar);
    EXPECT_EQ(again->settings_json({})["num_sampling_steps"],
              mar->settings_json({})["num_sampling_steps"]);
    EXPECT_EQ(detect_runner_family(embedded_model_files().var_path), Family::Var);
    EXPECT_EQ(var->shape().counts.scales, 10);
    EXPECT_EQ(mar->shape().counts.decoder_blocks,
              mar->config_json()["decoder_depth"].get<int64_t>());
}

TEST(Runner, NamesWhatAFileHoldsWhenItIsNoModel) {
    ModelSpec spec;
    spec.model_path = embedded_mar_files().vae_path;  // a KL VAE, not a transformer
    EXPECT_NE(
        error_of([&] { open_runner(spec, {}); }).find("not a VAR, MAR or Infinity transformer"),
        std::string::npos);
    spec.named_as = Family::Mar;
    EXPECT_NE(error_of([&] { open_runner(spec, {}); }).find("no MAR weights found"),
              std::string::npos);
    spec.named_as = Family::Var;
    EXPECT_NE(error_of([&] { open_runner(spec, {}); }).find("expected a VAR transformer"),
              std::string::npos);
    EXPECT_NE(error_of([] {
                  detect_runner_family(embedded_model_files().vae_path);
              }).find("not a VAR, MAR or Infinity transformer"),
              std::string::npos);
}

// The runner gives exactly what the pipelines gave the front ends before they were written once
// against it (the old generate / generate-mar built these options from the same flags).
TEST(Runner, SameTokensAsThePipelinesThemselves) {
    const auto runner = embedded(Family::Var);
    SampleSettings s = runner->defaults();
    runner->apply_recommendation(s, {});
    s.class_ids = {1891, 581};
    s.seed = 7;
    const RunResult r = runner->generate(s);

    auto pipe = VarPipeline::load(embedded_model_files(), {});
    VarSampleOptions o;
    o.class_ids = {1891, 581};
    o.seed = 7;
    const auto rec = read_sampling_recommendation(embedded_model_files().var_path);
    ASSERT_FALSE(rec.empty());  // the emoji VAR recommends its own top-k: applied by both
    if (rec.cfg) o.cfg = *rec.cfg;
    if (rec.top_k) o.top_k = *rec.top_k;
    if (rec.top_p) o.top_p = *rec.top_p;
    const VarSampleResult want = pipe.generate(o);
    ASSERT_EQ(r.step_tokens.size(), want.tokens.size());
    for (size_t si = 0; si < want.tokens.size(); ++si) {
        EXPECT_TRUE(r.step_tokens[si].equal(want.tokens[si])) << si;
        EXPECT_TRUE(r.tensors.at("tokens." + std::to_string(si)).equal(want.tokens[si].cpu()));
    }
    EXPECT_TRUE(r.images.equal(want.images));
}

TEST(Runner, SameMarTokensAsThePipelineItself) {
    const auto runner = embedded(Family::Mar);
    SampleSettings s = runner->defaults();
    runner->apply_recommendation(s, {});
    s.class_ids = {1891};
    s.seed = 7;
    s.num_iter = 4;
    const RunResult r = runner->generate(s);

    const MarModelFiles files = embedded_mar_files();  // with the recommended respacing
    auto pipe = MarPipeline::load(files, {});
    const auto rec = read_mar_sampling_recommendation(files.mar_path);
    MarSampleOptions o;
    o.class_ids = {1891};
    o.seed = 7;
    o.num_iter = 4;
    if (rec.cfg) o.cfg = *rec.cfg;
    if (rec.cfg_schedule) o.cfg_schedule = parse_cfg_schedule(*rec.cfg_schedule);
    if (rec.temperature) o.temperature = *rec.temperature;
    const MarSampleResult want = pipe.generate(o);
    EXPECT_TRUE(r.tensors.at("orders").equal(want.orders.cpu()));
    EXPECT_TRUE(r.tensors.at("tokens").equal(want.tokens.cpu()));
    EXPECT_TRUE(r.images.equal(want.images));
    EXPECT_DOUBLE_EQ(s.cfg, rec.cfg.value_or(1.0));
}

// Every family: accelerators off give the baseline exactly; a config of another family is
// refused; the comparison's columns say so.
TEST(Runner, AcceleratorsOffAreTheBaselineInEveryFamily) {
    for (Family f : {Family::Var, Family::Mar}) {
        SCOPED_TRACE(family_id(f));
        const auto runner = embedded(f);
        SampleSettings s = runner->defaults();
        s.class_ids = {5};
        s.seed = 3;
        s.num_iter = 4;
        const auto off = runner->parse_accel(nlohmann::json::object());
        EXPECT_FALSE(off->enabled());
        EXPECT_EQ(off->summary(), "baseline");
        const RunResult base = runner->generate(s);
        const RunResult same = runner->generate(s, off.get());
        EXPECT_TRUE(base.images.equal(same.images));
        EXPECT_TRUE(base.latents.equal(same.latents));
        const auto other = accel_plan(f == Family::Var ? Family::Mar : Family::Var, "");
        EXPECT_NE(error_of([&] { runner->generate(s, other.get()); }).find("cannot run on a"),
                  std::string::npos);
        for (const auto& row : runner->compare_steps(base, same)) {
            if (f == Family::Var) {
                EXPECT_DOUBLE_EQ(row["identical_tokens"].get<double>(), 1.0);
            } else {
                EXPECT_DOUBLE_EQ(row["computed_share"].get<double>(), 1.0);
            }
        }
        if (f == Family::Mar) {
            EXPECT_DOUBLE_EQ(
                runner->compare_summary(base, same)["latent_relative_l2"].get<double>(), 0.0);
        }
        EXPECT_EQ(int64_t(base.step_millis.size()), runner->steps(s));
    }
}

TEST(Runner, AnAcceleratorChangesTheRunAndReportsIt) {
    const auto runner = embedded(Family::Mar);
    SampleSettings s = runner->defaults();
    runner->apply_recommendation(s, {});
    s.class_ids = {1891};
    s.num_iter = 8;
    s.count_flops = true;
    const auto lazy = runner->accel_from_argument("lazymar");
    ASSERT_TRUE(lazy->enabled());
    const RunResult base = runner->generate(s), fast = runner->generate(s, lazy.get());
    EXPECT_FALSE(base.latents.equal(fast.latents));
    EXPECT_GT(base.flops["total"].get<double>(), fast.flops["total"].get<double>());
    ASSERT_EQ(fast.step_info.size(), size_t(8));
    bool cached = false;
    for (const auto& st : fast.step_info) cached = cached || !st["token_refresh"].get<bool>();
    EXPECT_TRUE(cached);  // LazyMAR's schedule reuses the cache on some steps
}

// A runner reuses one hooks object per accelerator config across runs (CUDA graphs replay on
// its buffers): every preset must then draw what a fresh object draws, run after run.
TEST(Runner, ReusedAcceleratorHooksGiveTheSameRunAsFreshOnes) {
    const auto runner = embedded(Family::Var);
    SampleSettings s = runner->defaults();
    s.class_ids = {3, 17};
    s.seed = 5;
    s.decode = false;
    for (const auto& [name, config] : runner->presets()) {
        if (name == "baseline") continue;
        const auto plan = runner->accel_from_argument(name);
        const RunResult first = runner->generate(s, plan.get());
        const auto other = runner->accel_from_argument("skip");  // something else in between
        runner->generate(s, other.get());
        const RunResult again = runner->generate(s, plan.get());
        const auto fresh = embedded(Family::Var);
        const RunResult clean = fresh->generate(s, fresh->accel_from_argument(name).get());
        ASSERT_EQ(first.step_tokens.size(), again.step_tokens.size()) << name;
        for (size_t i = 0; i < first.step_tokens.size(); ++i) {
            EXPECT_TRUE(first.step_tokens[i].equal(again.step_tokens[i])) << name << " scale " << i;
            EXPECT_TRUE(first.step_tokens[i].equal(clean.step_tokens[i])) << name << " scale " << i;
        }
    }
}

TEST(Runner, TeacherForwardChecksItsInput) {
    const auto runner = embedded(Family::Var);
    StateDict in{{"labels", at::tensor({1}, at::kLong)}};
    EXPECT_NE(error_of([&] {
                  runner->teacher_forward(in, "x.safetensors", false);
              }).find("x.safetensors: no 'tokens.0'"),
              std::string::npos);
    in["tokens.0"] = at::zeros({1, 1}, at::kLong);
    const auto sides = runner->shape().step_sides;
    for (size_t si = 1; si < sides.size(); ++si)
        in["tokens." + std::to_string(si)] = at::zeros({1, sides[si] * sides[si]}, at::kLong);
    const StateDict out = runner->teacher_forward(in, "x.safetensors", false);
    ASSERT_EQ(out.count("logits"), 1u);
    EXPECT_EQ(out.at("logits").size(0), 1);
}
