// Training the emoji feature network (core/training/emoji_feature_trainer.*) on tiny data:
// augmentation, config errors, a 2-step smoke run whose export loads, the cross-style split,
// resume, and the shipped configs.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "core/io/checkpoint.h"
#include "core/training/emoji_feature_trainer.h"
#include "tests/error_of.h"
#include "tests/test_util.h"

namespace varscope {
namespace {

using testing::error_of;

// 12 random 64x64 images of 3 classes; rows alternate google / twitter.
std::string tiny_pack(const testing::TempDir& dir, bool with_styles = true) {
    auto gen = at::detail::createCPUGenerator(5);
    const auto img =
        at::randint(0, 256, {12, 3, 64, 64}, gen, at::TensorOptions().dtype(at::kByte));
    StateDict d = {{"images", img}, {"labels", at::arange(12, at::kLong).div(4, "floor")}};
    if (with_styles) d["styles"] = at::arange(12, at::kLong).remainder(2).to(at::kByte);
    save_safetensors(d, dir.file("pack.safetensors"));
    return dir.file("pack.safetensors");
}

EmojiFeatureTrainJob tiny_job(const testing::TempDir& dir, const std::string& data) {
    EmojiFeatureTrainJob job;
    job.model.channels = {8, 16};
    job.model.groups = 4;
    job.model.num_classes = 3;
    job.train.steps = 2;
    job.train.batch = 4;
    job.train.lr = 1e-3;
    job.train.warmup = 1;
    job.train.log_every = 1;
    job.train.checkpoint_every = 100;
    job.train.device = "cpu";
    job.data_path = data;
    job.run_dir = dir.file("run");
    return job;
}

TEST(EmojiFeatureTraining, AugmentationOffIsTheIdentityAndBordersAreWhite) {
    auto gen = at::detail::createCPUGenerator(1);
    const auto x = at::rand({3, 3, 64, 64}).mul(2).sub(1);
    EmojiAugment off;
    off.shift_px = 0;
    off.scale_min = off.scale_max = 1;
    off.brightness = off.contrast = off.saturation = 0;
    EXPECT_LT((augment_emoji_batch(x, off, gen) - x).abs().max().item<double>(), 1e-5);
    // Shrinking a white image keeps it white (the new border is white, not grey or black).
    EmojiAugment shrink = off;
    shrink.scale_min = shrink.scale_max = 0.5;
    shrink.shift_px = 8;
    const auto white = at::ones({2, 3, 64, 64});
    EXPECT_LT((augment_emoji_batch(white, shrink, gen) - 1).abs().max().item<double>(), 1e-5);
    // A black square shrinks: fewer dark pixels, all inside [-1, 1].
    const auto black = at::full({1, 3, 64, 64}, -1.0);
    const auto y = augment_emoji_batch(black, shrink, gen);
    EXPECT_GT(y.mean().item<double>(), 0.2);
    EXPECT_LT(y.mean().item<double>(), 0.8);
    // The default jitter stays in range and changes the image.
    const auto z = augment_emoji_batch(x, EmojiAugment{}, gen);
    EXPECT_GE(z.min().item<double>(), -1.0);
    EXPECT_LE(z.max().item<double>(), 1.0);
    EXPECT_GT((z - x).abs().mean().item<double>(), 1e-3);
}

TEST(EmojiFeatureTraining, ConfigErrorsNameTheKey) {
    EmojiFeatureTrainJob job;
    EXPECT_NE(error_of<std::invalid_argument>([&] {
                  apply_emoji_feature_config({{"train_styles", {"apple"}}}, job);
              }).find("train_styles"),
              std::string::npos);
    EXPECT_NE(error_of<std::invalid_argument>([&] {
                  apply_emoji_feature_config({{"augment", {{"shift", 2}}}}, job);
              }).find("shift"),
              std::string::npos);
    EXPECT_NE(error_of<std::invalid_argument>([&] {
                  apply_emoji_feature_config({{"augment", {{"scale_min", 1.2}}}}, job);
              }).find("scale_min"),
              std::string::npos);
    EXPECT_NE(error_of<std::invalid_argument>([&] {
                  apply_emoji_feature_config({{"label_smoothing", 1.5}}, job);
              }).find("label_smoothing"),
              std::string::npos);
    EXPECT_NE(error_of<std::invalid_argument>([&] {
                  apply_emoji_feature_config({{"balance_classes", 1}}, job);
              }).find("balance_classes"),
              std::string::npos);
    apply_emoji_feature_config(
        {{"train_styles", {"google"}}, {"label_smoothing", 0.2}, {"balance_classes", false}}, job);
    EXPECT_FALSE(job.balance_classes);
    EXPECT_EQ(job.train_styles, std::vector<std::string>{"google"});
    EXPECT_DOUBLE_EQ(job.label_smoothing, 0.2);
}

TEST(EmojiFeatureTraining, SmokeRunWritesALoadableExportAndHoldsOutAStyle) {
    testing::TempDir dir;
    auto job = tiny_job(dir, tiny_pack(dir));
    job.train_styles = {"google"};
    std::ostringstream log;
    const auto report = train_emoji_features(job, log);
    EXPECT_EQ(report["steps"], 2);
    EXPECT_EQ(report["train"]["images"], 6);
    EXPECT_EQ(report["heldout"]["images"], 6);
    EXPECT_TRUE(report["heldout"]["accuracy"].is_number());
    EXPECT_EQ(report["by_style"]["twitter"]["images"], 6);
    const double acc = report["train"]["accuracy"].get<double>();
    EXPECT_GE(acc, 0.0);
    EXPECT_LE(acc, 1.0);
    // Every class has 2 images per style here: both accuracies are the same mean.
    EXPECT_NEAR(report["train"]["class_mean_accuracy"].get<double>(), acc, 1e-12);
    const auto net = EmojiFeatureNetwork::load(job.run_dir + "/export-fp16.safetensors");
    EXPECT_EQ(net.config().num_classes, 3);
    ASSERT_TRUE(net.reference_mu().defined());
    EXPECT_EQ(net.reference_sigma().sizes(), (at::IntArrayRef{16, 16}));
    const auto meta = read_safetensors_metadata(job.run_dir + "/export-fp16.safetensors");
    EXPECT_NE(meta.at("varscope.preprocessing").find("64x64"), std::string::npos);
    EXPECT_EQ(nlohmann::json::parse(meta.at("varscope.training"))["train_styles"],
              nlohmann::json({"google"}));
    // The exported features are the trained network's (fp16 rounding only).
    const auto full = EmojiFeatureNetwork::load(job.run_dir + "/final.safetensors");
    const auto img = at::randint(0, 256, {2, 3, 64, 64}, at::TensorOptions().dtype(at::kByte));
    EXPECT_TRUE(at::allclose(net.features(img).logits, full.features(img).logits, 2e-2, 2e-2));
    // Resuming a finished run does no more steps and exports again.
    std::ostringstream again;
    EXPECT_EQ(train_emoji_features(job, again)["steps"], 2);
    EXPECT_NE(again.str().find("resumed at step 2"), std::string::npos);
}

TEST(EmojiFeatureTraining, ClassMeanAccuracyWeighsEveryClassTheSame) {
    // Class 0 has 10 images, class 1 two; a network that always answers 0.
    testing::TempDir dir;
    const auto img = at::zeros({12, 3, 64, 64}, at::TensorOptions().dtype(at::kByte));
    auto labels = at::zeros({12}, at::kLong);
    labels.narrow(0, 10, 2).fill_(1);
    save_safetensors({{"images", img}, {"labels", labels}}, dir.file("pack.safetensors"));
    auto job = tiny_job(dir, dir.file("pack.safetensors"));
    job.model.num_classes = 2;
    job.label_smoothing = 0;
    job.train.steps = 1;
    std::ostringstream log;
    const auto report = train_emoji_features(job, log);
    // Identical images: one answer for all; image accuracy 10/12 or 2/12, class mean 1/2.
    const double acc = report["train"]["accuracy"].get<double>();
    EXPECT_TRUE(std::abs(acc - 10.0 / 12) < 1e-9 || std::abs(acc - 2.0 / 12) < 1e-9) << acc;
    EXPECT_NEAR(report["train"]["class_mean_accuracy"].get<double>(), 0.5, 1e-9);
    EXPECT_TRUE(report["heldout"]["accuracy"].is_null());
}

TEST(EmojiFeatureTraining, DataProblemsAreExplained) {
    testing::TempDir dir;
    auto job = tiny_job(dir, tiny_pack(dir, /*with_styles=*/false));
    job.train_styles = {"twitter"};
    std::ostringstream log;
    EXPECT_NE(error_of<std::invalid_argument>([&] {
                  train_emoji_features(job, log);
              }).find("no 'styles'"),
              std::string::npos);
    job.train_styles = {"google", "twitter"};
    job.model.num_classes = 2;
    EXPECT_NE(error_of<std::invalid_argument>([&] {
                  train_emoji_features(job, log);
              }).find("num_classes"),
              std::string::npos);
}

TEST(EmojiFeatureTraining, ShippedConfigsRead) {
    for (const char* name : {"emoji-features", "emoji-features-google-only"}) {
        std::ifstream f(testing::source_dir() + "/resources/training/" + name + ".json");
        ASSERT_TRUE(f.good()) << name;
        const auto j = nlohmann::json::parse(f);
        EmojiFeatureTrainJob job;
        EXPECT_NO_THROW(apply_emoji_feature_config(j, job)) << name;
        EXPECT_NO_THROW(TrainConfig::from_json(j.at("train"))) << name;
        EXPECT_EQ(job.model.num_classes, 1911) << name;
    }
}

}  // namespace
}  // namespace varscope
