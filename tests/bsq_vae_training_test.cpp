// Training the BSQ VAE (core/training/bsq_vae_trainer.h) on tiny data: gradients reach encoder and
// decoder through the straight-through quantizer, the training path keeps inference's values, a
// run lowers the loss, resumes exactly, exports a file the BSQ loader and the family detector
// take, and bad configs are named.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/io/checkpoint.h"
#include "core/io/module_binding.h"
#include "core/models/detect.h"
#include "core/training/bsq_vae_trainer.h"
#include "tests/cli_run.h"
#include "tests/error_of.h"
#include "tests/smooth_pack.h"
#include "tests/test_util.h"

using namespace varscope;
using varscope::testing::error_of;
using varscope::testing::run_cli;

namespace {

// 16 px images -> 4x4 latent of 6 bits.
BsqVaeConfig tiny_config() {
    BsqVaeConfig c;
    c.codebook_dim = 6;
    c.base_ch = 24;
    c.encoder_ch_mult = c.decoder_ch_mult = {1, 1, 1};
    c.num_res_blocks = 1;
    c.patch_size = 4;
    return c;
}

const std::vector<int64_t> kTinyScales{1, 2, 4};

BsqVaeTrainJob tiny_job(const varscope::testing::TempDir& dir, int64_t steps) {
    BsqVaeTrainJob job;
    job.model = tiny_config();
    job.scales = kTinyScales;
    job.holdout_every = 4;  // images 0, 4, 8, 12 held out
    job.train.steps = steps;
    job.train.batch = 6;
    job.train.lr = 3e-3;
    job.train.warmup = 2;
    job.train.log_every = 1;
    job.train.checkpoint_every = 1000;
    job.train.device = "cpu";
    job.data_path = varscope::testing::smooth_pack(dir);
    job.run_dir = dir.file("run");
    return job;
}

std::vector<double> logged_losses(const std::string& path) {
    std::ifstream log(path);
    std::vector<double> losses;
    for (std::string line; std::getline(log, line);) {
        const auto j = nlohmann::json::parse(line);
        if (j.contains("loss")) losses.push_back(j["loss"].get<double>());
    }
    return losses;
}

at::Tensor images(int64_t n, uint64_t seed) {
    return at::rand({n, 3, 16, 16}, at::detail::createCPUGenerator(seed)).mul(2).sub(1);
}

}  // namespace

// Reconstruction alone must move the encoder: the gradient passes the sign through the
// straight-through estimator (z + (zhat - z).detach(); without the detach it cancelled).
TEST(BsqVaeTraining, GradientsReachEncoderAndDecoder) {
    auto vae = BsqVaeImpl::random(tiny_config(), 3);
    const at::Tensor img = images(2, 4);
    const auto schedule = bsq_square_schedule(kTinyScales, 4);
    const bsq::MultiScaleCodes codes =
        bsq::quantize_multiscale(vae->encode_h(img), schedule, vae->quant_config());
    const at::Tensor rec = vae->decode_unclamped(codes.f_hat);
    (rec - img).pow(2).mean().backward();
    int64_t checked = 0;
    for (const auto& p : vae->named_parameters()) {
        ASSERT_TRUE(p.value().grad().defined()) << p.key();
        EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0.0) << p.key();
        ++checked;
    }
    EXPECT_GT(checked, 20);
}

// The training path (grad mode, out-of-place swish, detached residuals) computes the same values
// as inference.
TEST(BsqVaeTraining, TrainingPathKeepsInferenceValues) {
    auto vae = BsqVaeImpl::random(tiny_config(), 5);
    const at::Tensor img = images(3, 6);
    const auto schedule = bsq_square_schedule(kTinyScales, 4);
    const at::Tensor h = vae->encode_h(img);
    ASSERT_TRUE(h.requires_grad());
    int64_t scales_seen = 0;
    const bsq::MultiScaleCodes train = bsq::quantize_multiscale(
        h, schedule, vae->quant_config(), [&](size_t si, const bsq::BsqQuantized& q) {
            EXPECT_EQ(static_cast<int64_t>(si), scales_seen++);
            EXPECT_TRUE(q.normalized.requires_grad());
        });
    EXPECT_EQ(scales_seen, 3);
    const at::Tensor rec = vae->decode_unclamped(train.f_hat);
    c10::InferenceMode guard;
    const BsqEncodeOutput inf = vae->encode(img, schedule);
    EXPECT_TRUE(at::equal(h.detach(), inf.h));
    EXPECT_TRUE(at::equal(train.f_hat.detach(), inf.codes.f_hat));
    for (size_t si = 0; si < schedule.size(); ++si)
        EXPECT_TRUE(at::equal(train.bits[si], inf.codes.bits[si])) << si;
    EXPECT_TRUE(at::equal(rec.detach(), vae->decode_unclamped(inf.codes.f_hat)));
}

TEST(BsqVaeTraining, SchedulesAndHoldoutSplit) {
    EXPECT_EQ(bsq_square_schedule({1, 2, 4}, 4).back(), (bsq::Size3{1, 4, 4}));
    EXPECT_NE(error_of([] {
                  bsq_square_schedule({1, 3, 2, 4}, 4);
              }).find("scales: sides must"),
              std::string::npos);
    EXPECT_NE(error_of([] {
                  bsq_square_schedule({1, 2, 8}, 4);
              }).find("latent side 4"),
              std::string::npos);
    EXPECT_NE(error_of([] { bsq_square_schedule({}, 4); }).find("scales: empty"),
              std::string::npos);
    ImageDataset d;
    d.images = at::arange(10, at::kLong).to(at::kByte).view({10, 1, 1, 1}).expand({10, 3, 2, 2});
    d.labels = at::arange(10, at::kLong);
    const auto [train, held] = split_holdout(d, 3);
    EXPECT_TRUE(at::equal(held.labels, at::tensor({0, 3, 6, 9}, at::kLong)));
    EXPECT_TRUE(at::equal(train.labels, at::tensor({1, 2, 4, 5, 7, 8}, at::kLong)));
    EXPECT_EQ(split_holdout(d, 0).second.size(), 0);
    EXPECT_NE(error_of([&] { split_holdout(d, 1); }).find("leaves no training images"),
              std::string::npos);
}

TEST(BsqVaeTraining, RunLowersTheLossAndExportsALoadableFile) {
    varscope::testing::TempDir dir;
    BsqVaeTrainJob job = tiny_job(dir, 40);
    std::ostringstream out;
    const nlohmann::json report = train_bsq_vae(job, out);
    EXPECT_EQ(report["steps"], 40);
    EXPECT_EQ(report["heldout"]["images"], 4);
    EXPECT_EQ(report["train_images"]["images"], 12);
    EXPECT_EQ(report["psnr_on"], "heldout");
    const std::vector<double> losses = logged_losses(dir.file("run/log.jsonl"));
    ASSERT_EQ(losses.size(), 40u);
    const double first = (losses[0] + losses[1] + losses[2]) / 3;
    const double last = (losses[37] + losses[38] + losses[39]) / 3;
    EXPECT_LT(last, 0.6 * first) << out.str();
    const double psnr = report["psnr_db"].get<double>();
    EXPECT_GT(psnr, 12.0) << report.dump();
    const auto& held = report["heldout"];
    EXPECT_GE(held["bit_one_fraction_min"].get<double>(), 0.0);
    EXPECT_LE(held["bit_one_fraction_max"].get<double>(), 1.0);
    EXPECT_LE(held["bit_entropy_bits"].get<double>(), 6.0 + 1e-9);
    EXPECT_LE(held["distinct_codes"].get<int64_t>(), held["tokens"].get<int64_t>());
    EXPECT_GT(held["code_entropy_bits"].get<double>(), 0.0);

    // The fp32 final weights and the fp16 export load with the inference loader; the export is
    // recognised as a BSQ VAE with the trained architecture, and decodes the fp32 model's bits
    // to (nearly) the same image.
    BsqVae full = load_bsq_vae(dir.file("run/final.safetensors"));
    BsqVae half = load_bsq_vae(dir.file("run/export-fp16.safetensors"));
    EXPECT_EQ(half->config(), tiny_config());
    const StateDict exported = load_checkpoint(dir.file("run/export-fp16.safetensors"));
    EXPECT_EQ(detect_family(exported), ModelFamily::BsqVae);
    EXPECT_EQ(inferred_config(ModelFamily::BsqVae, exported), tiny_config().to_json());
    c10::InferenceMode guard;
    const ImageDataset data = load_image_dataset(job.data_path, at::kCPU);
    const at::Tensor img = data.batch_images(at::arange(16, at::kLong));
    const auto schedule = bsq_square_schedule(kTinyScales, 4);
    const BsqEncodeOutput enc = full->encode(img, schedule);
    const at::Tensor a = full->decode_bits(enc.codes.bits, schedule);
    const at::Tensor b = half->decode_bits(enc.codes.bits, schedule);
    EXPECT_LT((a - b).abs().max().item<double>(), 0.05);
    EXPECT_NEAR(
        report["train_images"]["psnr_db"].get<double>(),
        evaluate_bsq_vae(full, split_holdout(data, 4).first, schedule)["psnr_db"].get<double>(),
        1e-6);
    const BsqEncodeOutput enc_half = half->encode(img, schedule);
    int64_t same = 0, total = 0;
    for (size_t si = 0; si < schedule.size(); ++si) {
        same += enc_half.codes.bits[si].eq(enc.codes.bits[si]).sum().item<int64_t>();
        total += enc.codes.bits[si].numel();
    }
    EXPECT_GT(static_cast<double>(same) / static_cast<double>(total), 0.97);
}

// An interrupted run (stopped at step 3) resumed to step 6 ends with the very weights of an
// unbroken 6-step run: same batches, optimizer state and schedule.
TEST(BsqVaeTraining, ResumeContinuesExactly) {
    varscope::testing::TempDir a_dir, b_dir;
    std::ostringstream out;
    train_bsq_vae(tiny_job(a_dir, 6), out);
    BsqVaeTrainJob b = tiny_job(b_dir, 6);
    b.stop_at_step = 3;
    EXPECT_EQ(train_bsq_vae(b, out)["steps"], 3);
    b.stop_at_step = 0;
    std::ostringstream resumed;
    EXPECT_EQ(train_bsq_vae(b, resumed)["steps"], 6);
    EXPECT_NE(resumed.str().find("resumed at step 3"), std::string::npos) << resumed.str();
    const StateDict wa = load_checkpoint(a_dir.file("run/final.safetensors"));
    const StateDict wb = load_checkpoint(b_dir.file("run/final.safetensors"));
    ASSERT_EQ(wa.size(), wb.size());
    for (const auto& [name, t] : wa) EXPECT_TRUE(at::equal(t, wb.at(name))) << name;
    // The logs of steps 3..5 agree too.
    const auto la = logged_losses(a_dir.file("run/log.jsonl"));
    const auto lb = logged_losses(b_dir.file("run/log.jsonl"));
    ASSERT_EQ(la.size(), 6u);
    ASSERT_EQ(lb.size(), 6u);
    for (size_t i = 0; i < 6; ++i) EXPECT_EQ(la[i], lb[i]) << i;
}

TEST(BsqVaeTraining, ConfigErrorsNameTheKeyAndTheShippedConfigReads) {
    EXPECT_NE(error_of([] {
                  BsqVaeConfig::from_json({{"codebook_dimm", 16}});
              }).find("unknown field 'codebook_dimm'"),
              std::string::npos);
    EXPECT_NE(error_of([] {
                  BsqVaeConfig::from_json({{"base_ch", "wide"}});
              }).find("'base_ch'"),
              std::string::npos);
    EXPECT_NE(error_of([] {
                  BsqVaeConfig::from_json({{"base_ch", 40}});
              }).find("GroupNorm"),
              std::string::npos);
    EXPECT_EQ(BsqVaeConfig::from_json(tiny_config().to_json()), tiny_config());
    EXPECT_NE(error_of([] {
                  BsqVaeLoss::from_json({{"l1", 1}});
              }).find("unknown field 'l1'"),
              std::string::npos);
    EXPECT_NE(error_of([] {
                  BsqVaeLoss::from_json({{"l1_weight", 0}, {"mse_weight", 0}});
              }).find("> 0"),
              std::string::npos);
    EXPECT_EQ(BsqVaeLoss::from_json({{"mse_weight", 2}, {"group_size", 2}}).quantizer.group_size,
              2);

    std::ifstream f(varscope::testing::source_dir() + "/resources/training/emoji-bsq-vae.json");
    ASSERT_TRUE(f.good());
    const auto j = nlohmann::json::parse(f);
    const BsqVaeConfig model = BsqVaeConfig::from_json(j.at("model"));
    EXPECT_EQ(model, emoji_bsq_vae_config());
    EXPECT_NO_THROW(TrainConfig::from_json(j.at("train")));
    const BsqVaeLoss loss = BsqVaeLoss::from_json(j.at("loss"));
    EXPECT_NO_THROW(loss.quantizer.check_against(model.codebook_dim));
    const auto schedule =
        bsq_square_schedule(j.at("scales").get<std::vector<int64_t>>(), 64 / model.patch_size);
    EXPECT_EQ(schedule.size(), 9u);
    // What ships stays under 16 MiB in fp16.
    int64_t params = 0;
    for (const auto& p : BsqVae(model)->parameters()) params += p.numel();
    EXPECT_LT(params * 2, 16 * 1024 * 1024);
}

TEST(BsqVaeTraining, BadDataIsNamed) {
    varscope::testing::TempDir dir;
    BsqVaeTrainJob job = tiny_job(dir, 1);
    job.scales = {1, 2, 3};  // latent is 4x4
    std::ostringstream out;
    EXPECT_NE(error_of([&] { train_bsq_vae(job, out); }).find("scales:"), std::string::npos);
    job.scales = kTinyScales;
    job.model.patch_size = 8;  // validate: needs 4 levels
    EXPECT_NE(error_of([&] { train_bsq_vae(job, out); }).find("patch_size"), std::string::npos);
}

// The CLI subcommand (runs the built varscope-cli).
TEST(BsqVaeTraining, CliTrainsFromAConfigFileAndRejectsBadOnes) {
    varscope::testing::TempDir dir;
    const std::string pack = varscope::testing::smooth_pack(dir);
    nlohmann::json cfg = {{"model", tiny_config().to_json()},
                          {"scales", kTinyScales},
                          {"holdout_every", 4},
                          {"loss", {{"group_size", 2}}},
                          {"train", {{"steps", 2}, {"batch", 4}, {"log_every", 1}}}};
    std::ofstream(dir.file("good.json")) << cfg.dump();
    const std::string common = " --data " + pack + " --device cpu --run-dir ";
    auto run = run_cli("train bsq-vae --config " + dir.file("good.json") + common + dir.file("a"));
    ASSERT_EQ(run.code, 0) << run.out;
    std::ifstream report_file(dir.file("a/report.json"));
    const nlohmann::json report = nlohmann::json::parse(report_file);
    EXPECT_EQ(report["steps"], 2);
    EXPECT_EQ(report["loss"]["group_size"], 2);
    EXPECT_TRUE(std::filesystem::exists(dir.file("a/export-fp16.safetensors")));
    run = run_cli("info " + dir.file("a/export-fp16.safetensors"));
    EXPECT_EQ(run.code, 0) << run.out;
    EXPECT_NE(run.out.find("Infinity BSQ VAE"), std::string::npos) << run.out;

    cfg["scales"] = {1, 2, 3};
    std::ofstream(dir.file("bad.json")) << cfg.dump();
    run = run_cli("train bsq-vae --config " + dir.file("bad.json") + common + dir.file("b"));
    EXPECT_NE(run.code, 0);
    EXPECT_NE(run.out.find("scales:"), std::string::npos) << run.out;
}
