#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/io/checkpoint.h"
#include "core/io/module_binding.h"
#include "core/sampling/token_sampling.h"
#include "tests/sleeping_probe.h"
#include "tests/test_util.h"
#include "tests/tiny_models.h"

using namespace varscope;
using varscope::testing::tiny_pipeline;
using varscope::testing::tiny_var_config;

namespace {

// Records the guided logits of every scale.
struct LogitRecorder : SamplingHooks {
    std::vector<at::Tensor> logits;
    void on_logits(const ScaleContext&, at::Tensor& l) override { logits.push_back(l.clone()); }
};

VarSampleOptions tiny_options(uint64_t seed = 7) {
    return varscope::testing::exact_options({3, 5}, seed);
}

}  // namespace

TEST(VarConfig, InferFromStateDictRoundTrips) {
    for (bool shared : {false, true})
        for (bool l2 : {true, false}) {
            auto c = tiny_var_config(shared, l2);
            if (!l2) c.num_heads = 1;  // without scale_mul the head count is width / 64
            VarTransformer m(c);
            auto back = VarConfig::infer_from(module_state_dict(*m), c.patch_nums);
            EXPECT_EQ(back.to_json(), c.to_json()) << "shared=" << shared << " l2=" << l2;
        }
}

TEST(VarConfig, OfficialNamesAndDerivedSchedule) {
    auto c = VarConfig::for_depth(2);  // 256px schedule, width 128
    VarTransformer m(c);
    auto sd = module_state_dict(*m);
    for (const char* n :
         {"word_embed.weight", "class_emb.weight", "pos_start", "pos_1LC", "lvl_embed.weight",
          "lvl_1L", "attn_bias_for_masking", "blocks.1.attn.mat_qkv.weight", "blocks.1.attn.q_bias",
          "blocks.1.attn.v_bias", "blocks.1.attn.zero_k_bias", "blocks.1.attn.scale_mul_1H11",
          "blocks.1.attn.proj.bias", "blocks.1.ffn.fc1.weight", "blocks.1.ffn.fc2.bias",
          "blocks.1.ada_lin.1.weight", "head_nm.ada_lin.1.weight", "head.weight"})
        EXPECT_TRUE(sd.count(n)) << n;
    EXPECT_EQ(sd.at("pos_1LC").sizes(), (at::IntArrayRef{1, 680, 128}));
    EXPECT_EQ(sd.at("blocks.0.ada_lin.1.weight").sizes(), (at::IntArrayRef{768, 128}));
    EXPECT_EQ(VarConfig::infer_from(sd).patch_nums, patch_nums_256());
}

TEST(VarConfig, PatchScheduleMismatchIsNamed) {
    VarTransformer m(tiny_var_config());
    auto sd = module_state_dict(*m);
    try {
        VarConfig::infer_from(sd, {1, 2, 3});
        FAIL();
    } catch (const CheckpointError& e) {
        EXPECT_NE(std::string(e.what()).find("patch schedule mismatch"), std::string::npos)
            << e.what();
    }
    EXPECT_EQ(VarConfig::infer_from(sd).patch_nums,
              (std::vector<int64_t>{1, 2, 4}));  // from lvl_1L
    sd.erase("lvl_1L");
    EXPECT_THROW(VarConfig::infer_from(sd), CheckpointError);  // 21 positions: no known schedule
}

TEST(VarConfig, JsonErrorsNameTheField) {
    try {
        VarConfig::from_json(nlohmann::json{{"depth", "deep"}});
        FAIL();
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("'depth'"), std::string::npos);
    }
    EXPECT_THROW(VarConfig::from_json(nlohmann::json{{"patch_nums", {1, 3, 2}}}),
                 std::invalid_argument);
    // A typo'd schedule is refused before it asks for a terabyte.
    EXPECT_THROW(VarConfig::from_json(nlohmann::json{{"patch_nums", {1, 1000}}}),
                 std::invalid_argument);
    EXPECT_NO_THROW(VarConfig::from_json(nlohmann::json{{"patch_nums", {1, 2, 4, 8, 16, 32, 64}}}));
}

TEST(VarSampler, KvCachePathEqualsTeacherForward) {
    auto pipe = tiny_pipeline();
    for (double cfg : {0.0, 3.0}) {
        LogitRecorder rec;
        auto opt = tiny_options();
        opt.cfg = cfg;
        auto res = pipe.generate(opt, &rec);
        c10::InferenceMode g;
        auto x = pipe.sampler().vqvae()->idx_to_var_input(res.tokens);
        auto var = pipe.sampler().transformer();
        auto labels = res.labels;
        auto cond = var->forward_teacher(labels, x);
        auto uncond = var->forward_teacher(at::full_like(labels, -1), x);
        const auto& c = var->config();
        for (int64_t si = 0; si < c.num_scales(); ++si) {
            const int64_t b = c.scale_begin(si), l = c.patch_nums[si] * c.patch_nums[si];
            const double t = guidance_at_scale(cfg, si, c.num_scales());
            auto want = cond.narrow(1, b, l).mul(1 + t) - uncond.narrow(1, b, l).mul(t);
            EXPECT_TRUE(at::allclose(rec.logits[si], want, 1e-4, 1e-4))
                << "scale " << si << " cfg " << cfg << " max diff "
                << (rec.logits[si] - want).abs().max().item<float>();
        }
    }
}

TEST(VarSampler, EagerAttentionEqualsSdpa) {
    auto pipe = tiny_pipeline();
    LogitRecorder a, b;
    auto opt = tiny_options();
    auto r1 = pipe.generate(opt, &a);
    opt.attention = AttentionBackend::Eager;
    auto r2 = pipe.generate(opt, &b);
    for (size_t si = 0; si < a.logits.size(); ++si) {
        EXPECT_TRUE(at::allclose(a.logits[si], b.logits[si], 1e-4, 1e-5)) << si;
        EXPECT_TRUE(r1.tokens[si].equal(r2.tokens[si])) << si;
    }
}

TEST(VarSampler, SameSeedSameImageOtherSeedOtherTokens) {
    auto pipe = tiny_pipeline();
    auto r1 = pipe.generate(tiny_options(11));
    auto r2 = pipe.generate(tiny_options(11));
    auto r3 = pipe.generate(tiny_options(12));
    ASSERT_EQ(r1.tokens.size(), 3u);
    for (size_t si = 0; si < r1.tokens.size(); ++si)
        EXPECT_TRUE(r1.tokens[si].equal(r2.tokens[si]));
    EXPECT_TRUE(r1.images.equal(r2.images));
    EXPECT_FALSE(r1.tokens.back().equal(r3.tokens.back()));
    EXPECT_EQ(r1.images.sizes(), (at::IntArrayRef{2, 3, 8, 8}));
    EXPECT_GE(r1.images.min().item<float>(), 0.f);
    EXPECT_LE(r1.images.max().item<float>(), 1.f);
}

// --random with one --init-seed is one model in every process: the VQVAE's default init drew
// from the global generator, so its weights (and every token after the first scale) differed
// between runs. Here: the same seed after the global generator moved gives the same weights.
TEST(VarPipeline, RandomWeightsFollowTheSeedOnly) {
    const auto vc = tiny_var_config();
    const auto ac = varscope::testing::tiny_vqvae_config();
    auto a = VarPipeline::random(vc, ac, 5, load_options("cpu", "fp32"));
    (void)at::randn({1000});  // moves the global generator, as other work in a process would
    auto b = VarPipeline::random(vc, ac, 5, load_options("cpu", "fp32"));
    auto c = VarPipeline::random(vc, ac, 6, load_options("cpu", "fp32"));
    const auto wa = module_state_dict(*a.sampler().vqvae());
    const auto wb = module_state_dict(*b.sampler().vqvae());
    const auto wc = module_state_dict(*c.sampler().vqvae());
    bool differ = false;
    for (const auto& [name, t] : wa) {
        EXPECT_TRUE(at::equal(t, wb.at(name))) << name;
        differ = differ || !at::equal(t, wc.at(name));
    }
    EXPECT_TRUE(differ) << "another seed should give another VQVAE";
    // The global generator is left where it was.
    at::manual_seed(1);
    const auto before = at::randn({4});
    at::manual_seed(1);
    (void)VarPipeline::random(vc, ac, 5, load_options("cpu", "fp32"));
    EXPECT_TRUE(at::equal(at::randn({4}), before));
}

TEST(VarSampler, SharedAdaLnVariantSamples) {
    auto pipe = tiny_pipeline(3, /*shared_aln=*/true);
    auto r = pipe.generate(tiny_options());
    EXPECT_EQ(r.tokens.back().sizes(), (at::IntArrayRef{2, 16}));
}

TEST(VarSampler, RandomLabelsAndProbes) {
    auto pipe = tiny_pipeline();
    auto opt = tiny_options();
    opt.class_ids.clear();
    opt.batch = 3;
    ProbeRecorder probe(ProbeRecorder::Selection{{1}, {2}, true});
    auto r = pipe.generate(opt, nullptr, &probe);
    EXPECT_EQ(r.labels.size(0), 3);
    ASSERT_EQ(probe.scales().size(), 3u);
    EXPECT_TRUE(probe.scales()[2].f_hat.defined());
    auto att = probe.attention();
    ASSERT_EQ(att.size(), 1u);  // layer 1 at scale 2 only
    EXPECT_EQ(att[0].probs.sizes(),
              (at::IntArrayRef{2, 16, 21}));  // heads, queries, all keys so far
    EXPECT_TRUE(at::allclose(att[0].probs.sum(-1), at::ones({2, 16}), 1e-5, 1e-5));
}

// A probe's per-scale work (the GUI decodes a preview there) is timed apart: in total_millis and
// probe_millis, never in a scale's time, so the model's own time is total - probe.
TEST(VarSampler, ProbeTimeIsKeptOutOfTheScaleTimes) {
    auto pipe = tiny_pipeline();
    varscope::testing::SleepingProbe slow;
    const auto r = pipe.generate(tiny_options(), nullptr, &slow);
    EXPECT_EQ(pipe.generate(tiny_options()).probe_millis, 0.0);
    varscope::testing::expect_probe_time_apart(r.probe_millis, r.total_millis, r.decode_millis,
                                               r.scale_millis);
}

TEST(VarSampler, BadOptionsAreRejectedWithTheirName) {
    auto pipe = tiny_pipeline();
    auto opt = tiny_options();
    opt.class_ids = {10};
    try {
        pipe.generate(opt);
        FAIL();
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("class id 10 is out of range"), std::string::npos)
            << e.what();
    }
    opt = tiny_options();
    opt.top_p = 1.5;
    EXPECT_THROW(pipe.generate(opt), std::invalid_argument);
    opt = tiny_options();
    opt.cfg = -1;
    EXPECT_THROW(pipe.generate(opt), std::invalid_argument);
}

TEST(VarSampler, CancelStopsBeforeTheNextScale) {
    auto pipe = tiny_pipeline();
    std::atomic<bool> cancel{true};
    auto opt = tiny_options();
    opt.cancel = &cancel;
    EXPECT_THROW(pipe.generate(opt), SamplingCancelled);
}

TEST(TokenSampling, TopKOneIsArgmaxAndTopPKeepsTheNucleus) {
    auto logits = at::randn({2, 5, 50});
    auto want = logits.argmax(-1);
    auto l1 = logits.clone();
    auto gen = at::detail::createCPUGenerator(1);
    EXPECT_TRUE(sample_tokens(l1, {1, 0.0}, gen).equal(want));
    // One dominant token holding > 99% of the mass: top-p 0.5 must always pick it.
    auto l2 = at::zeros({1, 1, 50});
    l2[0][0][17] = 20.0;
    for (int i = 0; i < 20; ++i) {
        auto l = l2.clone();
        EXPECT_EQ(sample_tokens(l, {0, 0.5}, gen).item<int64_t>(), 17);
    }
    EXPECT_DOUBLE_EQ(guidance_at_scale(4.0, 9, 10), 4.0);
    EXPECT_DOUBLE_EQ(guidance_at_scale(4.0, 0, 10), 0.0);
}

TEST(VarPipeline, LoadsOwnSafetensorsAndNamesBadTensors) {
    varscope::testing::TempDir dir;
    auto pipe = tiny_pipeline();
    auto var_sd = module_state_dict(*pipe.sampler().transformer());
    auto vae_sd = module_state_dict(*pipe.sampler().vqvae());
    save_safetensors(var_sd, dir.file("var.safetensors"));
    save_safetensors(vae_sd, dir.file("vae.safetensors"));
    auto loaded =
        VarPipeline::load({dir.file("var.safetensors"), dir.file("vae.safetensors"), {}}, {});
    EXPECT_EQ(loaded.var_config().to_json(), pipe.var_config().to_json());
    auto opt = tiny_options();
    EXPECT_TRUE(loaded.generate(opt).tokens.back().equal(pipe.generate(opt).tokens.back()));

    var_sd["blocks.1.ffn.fc1.weight"] = at::zeros({3, 3});
    save_safetensors(var_sd, dir.file("bad.safetensors"));
    try {
        VarPipeline::load({dir.file("bad.safetensors"), dir.file("vae.safetensors"), {}}, {});
        FAIL();
    } catch (const CheckpointError& e) {
        EXPECT_NE(std::string(e.what()).find("blocks.1.ffn.fc1.weight"), std::string::npos)
            << e.what();
    }
    // The two roles swapped: the error says what the file looks like.
    EXPECT_THROW(
        VarPipeline::load({dir.file("vae.safetensors"), dir.file("var.safetensors"), {}}, {}),
        CheckpointError);
}

TEST(VarPipeline, BadDeviceAndPrecisionStrings) {
    EXPECT_THROW(parse_device("tpu"), std::invalid_argument);
    EXPECT_THROW(parse_precision("fp8"), std::invalid_argument);
    EXPECT_EQ(parse_device("cpu"), at::Device(at::kCPU));
    if (!cuda_available()) {
        EXPECT_THROW(parse_device("cuda"), std::invalid_argument);
    }
}

TEST(VarSampler, BlockTimingIsRecordedOnlyWhenAsked) {
    auto pipe = varscope::testing::small_pipeline();
    VarSampleOptions opt;
    opt.class_ids = {1};
    ProbeRecorder::Selection sel;
    sel.block_timing = true;
    ProbeRecorder timed(sel), plain;
    const auto a = pipe.generate(opt, nullptr, &timed);
    const auto b = pipe.generate(opt, nullptr, &plain);
    EXPECT_TRUE(a.images.equal(b.images));  // timing does not change the result
    EXPECT_TRUE(plain.accel().empty());
    const auto& c = pipe.var_config();
    const auto recs = timed.accel("block_ms");
    ASSERT_EQ(static_cast<int64_t>(recs.size()), c.num_scales() * c.depth);
    for (const auto& r : recs) {
        EXPECT_EQ(r.method, "loop");
        for (const char* k : {"qkv_ms", "attention_ms", "ffn_ms"})
            EXPECT_GE(r.values.at(k), 0.0) << k;
        const int64_t pn = c.patch_nums[r.scale];
        EXPECT_EQ(r.values.at("rows"), static_cast<double>(pn * pn));
    }
}
