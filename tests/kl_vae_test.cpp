// MAR's KL VAE: configuration, official tensor names, shapes, posterior maths, checkpoint
// loading and its errors, the trainer, and the shipped emoji tokenizer.
#include "core/models/kl_vae.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/io/checkpoint.h"
#include "core/io/module_binding.h"
#include "core/models/detect.h"
#include "core/resources.h"
#include "core/training/kl_vae_trainer.h"
#include "tests/cli_run.h"
#include "tests/emoji_model.h"
#include "tests/error_of.h"
#include "tests/smooth_pack.h"
#include "tests/test_util.h"

using namespace varscope;

namespace {

// Two levels (stride 2), attention in the encoder's and the decoder's coarse level.
KlVaeConfig tiny_config() {
    KlVaeConfig c;
    c.ch = 32;
    c.ch_mult = {1, 2};
    c.num_res_blocks = 1;
    c.embed_dim = 4;
    c.z_channels = 4;
    c.resolution = 16;
    c.attn_resolutions = {8};
    c.decoder_attn_resolutions = {8};
    c.scale_factor = 0.5;
    return c;
}

// Random but well-scaled weights, so outputs are not dominated by the default init.
void randomise(KlVae& vae, uint64_t seed) {
    auto gen = at::detail::createCPUGenerator(seed);
    at::NoGradGuard g;
    for (auto& p : vae->named_parameters()) {
        auto& t = p.value();
        const bool norm_weight = p.key().find("norm") != std::string::npos &&
                                 p.key().find("weight") != std::string::npos;
        if (t.dim() >= 2)
            t.copy_(at::randn(t.sizes(), gen) / std::sqrt(static_cast<double>(t[0].numel())));
        else
            t.copy_(at::randn(t.sizes(), gen) * 0.05 + (norm_weight ? 1.0 : 0.0));
    }
}

at::Tensor random_images(int64_t n, int64_t size, uint64_t seed) {
    auto gen = at::detail::createCPUGenerator(seed);
    return at::rand({n, 3, size, size}, gen) * 2 - 1;
}

using varscope::testing::error_of;
using varscope::testing::run_cli;
using varscope::testing::smooth_pack;

double psnr(const at::Tensor& a, const at::Tensor& b) {  // images in [-1, 1]
    return -10 * std::log10((a - b).div(2).pow(2).mean().item<double>());
}

}  // namespace

TEST(KlVae, PresetsAndValidation) {
    const KlVaeConfig kl16 = KlVaeConfig::kl16();
    EXPECT_EQ(kl16.downsample(), 16);
    EXPECT_EQ(kl16.embed_dim, 16);
    EXPECT_EQ(kl16.latent_size(256), 16);
    EXPECT_DOUBLE_EQ(kl16.scale_factor, 0.2325);
    EXPECT_TRUE(kl16.encoder_attn_at(4));  // 256 >> 4 = 16
    EXPECT_FALSE(kl16.encoder_attn_at(3));
    for (int64_t i = 0; i < 5; ++i) EXPECT_FALSE(kl16.decoder_attn_at(i));
    const KlVaeConfig emoji = KlVaeConfig::emoji();
    EXPECT_EQ(emoji.downsample(), 8);
    EXPECT_EQ(emoji.latent_size(64), 8);
    EXPECT_EQ(KlVaeConfig::from_json(emoji.to_json()), emoji);
    EXPECT_EQ(KlVaeConfig::from_json(nlohmann::json::object()), kl16);

    KlVaeConfig bad = emoji;
    bad.ch = 48;
    EXPECT_NE(error_of([&] { bad.validate(); }).find("multiple of 32"), std::string::npos);
    bad = emoji;
    bad.resolution = 60;
    EXPECT_NE(error_of([&] { bad.validate(); }).find("resolution"), std::string::npos);
    bad = emoji;
    bad.scale_factor = 0;
    EXPECT_NE(error_of([&] { bad.validate(); }).find("scale_factor"), std::string::npos);
    EXPECT_NE(error_of([] {
                  KlVaeConfig::from_json({{"ch_mult", "wide"}});
              }).find("'ch_mult'"),
              std::string::npos);
    // A misspelt key is named, not dropped for the default.
    EXPECT_NE(error_of([] {
                  KlVaeConfig::from_json({{"z_channel", 16}});
              }).find("unknown field 'z_channel'"),
              std::string::npos);
}

TEST(KlVae, Kl16HasTheOfficialTensorNamesAndShapes) {
    KlVae vae(KlVaeConfig::kl16());
    const StateDict sd = module_state_dict(*vae);
    auto shape = [&](const std::string& name) -> std::vector<int64_t> {
        auto it = sd.find(name);
        if (it == sd.end()) return {};
        return it->second.sizes().vec();
    };
    EXPECT_EQ(shape("encoder.conv_in.weight"), (std::vector<int64_t>{128, 3, 3, 3}));
    EXPECT_EQ(shape("encoder.down.4.attn.1.q.weight"), (std::vector<int64_t>{512, 512, 1, 1}));
    EXPECT_EQ(shape("encoder.down.3.downsample.conv.weight"),
              (std::vector<int64_t>{256, 256, 3, 3}));
    EXPECT_EQ(shape("encoder.down.2.block.0.nin_shortcut.weight"),
              (std::vector<int64_t>{256, 128, 1, 1}));
    EXPECT_EQ(shape("encoder.mid.attn_1.proj_out.weight"), (std::vector<int64_t>{512, 512, 1, 1}));
    EXPECT_EQ(shape("encoder.conv_out.weight"), (std::vector<int64_t>{32, 512, 3, 3}));
    EXPECT_EQ(shape("quant_conv.weight"), (std::vector<int64_t>{32, 32, 1, 1}));
    EXPECT_EQ(shape("post_quant_conv.weight"), (std::vector<int64_t>{16, 16, 1, 1}));
    EXPECT_EQ(shape("decoder.conv_in.weight"), (std::vector<int64_t>{512, 16, 3, 3}));
    EXPECT_EQ(shape("decoder.up.0.block.2.conv2.weight"), (std::vector<int64_t>{128, 128, 3, 3}));
    EXPECT_EQ(shape("decoder.up.4.upsample.conv.weight"), (std::vector<int64_t>{512, 512, 3, 3}));
    EXPECT_EQ(shape("decoder.up.3.block.0.nin_shortcut.weight"),
              (std::vector<int64_t>{256, 512, 1, 1}));
    EXPECT_TRUE(shape("encoder.down.3.attn.0.q.weight").empty());
    EXPECT_TRUE(shape("decoder.up.4.attn.0.q.weight").empty());  // official decoder: mid only
    EXPECT_TRUE(shape("decoder.up.0.upsample.conv.weight").empty());
    EXPECT_EQ(detect_family(sd), ModelFamily::KlVae);
    EXPECT_EQ(KlVaeConfig::infer_from(sd), KlVaeConfig::kl16());
}

TEST(KlVae, EncodeDecodeShapesAndPosterior) {
    KlVae vae(tiny_config());
    randomise(vae, 1);
    c10::InferenceMode g;
    const at::Tensor img = random_images(2, 16, 2);
    const DiagonalGaussian post = vae->encode(img);
    EXPECT_EQ(post.mean.sizes(), (at::IntArrayRef{2, 4, 8, 8}));
    EXPECT_EQ(post.logvar.sizes(), (at::IntArrayRef{2, 4, 8, 8}));
    EXPECT_EQ(post.parameters().sizes(), (at::IntArrayRef{2, 8, 8, 8}));
    EXPECT_EQ(post.kl().sizes(), (at::IntArrayRef{2}));

    // Seeded sampling is reproducible and centred on the mean with the posterior's spread.
    auto g1 = at::detail::createCPUGenerator(5), g2 = at::detail::createCPUGenerator(5);
    const at::Tensor a = post.sample(g1), b = post.sample(g2);
    EXPECT_TRUE(a.equal(b));
    EXPECT_FALSE(a.equal(post.mean));
    const at::Tensor noise = (a - post.mean) / post.std();
    EXPECT_NEAR(noise.mean().item<double>(), 0.0, 0.15);
    EXPECT_NEAR(noise.std().item<double>(), 1.0, 0.15);

    const at::Tensor dec = vae->decode(post.mean);
    EXPECT_EQ(dec.sizes(), img.sizes());
    EXPECT_LE(dec.abs().max().item<float>(), 1.0f);
    EXPECT_TRUE(dec.equal(vae->decode_unclamped(post.mean).clamp(-1, 1)));

    // MAR's tokens are scaled latents; decoding them undoes the scale.
    const at::Tensor tokens = vae->encode_tokens(img, /*sample=*/false);
    EXPECT_TRUE(at::allclose(tokens, post.mean * 0.5));
    EXPECT_TRUE(at::allclose(vae->decode_tokens(tokens), dec, 1e-5, 1e-5));
}

TEST(KlVae, KlDivergenceMatchesTheClosedForm) {
    DiagonalGaussian standard{at::zeros({1, 2, 2, 2}), at::zeros({1, 2, 2, 2})};
    EXPECT_NEAR(standard.kl().item<double>(), 0.0, 1e-12);
    // Each element with mean 1 and logvar log 2: 0.5 * (1 + 2 - 1 - log 2).
    DiagonalGaussian shifted{at::ones({1, 2, 2, 2}), at::full({1, 2, 2, 2}, std::log(2.0))};
    EXPECT_NEAR(shifted.kl().item<double>(), 8 * 0.5 * (2 - std::log(2.0)), 1e-5);
}

TEST(KlVae, StateDictRoundTripThroughEveryFileLayout) {
    varscope::testing::TempDir dir;
    KlVae vae(tiny_config());
    randomise(vae, 3);
    const StateDict sd = module_state_dict(*vae);
    EXPECT_EQ(KlVaeConfig::infer_from(sd, 16, 0.5), tiny_config());

    // Raw dict, the official {"model": ...} nesting (flattened by the reader), Lightning's
    // "state_dict", and our export with its config metadata.
    StateDict nested, lightning;
    for (const auto& [k, v] : sd) {
        nested["model." + k] = v;
        lightning["state_dict." + k] = v;
    }
    nested["model.loss.discriminator.weight"] = at::zeros({3});  // training leftovers: ignored
    save_safetensors(sd, dir.file("raw.safetensors"));
    save_safetensors(nested, dir.file("nested.safetensors"));
    save_safetensors(lightning, dir.file("lightning.safetensors"));
    save_safetensors(sd, dir.file("export.safetensors"),
                     {{"varscope.config", tiny_config().to_json().dump()}});

    c10::InferenceMode g;
    const at::Tensor img = random_images(1, 16, 4);
    const at::Tensor expected = vae->decode(vae->encode(img).mean);
    for (const char* name : {"raw", "nested", "lightning", "export"}) {
        KlVae loaded = load_kl_vae(dir.file(std::string(name) + ".safetensors"), 16, 0.5);
        EXPECT_EQ(loaded->config(), tiny_config()) << name;
        EXPECT_TRUE(loaded->decode(loaded->encode(img).mean).equal(expected)) << name;
    }
    // The metadata's resolution and scale factor win over the call's defaults.
    KlVae exported = load_kl_vae(dir.file("export.safetensors"));
    EXPECT_EQ(exported->config(), tiny_config());
}

TEST(KlVae, BadCheckpointsAreExplained) {
    varscope::testing::TempDir dir;
    KlVae vae(tiny_config());
    StateDict sd = module_state_dict(*vae);

    // Not a KL VAE at all.
    save_safetensors({{"quantize.embedding.weight", at::zeros({4, 4})},
                      {"encoder.conv_in.weight", at::zeros({32, 3, 3, 3})}},
                     dir.file("vq.safetensors"));
    std::string e = error_of([&] { load_kl_vae(dir.file("vq.safetensors")); });
    EXPECT_NE(e.find("not a KL VAE"), std::string::npos) << e;
    EXPECT_NE(e.find("VQVAE"), std::string::npos) << e;

    // A tensor missing or of the wrong shape is named.
    StateDict missing = sd;
    missing.erase("decoder.up.1.attn.0.k.weight");
    save_safetensors(missing, dir.file("missing.safetensors"));
    e = error_of([&] { load_kl_vae(dir.file("missing.safetensors"), 16); });
    EXPECT_NE(e.find("decoder.up.1.attn.0.k.weight"), std::string::npos) << e;
    StateDict reshaped = sd;
    reshaped["quant_conv.bias"] = at::zeros({3});
    save_safetensors(reshaped, dir.file("shape.safetensors"));
    e = error_of([&] { load_kl_vae(dir.file("shape.safetensors"), 16); });
    EXPECT_NE(e.find("quant_conv.bias"), std::string::npos) << e;
    EXPECT_NE(e.find("shape"), std::string::npos) << e;

    // Metadata that contradicts the tensors.
    KlVaeConfig wrong = tiny_config();
    wrong.decoder_attn_resolutions = {};
    save_safetensors(sd, dir.file("meta.safetensors"),
                     {{"varscope.config", wrong.to_json().dump()}});
    e = error_of([&] { load_kl_vae(dir.file("meta.safetensors")); });
    EXPECT_NE(e.find("disagrees"), std::string::npos) << e;

    // Unknown extra tensors are not silently dropped.
    StateDict extra = sd;
    extra["decoder.extra.weight"] = at::zeros({1});
    e = error_of([&] { vae->load(extra, "extra"); });
    EXPECT_NE(e.find("unexpected tensor 'decoder.extra.weight'"), std::string::npos) << e;
}

TEST(KlVae, TrainerReducesTheLossAndExportsAScaleFactor) {
    varscope::testing::TempDir dir;
    KlVaeTrainJob job;
    job.model = tiny_config();
    job.train.steps = 20;
    job.train.batch = 8;
    job.train.lr = 3e-3;
    job.train.warmup = 2;
    job.train.log_every = 1;
    job.train.checkpoint_every = 1000;
    job.train.device = "cpu";
    job.data_path = smooth_pack(dir);
    job.run_dir = dir.file("run");
    std::ostringstream out;
    const nlohmann::json report = train_kl_vae(job, out);
    EXPECT_EQ(report["steps"], 20);

    std::ifstream log(dir.file("run/log.jsonl"));
    std::vector<double> losses;
    for (std::string line; std::getline(log, line);) {
        auto j = nlohmann::json::parse(line);
        if (j.contains("loss")) losses.push_back(j["loss"].get<double>());
    }
    ASSERT_EQ(losses.size(), 20u);
    const double first = (losses[0] + losses[1] + losses[2]) / 3;
    const double last = (losses[17] + losses[18] + losses[19]) / 3;
    EXPECT_LT(last, 0.7 * first) << out.str();

    // The export ships the measured scale factor: 1 / std of the posterior samples.
    const double std = report["latent_std"].get<double>();
    ASSERT_GT(std, 0.0);
    EXPECT_NEAR(report["scale_factor"].get<double>(), 1.0 / std, 1e-9);
    KlVae shipped = load_kl_vae(dir.file("run/export-fp16.safetensors"));
    EXPECT_NEAR(shipped->config().scale_factor, 1.0 / std, 1e-9);
    EXPECT_EQ(shipped->config().ch_mult, tiny_config().ch_mult);
    EXPECT_GT(report["psnr_db"].get<double>(), 10.0);

    // A longer run resumes from the checkpoint.
    job.train.steps = 22;
    std::ostringstream out2;
    train_kl_vae(job, out2);
    EXPECT_NE(out2.str().find("resumed at step 20"), std::string::npos) << out2.str();
}

TEST(KlVae, LossConfigErrorsNameTheKey) {
    EXPECT_EQ(KlVaeLoss::from_json({{"kl_weight", 1e-4}}).kl_weight, 1e-4);
    EXPECT_NE(error_of([] {
                  KlVaeLoss::from_json({{"kl_weight", -1}});
              }).find("'kl_weight'"),
              std::string::npos);
    EXPECT_NE(error_of([] {
                  KlVaeLoss::from_json({{"l1", 1}});
              }).find("unknown key 'l1'"),
              std::string::npos);
    EXPECT_NE(error_of([] {
                  KlVaeLoss::from_json({{"l1_weight", 0}, {"mse_weight", 0}});
              }).find("> 0"),
              std::string::npos);
}

TEST(KlVae, CliTrainsFromAConfigFileAndRejectsBadOnes) {
    varscope::testing::TempDir dir;
    const std::string pack = smooth_pack(dir);
    nlohmann::json cfg = {{"model", tiny_config().to_json()},
                          {"loss", {{"kl_weight", 1e-5}}},
                          {"train", {{"steps", 2}, {"batch", 4}, {"log_every", 1}}}};
    std::ofstream(dir.file("good.json")) << cfg.dump();
    const std::string common = " --data " + pack + " --device cpu --out ";
    auto run = run_cli("train klvae --config " + dir.file("good.json") + common + dir.file("a"));
    ASSERT_EQ(run.code, 0) << run.out;
    std::ifstream report_file(dir.file("a/report.json"));
    const nlohmann::json report = nlohmann::json::parse(report_file);
    EXPECT_EQ(report["steps"], 2);
    EXPECT_EQ(report["loss"]["kl_weight"], 1e-5);
    EXPECT_GT(report["scale_factor"].get<double>(), 0.0);

    cfg["loss"] = {{"kl", 1e-5}};
    std::ofstream(dir.file("bad.json")) << cfg.dump();
    run = run_cli("train klvae --config " + dir.file("bad.json") + common + dir.file("b"));
    EXPECT_NE(run.code, 0);
    EXPECT_NE(run.out.find("unknown key 'kl'"), std::string::npos) << run.out;
}

// The shipped emoji tokenizer: loads, has 8x8x16 latents of about unit std after scaling, and
// reconstructs an emoji drawn by the embedded VAR model.
TEST(KlVae, ShippedEmojiTokenizerReconstructsAnEmoji) {
    const std::string path = resource_dir() + "/models/emoji-klvae.safetensors";
    ASSERT_TRUE(std::filesystem::exists(path)) << path;
    KlVae vae = load_kl_vae(path);
    EXPECT_EQ(vae->config().downsample(), 8);
    EXPECT_EQ(vae->config().embed_dim, 16);

    auto pipe = VarPipeline::load(embedded_model_files(), {});
    const auto o = varscope::testing::emoji_options({1891, 581});  // red heart, cat
    const at::Tensor img = pipe.generate(o).images.mul(2).sub(1);  // [0,1] -> [-1,1]

    c10::InferenceMode g;
    const at::Tensor tokens = vae->encode_tokens(img, /*sample=*/false);
    EXPECT_EQ(tokens.sizes(), (at::IntArrayRef{2, 16, 8, 8}));
    EXPECT_GT(tokens.std().item<double>(), 0.5);  // scaled to about unit std
    EXPECT_LT(tokens.std().item<double>(), 2.0);
    const at::Tensor rec = vae->decode_tokens(tokens);
    const double heart = psnr(rec[0], img[0]), cat = psnr(rec[1], img[1]);
    std::cout << "emoji-klvae PSNR: heart " << heart << " dB, cat " << cat << " dB\n";
    EXPECT_GT(heart, 25.0);
    EXPECT_GT(cat, 25.0);
}

// Parity with the official models/vae.py: tools/parity/kl_vae_parity.py writes weights and the
// official outputs into $VARSCOPE_KL_PARITY_DIR and runs this test; skipped otherwise.
TEST(KlVaeParity, MatchesOfficialReference) {
    const char* env = std::getenv("VARSCOPE_KL_PARITY_DIR");
    if (!env) GTEST_SKIP() << "VARSCOPE_KL_PARITY_DIR not set (tools/parity/kl_vae_parity.py)";
    const std::string dir = env;
    std::ifstream pf(dir + "/params.json");
    const nlohmann::json params = nlohmann::json::parse(pf);
    KlVae vae = load_kl_vae(dir + "/" + params["weights"].get<std::string>(),
                            params["resolution"].get<int64_t>());
    const StateDict ref = load_checkpoint(dir + "/reference.safetensors");
    c10::InferenceMode g;
    const DiagonalGaussian post = vae->encode(ref.at("inp"));
    const at::Tensor dec = vae->decode_unclamped(ref.at("z"));
    auto rel = [](const at::Tensor& ours, const at::Tensor& theirs) {
        return (ours - theirs).abs().max().item<double>() / theirs.abs().max().item<double>();
    };
    nlohmann::json report = {{"config", vae->config().to_json()},
                             {"mean_rel_err", rel(post.mean, ref.at("mean"))},
                             {"logvar_rel_err", rel(post.logvar, ref.at("logvar"))},
                             {"decoder_rel_err", rel(dec, ref.at("dec"))}};
    std::ofstream(dir + "/ours.json") << report.dump(2) << "\n";
    std::cout << report.dump() << "\n";
    EXPECT_LE(report["mean_rel_err"].get<double>(), 1e-3);
    EXPECT_LE(report["logvar_rel_err"].get<double>(), 1e-3);
    EXPECT_LE(report["decoder_rel_err"].get<double>(), 1e-3);
}
