// MAR: configs and shapes, checkpoint loading (official names, EMA selection, clear errors),
// parity with the official code on a micro model (tests/fixtures/make_mar_fixture.py ran the
// official LTH14/mar code), the diffusion schedule, the step plan, and the hook contract.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/io/checkpoint.h"
#include "core/io/module_binding.h"
#include "core/mar_pipeline.h"
#include "core/models/detect.h"
#include "tests/sleeping_probe.h"
#include "tests/test_util.h"
#include "tests/tiny_mar.h"

using namespace varscope;

namespace {

// 4x4 tokens, two encoder and two decoder blocks.
MarConfig tiny_mar_config() {
    MarConfig c = varscope::testing::tiny_cpu_mar_config();
    c.encoder_depth = c.decoder_depth = 2;
    return c;
}

MarPipeline tiny_mar(uint64_t seed = 1) {
    return MarPipeline::random(tiny_mar_config(), seed, {});
}

MarSampleOptions tiny_options(uint64_t seed = 7, double cfg = 2.5) {
    return varscope::testing::mar_options({3, 5}, seed, 6, cfg);
}

std::string fixture(const std::string& name) {
    return varscope::testing::source_dir() + "/tests/fixtures/" + name;
}

double rel_err(const at::Tensor& a, const at::Tensor& b) {
    return ((a.to(at::kDouble) - b.to(at::kDouble)).norm() /
            b.to(at::kDouble).norm().clamp_min(1e-30))
        .item<double>();
}

// Loads the micro fixture as the official evaluation would (EMA weights, 10 diffusion steps).
MarPipeline micro_pipeline(bool prefer_ema = true) {
    MarModelFiles f;
    f.mar_path = fixture("mar_micro.pth");
    f.prefer_ema = prefer_ema;
    f.num_sampling_steps = "10";
    return MarPipeline::load(f, {});
}

StateDict micro_expected() {
    return load_safetensors(fixture("mar_micro_expected.safetensors"));
}

}  // namespace

// ----------------------------------------------------------------------------- config

TEST(MarConfig, PresetsMatchTheOfficialModels) {
    const auto b = MarConfig::named("mar_base"), l = MarConfig::named("mar_large"),
               h = MarConfig::named("mar_huge");
    EXPECT_EQ(b.encoder_embed_dim, 768);
    EXPECT_EQ(b.encoder_depth, 12);
    EXPECT_EQ(b.encoder_num_heads, 12);
    EXPECT_EQ(l.decoder_embed_dim, 1024);
    EXPECT_EQ(l.decoder_depth, 16);
    EXPECT_EQ(h.encoder_embed_dim, 1280);
    EXPECT_EQ(h.encoder_depth, 20);
    EXPECT_EQ(h.encoder_num_heads, 16);
    EXPECT_EQ(b.seq_len(), 256);
    EXPECT_EQ(b.buffer_size, 64);
    EXPECT_EQ(b.token_embed_dim(), 16);
    EXPECT_EQ(b.diffloss_d, 6);
    EXPECT_EQ(h.diffloss_w, 1536);
    EXPECT_THROW(MarConfig::named("mar_tiny"), std::invalid_argument);
}

TEST(MarConfig, JsonRoundTripAndValidation) {
    const auto c = tiny_mar_config();
    const auto back = MarConfig::from_json(c.to_json());
    EXPECT_EQ(back.to_json(), c.to_json());
    auto j = c.to_json();
    j["encoder_num_heads"] = 5;  // 32 % 5 != 0
    try {
        MarConfig::from_json(j);
        FAIL() << "expected an error";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("encoder_num_heads"), std::string::npos) << e.what();
    }
    j = c.to_json();
    j["img_size"] = 72;  // not a multiple of 16
    EXPECT_THROW(MarConfig::from_json(j), std::invalid_argument);
    EXPECT_EQ(MarConfig::from_json({{"preset", "mar_large"}}).encoder_depth, 16);
    // A misspelt key, a nonsense eps or a size that would allocate hundreds of GB is named.
    const auto error_for = [&](const nlohmann::json& changes) {
        auto k = c.to_json();
        k.update(changes);
        try {
            MarConfig::from_json(k);
        } catch (const std::invalid_argument& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    EXPECT_NE(error_for({{"depthh", 3}}).find("unknown field 'depthh'"), std::string::npos);
    EXPECT_NE(error_for({{"norm_eps", -1}}).find("norm_eps"), std::string::npos);
    EXPECT_NE(error_for({{"class_num", 2000000000}}).find("class_num must be in"),
              std::string::npos);
    EXPECT_NE(error_for({{"encoder_embed_dim", 0}}).find("encoder_embed_dim"), std::string::npos);
    EXPECT_NE(error_for({{"preset", 5}}).find("'preset'"), std::string::npos);
}

TEST(MarConfig, InferredFromOwnStateDict) {
    MarTransformer m(tiny_mar_config());
    auto c = MarConfig::infer_from(module_state_dict(*m));
    EXPECT_EQ(c.encoder_embed_dim, 32);
    EXPECT_EQ(c.encoder_depth, 2);
    EXPECT_EQ(c.decoder_depth, 2);
    EXPECT_EQ(c.buffer_size, 4);
    EXPECT_EQ(c.seq_len(), 16);
    EXPECT_EQ(c.vae_embed_dim, 4);
    EXPECT_EQ(c.class_num, 10);
    EXPECT_EQ(c.diffloss_d, 2);
    EXPECT_EQ(c.diffloss_w, 32);
    EXPECT_EQ(detect_family(module_state_dict(*m)), ModelFamily::MarTransformer);
    // Training checkpoints nest the weights; the family is found under the wrapper.
    StateDict wrapped;
    for (const auto& [name, t] : module_state_dict(*m)) wrapped["model_ema." + name] = t;
    const DetectedFamily nested = detect_family_nested(wrapped);
    EXPECT_EQ(nested.family, ModelFamily::MarTransformer);
    EXPECT_EQ(nested.prefix, "model_ema");
    EXPECT_EQ(detect_family_nested(StateDict{{"other.x", at::zeros({1})}}).family,
              ModelFamily::Unknown);
}

// ----------------------------------------------------------------------------- model

TEST(MarModel, OfficialTensorNamesAndShapes) {
    MarTransformer m(MarConfig::base());
    const auto sd = module_state_dict(*m);
    // Names and shapes of the official mar_base (diffloss d6 w1024) state dict.
    const std::map<std::string, std::vector<int64_t>> expected = {
        {"class_emb.weight", {1000, 768}},
        {"fake_latent", {1, 768}},
        {"z_proj.weight", {768, 16}},
        {"z_proj_ln.bias", {768}},
        {"encoder_pos_embed_learned", {1, 320, 768}},
        {"encoder_blocks.11.attn.qkv.weight", {2304, 768}},
        {"encoder_blocks.0.mlp.fc2.weight", {768, 3072}},
        {"encoder_norm.weight", {768}},
        {"decoder_embed.weight", {768, 768}},
        {"mask_token", {1, 1, 768}},
        {"decoder_pos_embed_learned", {1, 320, 768}},
        {"decoder_blocks.11.norm2.bias", {768}},
        {"decoder_norm.bias", {768}},
        {"diffusion_pos_embed_learned", {1, 256, 768}},
        {"diffloss.net.time_embed.mlp.0.weight", {1024, 256}},
        {"diffloss.net.time_embed.mlp.2.bias", {1024}},
        {"diffloss.net.cond_embed.weight", {1024, 768}},
        {"diffloss.net.input_proj.weight", {1024, 16}},
        {"diffloss.net.res_blocks.5.in_ln.weight", {1024}},
        {"diffloss.net.res_blocks.5.mlp.2.weight", {1024, 1024}},
        {"diffloss.net.res_blocks.0.adaLN_modulation.1.weight", {3072, 1024}},
        {"diffloss.net.final_layer.linear.weight", {32, 1024}},
        {"diffloss.net.final_layer.adaLN_modulation.1.bias", {2048}},
    };
    for (const auto& [name, shape] : expected) {
        auto it = sd.find(name);
        ASSERT_NE(it, sd.end()) << name;
        EXPECT_EQ(it->second.sizes().vec(), shape) << name;
    }
    EXPECT_FALSE(sd.count("diffloss.net.final_layer.norm_final.weight"));  // no affine
    EXPECT_FALSE(sd.count("encoder_blocks.12.norm1.weight"));
    // 16 top-level tensors, 12 per ViT block; DiffLoss: 8 embedding tensors, 8 per residual
    // block, 4 in the final layer (364 in all, as the official state dict).
    EXPECT_EQ(sd.size(), 16u + 24u * 12u + 8u + 6u * 8u + 4u);
}

TEST(MarModel, EncoderDecoderShapes) {
    c10::InferenceMode guard;
    auto pipe = tiny_mar();
    auto m = pipe.sampler().transformer();
    const auto tokens = at::randn({3, 16, 4});
    auto mask = at::zeros({3, 16});
    mask.narrow(1, 0, 10).fill_(1);  // 6 known per row
    const auto cls = m->class_embedding(at::tensor({1, -1, 9}, at::kLong));
    EXPECT_TRUE(at::equal(cls[1], m->fake_latent[0]));
    const auto enc = m->forward_encoder(tokens, mask, cls);
    EXPECT_EQ(enc.sizes(), (at::IntArrayRef{3, 4 + 6, 32}));
    const auto z = m->forward_decoder(enc, mask);
    EXPECT_EQ(z.sizes(), (at::IntArrayRef{3, 16, 32}));
    const auto out = m->diffloss->net->forward(
        at::randn({5, 4}), at::tensor({0, 10, 500, 999, 3}, at::kLong), at::randn({5, 32}));
    EXPECT_EQ(out.sizes(), (at::IntArrayRef{5, 8}));
    // Unequal numbers of known tokens per row are refused.
    mask[0][0] = 0;
    EXPECT_THROW(m->forward_encoder(tokens, mask, cls), c10::Error);
}

// ----------------------------------------------------------------------------- loading

TEST(MarLoad, OfficialCheckpointPrefersEma) {
    auto ema = micro_pipeline(true);
    EXPECT_EQ(ema.weights_source(), "model_ema");
    auto raw = micro_pipeline(false);
    EXPECT_EQ(raw.weights_source(), "model");
    const auto& c = ema.config();
    EXPECT_EQ(c.encoder_depth, 2);
    EXPECT_EQ(c.decoder_depth, 1);
    EXPECT_EQ(c.seq_len(), 9);
    EXPECT_EQ(c.buffer_size, 2);
    EXPECT_EQ(c.class_num, 5);
    EXPECT_EQ(c.diffloss_w, 16);
    EXPECT_FALSE(at::equal(ema.sampler().transformer()->mask_token,
                           raw.sampler().transformer()->mask_token));
    EXPECT_NE(ema.describe().find("model_ema"), std::string::npos);
}

TEST(MarLoad, RawStateDictAndSafetensorsRoundTrip) {
    c10::InferenceMode guard;
    varscope::testing::TempDir dir;
    auto pipe = micro_pipeline();
    const auto sd = module_state_dict(*pipe.sampler().transformer());
    save_safetensors(sd, dir.file("raw.safetensors"));
    StateDict prefixed;
    for (const auto& [k, v] : sd) prefixed["model_ema." + k] = v;
    prefixed["optimizer.state.0.exp_avg"] = at::zeros({3});
    save_safetensors(prefixed, dir.file("prefixed.safetensors"));
    for (const char* file : {"raw.safetensors", "prefixed.safetensors"}) {
        MarModelFiles f;
        f.mar_path = dir.file(file);
        f.num_sampling_steps = "10";
        auto again = MarPipeline::load(f, {});
        const auto sd2 = module_state_dict(*again.sampler().transformer());
        ASSERT_EQ(sd2.size(), sd.size());
        for (const auto& [k, v] : sd) EXPECT_TRUE(at::equal(sd2.at(k), v)) << file << ": " << k;
    }
}

TEST(MarLoad, BadCheckpointsGiveClearErrors) {
    const auto good = module_state_dict(*micro_pipeline().sampler().transformer());
    // In memory, as MarPipeline::load does after reading the file.
    auto expect_error = [&](StateDict d, const std::vector<std::string>& needles) {
        try {
            std::string source;
            auto sd = select_mar_weights(d, true, &source, "bad.pth");
            MarTransformer m(MarConfig::infer_from(sd));
            m->load(sd, "bad.pth (" + source + ")");
            ADD_FAILURE() << "expected a CheckpointError";
        } catch (const CheckpointError& e) {
            for (const auto& n : needles)
                EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
        }
    };
    auto d = good;
    d.erase("decoder_blocks.0.attn.proj.bias");
    expect_error(d, {"missing tensor 'decoder_blocks.0.attn.proj.bias'"});
    d = good;
    d["encoder_blocks.1.mlp.fc1.weight"] = at::zeros({64, 15});
    expect_error(d, {"'encoder_blocks.1.mlp.fc1.weight' has shape [64, 15], expected [64, 16]"});
    d = good;
    d["encoder_blocks.0.attn.q_norm.weight"] = at::zeros({16});
    expect_error(d, {"unexpected tensor 'encoder_blocks.0.attn.q_norm.weight'"});
    StateDict other{{"model.word_embed.weight", at::zeros({4, 4})},
                    {"optimizer.x", at::zeros({1})}};
    expect_error(other, {"no MAR weights found", "model, optimizer"});

    MarModelFiles f;
    f.mar_path = fixture("mar_micro.pth");
    f.num_sampling_steps = "2000";  // more than the 1000 base steps
    EXPECT_THROW(MarPipeline::load(f, {}), std::invalid_argument);
}

// ----------------------------------------------------------------------------- parity

TEST(MarParity, EncoderDecoderAndHeadMatchOfficialCode) {
    c10::InferenceMode guard;
    auto pipe = micro_pipeline();
    auto m = pipe.sampler().transformer();
    const auto e = micro_expected();
    const auto enc =
        m->forward_encoder(e.at("tokens"), e.at("mask"), m->class_embedding(e.at("labels")));
    EXPECT_LT(rel_err(enc, e.at("encoder_out")), 1e-5);
    EXPECT_LT(rel_err(m->forward_decoder(enc, e.at("mask")), e.at("z")), 1e-5);
    const auto& net = *m->diffloss->net;
    EXPECT_LT(
        rel_err(net.forward(e.at("diff_x"), e.at("diff_t"), e.at("diff_c")), e.at("diff_out")),
        1e-5);
    const auto sample = pipe.sampler().diffusion().sample_with_noise(
        net, e.at("diff_z"), at::full({}, 2.0), 0.9, e.at("diff_start"), e.at("diff_noise"));
    EXPECT_LT(rel_err(sample, e.at("diff_sample")), 1e-5);
}

TEST(MarParity, SamplingMatchesOfficialCodeForTheSameSeed) {
    auto pipe = micro_pipeline();
    const auto e = micro_expected();
    struct Run {
        const char* name;
        uint64_t seed;
        int64_t num_iter;
        double cfg, temperature;
    };
    for (const Run& r : {Run{"sample_cfg", 5, 4, 2.5, 1.0}, Run{"sample_plain", 9, 3, 1.0, 0.8}}) {
        auto o = varscope::testing::mar_options({1, 3}, r.seed, r.num_iter, r.cfg);
        o.temperature = r.temperature;
        const auto res = pipe.generate(o);
        const std::string n = r.name;
        EXPECT_TRUE(at::equal(res.orders, e.at(n + "_orders"))) << n;
        EXPECT_LT(rel_err(res.latents, e.at(n + "_latents")), 1e-4) << n;
    }
}

// ----------------------------------------------------------------------------- diffusion

TEST(MarDiffusion, RespacingMatchesDirectComputation) {
    const auto steps = space_timesteps(1000, "100");
    ASSERT_EQ(steps.size(), 100u);
    EXPECT_EQ(steps.front(), 0);
    EXPECT_EQ(steps.back(), 999);
    // Stride 999/99 rounded half to even: 0, 10, 20, 30, 40, 50, 61, ...
    EXPECT_EQ(steps[1], 10);
    EXPECT_EQ(steps[6], 61);
    EXPECT_EQ(space_timesteps(1000, "ddim25").size(), 25u);
    EXPECT_EQ(space_timesteps(1000, "ddim25")[1], 40);
    EXPECT_EQ(space_timesteps(300, "10,15,20").size(), 45u);
    EXPECT_THROW(space_timesteps(1000, "abc"), std::invalid_argument);
    EXPECT_THROW(space_timesteps(10, "20"), std::invalid_argument);

    // Direct: cosine alpha_bar, cumulative products at the kept steps.
    const auto base_betas = cosine_betas(1000);
    std::vector<double> base_ac;
    double acc = 1;
    for (double b : base_betas) base_ac.push_back(acc *= 1 - b);
    for (int64_t i : {0, 1, 500, 999}) {
        const double t1 = i / 1000.0, t2 = (i + 1) / 1000.0;
        auto ab = [](double t) { return std::pow(std::cos((t + 0.008) / 1.008 * M_PI / 2), 2); };
        EXPECT_NEAR(base_betas[i], std::min(1 - ab(t2) / ab(t1), 0.999), 1e-15);
    }
    const auto s = DiffusionSchedule::respaced("100");
    ASSERT_EQ(s.num_steps(), 100);
    for (int64_t i = 0; i < 100; ++i) {
        EXPECT_NEAR(s.alphas_cumprod[i] / base_ac[steps[i]], 1.0, 1e-10) << i;
        EXPECT_EQ(s.timestep_map[i], steps[i]);
        const double prev = i ? s.alphas_cumprod[i - 1] : 1.0;
        const double beta = 1 - s.alphas_cumprod[i] / prev;
        EXPECT_NEAR(s.posterior_variance[i], beta * (1 - prev) / (1 - s.alphas_cumprod[i]), 1e-12);
        EXPECT_NEAR(s.posterior_mean_coef1[i], beta * std::sqrt(prev) / (1 - s.alphas_cumprod[i]),
                    1e-12);
    }
    EXPECT_DOUBLE_EQ(s.posterior_log_variance_clipped[0], std::log(s.posterior_variance[1]));
}

TEST(MarDiffusion, SeededSamplingIsDeterministicAndTemperatureMatters) {
    auto pipe = tiny_mar();  // normal (not inference) weights: their version is tracked
    c10::InferenceMode guard;
    const auto& net = *pipe.sampler().transformer()->diffloss->net;
    const auto z = at::randn({6, 32});
    auto draw = [&](double temp, uint64_t seed) {
        auto gen = at::detail::getDefaultCPUGenerator().clone();
        gen.set_current_seed(seed);
        return pipe.sampler().diffusion().sample(net, z, at::full({}, 3.0), temp, gen);
    };
    EXPECT_EQ(draw(1.0, 1).sizes(), (at::IntArrayRef{3, 4}));
    EXPECT_TRUE(at::equal(draw(1.0, 1), draw(1.0, 1)));
    EXPECT_FALSE(at::equal(draw(1.0, 1), draw(1.0, 2)));
    EXPECT_FALSE(at::equal(draw(1.0, 1), draw(0.5, 1)));
    // New weights (loads copy in place) are seen: the cached timestep embeddings follow.
    const auto before = draw(1.0, 1);
    {
        at::NoGradGuard no_grad;
        net.time_embed->parameters()[2].mul_(3.0);  // mlp.2.weight
    }
    const auto after = draw(1.0, 1);
    EXPECT_FALSE(at::equal(before, after));
    auto gen = at::detail::getDefaultCPUGenerator().clone();
    gen.set_current_seed(1);
    const DiffusionSampler fresh(DiffusionSchedule::respaced("10"));
    EXPECT_TRUE(at::equal(fresh.sample(net, z, at::full({}, 3.0), 1.0, gen), after));
}

// ----------------------------------------------------------------------------- schedule

TEST(MarSchedule, CosineStepsDecodeEveryTokenOnce) {
    for (int64_t L : {16, 64, 256})
        for (int64_t iters : {1, 4, 16, 64, 100}) {
            const auto plan = mar_step_plan(L, iters, 1.0, CfgSchedule::Linear);
            ASSERT_EQ(static_cast<int64_t>(plan.size()), iters);
            int64_t total = 0, masked = L;
            for (const auto& p : plan) {
                EXPECT_EQ(p.masked_before, masked);
                EXPECT_GE(p.decoded(), 0);
                total += p.decoded();
                masked = p.masked_after;
            }
            EXPECT_EQ(total, L) << L << " tokens, " << iters << " steps";
            EXPECT_EQ(plan.back().masked_after, 0);
        }
    // 256 tokens in 64 steps: the cosine curve (floor(256 cos(pi/2 (s+1)/64))).
    const auto plan = mar_step_plan(256, 64, 1.0, CfgSchedule::Linear);
    EXPECT_EQ(plan[0].masked_after,
              static_cast<int64_t>(std::floor(256 * std::cos(M_PI / 2 / 64))));
    EXPECT_EQ(plan[0].decoded(), 1);
    EXPECT_GT(plan[40].decoded(), plan[0].decoded());
}

TEST(MarSchedule, CfgSchedules) {
    const auto lin = mar_step_plan(256, 8, 3.0, CfgSchedule::Linear);
    for (const auto& p : lin) EXPECT_NEAR(p.cfg, 1 + 2.0 * (256 - p.mask_len) / 256.0, 1e-6);
    EXPECT_LT(lin.front().cfg, lin.back().cfg);
    EXPECT_NEAR(lin.back().cfg, 1 + 2.0 * 255 / 256.0, 1e-6);  // mask_len is 1 at the end
    for (const auto& p : mar_step_plan(256, 8, 3.0, CfgSchedule::Constant)) EXPECT_EQ(p.cfg, 3.0);
    EXPECT_EQ(parse_cfg_schedule("constant"), CfgSchedule::Constant);
    EXPECT_THROW(parse_cfg_schedule("cosine"), std::invalid_argument);
}

// ----------------------------------------------------------------------------- sampling

TEST(MarSampling, ShapesDecodeOrderAndDeterminism) {
    auto pipe = tiny_mar();
    const auto a = pipe.generate(tiny_options(7));
    EXPECT_EQ(a.tokens.sizes(), (at::IntArrayRef{2, 16, 4}));
    EXPECT_EQ(a.latents.sizes(), (at::IntArrayRef{2, 4, 4, 4}));
    EXPECT_FALSE(a.images.defined());  // no VAE attached
    ASSERT_EQ(a.decoded.size(), 6u);
    // Each position decoded exactly once, in reverse order of the generation order.
    for (int64_t b = 0; b < 2; ++b) {
        std::vector<int64_t> seen;
        for (const auto& d : a.decoded)
            for (int64_t i = 0; i < d.size(1); ++i) seen.push_back(d[b][i].item<int64_t>());
        EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 16u);
        EXPECT_EQ(seen.size(), 16u);
        const auto last = a.decoded.back()[b];
        const auto first_of_order = a.orders[b][0].item<int64_t>();
        EXPECT_TRUE(last.eq(first_of_order).any().item<bool>());  // the order's head comes last
    }
    EXPECT_TRUE(a.tokens.abs().sum(-1).gt(0).all().item<bool>());  // every token was written

    const auto b = pipe.generate(tiny_options(7));
    EXPECT_TRUE(at::equal(a.tokens, b.tokens));
    EXPECT_TRUE(at::equal(a.orders, b.orders));
    const auto c = pipe.generate(tiny_options(8));
    EXPECT_FALSE(at::equal(a.orders, c.orders));
    EXPECT_FALSE(at::equal(a.tokens, c.tokens));
    // Guidance changes the result; labels drawn when none are given.
    EXPECT_FALSE(at::equal(a.tokens, pipe.generate(tiny_options(7, 1.0)).tokens));
    auto o = tiny_options(7);
    o.class_ids.clear();
    o.batch = 3;
    EXPECT_EQ(pipe.generate(o).labels.size(0), 3);
}

TEST(MarSampling, OptionsAreValidated) {
    auto pipe = tiny_mar();
    auto o = tiny_options();
    o.class_ids = {10};
    EXPECT_THROW(pipe.generate(o), std::invalid_argument);
    o = tiny_options();
    o.num_iter = 0;
    EXPECT_THROW(pipe.generate(o), std::invalid_argument);
    o = tiny_options();
    o.temperature = 0;
    EXPECT_THROW(pipe.generate(o), std::invalid_argument);
    o = tiny_options();
    o.feature_layers = {4};  // 2 + 2 layers
    EXPECT_THROW(pipe.generate(o), std::invalid_argument);
}

// As VarSampler.ProbeTimeIsKeptOutOfTheScaleTimes, per decoding step.
TEST(MarSampling, ProbeTimeIsKeptOutOfTheStepTimes) {
    auto pipe = tiny_mar();
    varscope::testing::SleepingProbe slow;
    const auto r = pipe.generate(tiny_options(), nullptr, &slow);
    EXPECT_EQ(pipe.generate(tiny_options()).probe_millis, 0.0);
    varscope::testing::expect_probe_time_apart(r.probe_millis, r.total_millis, r.decode_millis,
                                               r.step_millis);
    EXPECT_EQ(r.graph_capture_millis_call, 0.0);  // no graphs on the CPU
}

// Each step's record carries the attention FLOPs it computed; they add up to the run's.
TEST(MarSampling, StepRecordsAddUpTheAttentionFlops) {
    auto pipe = tiny_mar();
    ProbeRecorder rec;
    const auto r = pipe.generate(tiny_options(), nullptr, &rec);
    ASSERT_GT(r.attention_flops, 0.0);
    double booked = 0;
    for (const auto& s : rec.scales()) {
        EXPECT_GT(s.attention_flops, 0.0) << s.scale;
        booked += s.attention_flops;
    }
    EXPECT_NEAR(booked, r.attention_flops, 1e-9 * r.attention_flops);
}

TEST(MarSampling, ProbeRecordsPerStep) {
    auto pipe = tiny_mar();
    ProbeRecorder rec(ProbeRecorder::Selection{{1}, {2}, true, false});
    auto o = tiny_options();
    o.feature_layers = {0, 3};
    const auto res = pipe.generate(o, nullptr, &rec);
    const auto steps = rec.scales();
    ASSERT_EQ(steps.size(), 6u);
    int64_t decoded = 0;
    for (size_t s = 0; s < steps.size(); ++s) {
        EXPECT_EQ(steps[s].step, static_cast<int64_t>(s));
        EXPECT_TRUE(at::equal(steps[s].tokens, res.decoded[s]));
        decoded += steps[s].tokens.size(1);
        EXPECT_EQ(steps[s].f_hat.sizes(), (at::IntArrayRef{2, 4, 4, 4}));
    }
    EXPECT_EQ(decoded, 16);
    EXPECT_TRUE(at::equal(steps.back().f_hat, res.latents));
    // Attention of layer 1 at step 2 only: (heads, q, k) of the first row, 4 + known keys.
    const auto att = rec.attention();
    ASSERT_EQ(att.size(), 1u);
    EXPECT_EQ(att[0].layer, 1);
    EXPECT_EQ(att[0].probs.size(0), 2);
    EXPECT_EQ(att[0].probs.size(1), 4 + 16 - res.decoded[2].size(1) - res.decoded[3].size(1) -
                                        res.decoded[4].size(1) - res.decoded[5].size(1));
    const auto feats = rec.accel("block_features");
    ASSERT_EQ(feats.size(), 12u);  // 2 layers x 6 steps
    EXPECT_EQ(feats[1].layer, 3);
    EXPECT_EQ(feats[1].data.sizes(), (at::IntArrayRef{4, 4 + 16, 32}));  // 2B rows with CFG
    EXPECT_EQ(rec.accel("step").size(), 6u);
}

// ----------------------------------------------------------------------------- hooks

namespace {

// Answers nothing: the loop must give exactly the hook-free result.
struct SilentHooks : MarSamplingHooks {};

// Computes every row through the selection path and checks what the loop passes.
struct SelectAllHooks : MarSamplingHooks {
    int64_t blocks = 0, steps = 0, step_ends = 0;
    bool positions_ok = true;
    at::Tensor select_tokens(const MarBlockContext& ctx, const at::Tensor& x) override {
        ++blocks;
        positions_ok = positions_ok && ctx.positions.defined() &&
                       ctx.positions.size(1) == x.size(1) && ctx.positions.size(0) == x.size(0);
        if (ctx.stage == MarStage::Encoder)  // buffer first, then the known positions + buffer
            positions_ok =
                positions_ok &&
                at::equal(ctx.positions.narrow(1, 4, x.size(1) - 4).narrow(0, 0, ctx.step.batch),
                          ctx.step.known + 4);
        return at::arange(x.size(1), at::TensorOptions(x.device()).dtype(at::kLong));
    }
    void on_step_begin(MarStepContext& ctx) override { ++steps; }
    void on_step_end(const MarStepContext& ctx, const at::Tensor& sampled,
                     const at::Tensor& tokens) override {
        ++step_ends;
        EXPECT_EQ(sampled.size(1), ctx.decoded_count());
    }
};

// LazyMAR-style condition cache: at every other step the unconditional branch is skipped and
// rebuilt from the last full step's (uncond - cond) residual.
struct ConditionCacheHooks : MarSamplingHooks {
    at::Tensor residual;
    std::vector<int64_t> rows_seen;
    int64_t skipped = 0;
    bool skip_unconditional(const MarStepContext& ctx) override {
        return residual.defined() && ctx.step % 2 == 1;
    }
    at::Tensor unconditional_rows(const MarStepContext& ctx, const at::Tensor& x_cond) override {
        ++skipped;
        return x_cond + residual;
    }
    void on_cfg_branches(const MarStepContext& ctx, const at::Tensor& x) override {
        residual = x.narrow(0, ctx.batch, ctx.batch) - x.narrow(0, 0, ctx.batch);
    }
    void on_block_output(const MarBlockContext& ctx, const at::Tensor& x) override {
        if (ctx.layer == 0 && ctx.stage == MarStage::Decoder) rows_seen.push_back(x.size(0));
    }
};

}  // namespace

TEST(MarHooks, HooksOffEqualsNoHooks) {
    auto pipe = tiny_mar();
    const auto base = pipe.generate(tiny_options());
    SilentHooks silent;
    EXPECT_TRUE(at::equal(pipe.generate(tiny_options(), &silent).tokens, base.tokens));
    MarHookChain chain;
    chain.add(std::make_shared<SilentHooks>());
    chain.add(std::make_shared<SilentHooks>());
    EXPECT_TRUE(at::equal(pipe.generate(tiny_options(), &chain).tokens, base.tokens));
    SelectAllHooks all;
    const auto selected = pipe.generate(tiny_options(), &all);
    EXPECT_TRUE(at::equal(selected.tokens, base.tokens));
    EXPECT_EQ(all.steps, 6);
    EXPECT_EQ(all.step_ends, 6);
    EXPECT_EQ(all.blocks, 6 * 4);
    EXPECT_TRUE(all.positions_ok);
}

TEST(MarHooks, SkippedUnconditionalBranchComesFromTheHook) {
    auto pipe = tiny_mar();
    ConditionCacheHooks cache;
    const auto res = pipe.generate(tiny_options(), &cache);
    EXPECT_EQ(cache.skipped, 3);  // steps 1, 3, 5
    EXPECT_EQ(cache.rows_seen, (std::vector<int64_t>{4, 2, 4, 2, 4, 2}));
    EXPECT_FALSE(at::equal(res.tokens, pipe.generate(tiny_options()).tokens));
    EXPECT_TRUE(res.tokens.isfinite().all().item<bool>());

    struct NoAnswer : MarSamplingHooks {
        bool skip_unconditional(const MarStepContext&) override { return true; }
    } no_answer;
    try {
        pipe.generate(tiny_options(), &no_answer);
        FAIL() << "expected an error";
    } catch (const c10::Error& e) {
        EXPECT_NE(std::string(e.what()).find("unconditional_rows"), std::string::npos);
    }
    // Without CFG the hook is never asked.
    EXPECT_NO_THROW(pipe.generate(tiny_options(7, 1.0), &no_answer));
}

TEST(MarLoad, AttachesTheKlVaeAndDecodesImages) {
    const std::string vae =
        varscope::testing::source_dir() + "/resources/models/emoji-klvae.safetensors";
    if (!std::filesystem::exists(vae)) GTEST_SKIP() << "no " << vae;
    varscope::testing::TempDir dir;
    auto cfg = tiny_mar_config();
    cfg.vae_stride = 8;  // the emoji KL VAE: 64x64 images, 8x8 latents of 16 channels
    cfg.vae_embed_dim = 16;
    auto random = MarPipeline::random(cfg, 3, {});
    save_safetensors(module_state_dict(*random.sampler().transformer()),
                     dir.file("mar.safetensors"));
    MarModelFiles f;
    f.mar_path = dir.file("mar.safetensors");
    f.vae_path = vae;
    f.num_sampling_steps = "10";
    auto pipe = MarPipeline::load(f, {});
    ASSERT_TRUE(pipe.sampler().has_decoder());
    auto o = tiny_options();
    o.num_iter = 2;
    const auto res = pipe.generate(o);
    ASSERT_TRUE(res.images.defined());
    EXPECT_EQ(res.images.sizes(), (at::IntArrayRef{2, 3, 64, 64}));
    EXPECT_GE(res.images.min().item<double>(), 0.0);
    EXPECT_LE(res.images.max().item<double>(), 1.0);
    // decode_latents (the app's per-step previews) is the sampler's own decoding.
    EXPECT_TRUE(pipe.has_vae());
    EXPECT_TRUE(at::allclose(pipe.decode_latents(res.latents), res.images, 1e-5, 1e-6));
    EXPECT_FALSE(random.has_vae());
    EXPECT_THROW(random.decode_latents(res.latents), std::logic_error);
    // A VAE whose latent shape does not fit is refused.
    cfg.vae_embed_dim = 4;
    auto wrong = MarPipeline::random(cfg, 3, {});
    save_safetensors(module_state_dict(*wrong.sampler().transformer()),
                     dir.file("wrong.safetensors"));
    f.mar_path = dir.file("wrong.safetensors");
    EXPECT_THROW(MarPipeline::load(f, {}), CheckpointError);
}
