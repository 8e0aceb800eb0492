// The emoji feature network (core/metrics/emoji_features.*): shapes, preprocessing, strict
// loading with clear errors on a tiny random network; with the shipped file present, real
// emoji64 images (tests/fixtures/emoji_samples.safetensors) classified as their classes.
#include "core/metrics/emoji_features.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "core/io/checkpoint.h"
#include "core/io/module_binding.h"
#include "tests/error_of.h"
#include "tests/test_util.h"

namespace varscope {
namespace {

using testing::error_of;

EmojiFeatureConfig tiny_config() {
    EmojiFeatureConfig c;
    c.channels = {8, 16};
    c.blocks = 1;
    c.groups = 4;
    c.num_classes = 5;
    return c;
}

// Writes a tiny random network as `train emoji-features` exports one.
void write_export(const std::string& path, const EmojiFeatureConfig& c, StateDict extra = {},
                  std::map<std::string, std::string> meta = {}) {
    torch::manual_seed(3);
    EmojiFeatureNet net(c);
    StateDict sd = module_state_dict(*net);
    for (auto& [k, v] : extra) sd[k] = v;
    if (!meta.count("varscope.kind")) meta["varscope.kind"] = kEmojiFeaturesKind;
    if (!meta.count("varscope.config")) meta["varscope.config"] = c.to_json().dump();
    for (auto it = meta.begin(); it != meta.end();)
        it = it->second.empty() ? meta.erase(it) : std::next(it);
    save_safetensors(sd, path, meta);
}

at::Tensor random_images(int64_t n, int64_t size = 64) {
    return at::randint(0, 256, {n, 3, size, size}, at::TensorOptions().dtype(at::kByte));
}

TEST(EmojiFeatures, ConfigRoundTripsAndRejectsBadFields) {
    const auto c = tiny_config();
    const auto back = EmojiFeatureConfig::from_json(c.to_json());
    EXPECT_EQ(back.channels, c.channels);
    EXPECT_EQ(back.num_classes, 5);
    EXPECT_EQ(c.feature_dim(), 16);
    EXPECT_NE(error_of<std::invalid_argument>([] {
                  EmojiFeatureConfig::from_json({{"channels", {8, 12}}, {"groups", 8}});
              }).find("divisible by 'groups'"),
              std::string::npos);
    EXPECT_NE(error_of<std::invalid_argument>([] {
                  EmojiFeatureConfig::from_json({{"chanels", {8}}});
              }).find("chanels"),
              std::string::npos);
    EXPECT_NE(error_of<std::invalid_argument>([] {
                  EmojiFeatureConfig::from_json({{"architecture", "resnet"}});
              }).find("architecture"),
              std::string::npos);
    EXPECT_NE(error_of<std::invalid_argument>([] {
                  EmojiFeatureConfig::from_json({{"blocks", "two"}});
              }).find("whole numbers"),
              std::string::npos);
    // Numbers the JSON library would cast (2.5 to 2; 1e40 is undefined behaviour) are refused.
    for (const nlohmann::json& bad :
         {nlohmann::json{{"blocks", 2.5}}, nlohmann::json{{"channels", {8, 1e40}}}})
        EXPECT_NE(error_of<std::invalid_argument>([&] {
                      EmojiFeatureConfig::from_json(bad);
                  }).find("whole numbers"),
                  std::string::npos)
            << bad;
}

TEST(EmojiFeatures, InputIsQuantisedAndResizedTo64) {
    const auto u8 = random_images(2);
    const auto x = emoji_feature_input(u8);
    EXPECT_EQ(x.sizes(), (at::IntArrayRef{2, 3, 64, 64}));
    EXPECT_TRUE(at::allclose(x, u8.to(at::kFloat).div(127.5).sub(1)));
    // Float in [0, 1] is the same image once quantised (as a PNG would hold it).
    const auto f = u8.to(at::kFloat).div(255).add(0.4 / 255);
    EXPECT_TRUE(at::equal(emoji_feature_input(f), x));
    EXPECT_GE(x.min().item<double>(), -1.0);
    EXPECT_LE(x.max().item<double>(), 1.0);
    // Other sizes are resized to 64x64: a flat colour stays that colour, a 128x128 image of 2x2
    // blocks comes back close to the 64x64 one (the antialiasing filter blends neighbours).
    const auto flat = at::full({1, 3, 128, 96}, 200, at::TensorOptions().dtype(at::kByte));
    const auto flat64 = emoji_feature_input(flat);
    EXPECT_EQ(flat64.sizes(), (at::IntArrayRef{1, 3, 64, 64}));
    EXPECT_LT((flat64 - (200 / 127.5 - 1)).abs().max().item<double>(), 1e-5);
    const auto smooth =
        at::linspace(0, 255, 64).round().to(at::kByte).view({1, 1, 1, 64}).expand({1, 3, 64, 64});
    const auto big = smooth.repeat_interleave(2, 2).repeat_interleave(2, 3);
    const auto small = emoji_feature_input(big), direct = emoji_feature_input(smooth);
    EXPECT_LT((small - direct).abs().narrow(3, 2, 60).max().item<double>(), 0.02);
    EXPECT_EQ(emoji_feature_input(random_images(1, 40)).sizes(), (at::IntArrayRef{1, 3, 64, 64}));
    EXPECT_NE(error_of<std::invalid_argument>([] {
                  emoji_feature_input(at::zeros({3, 64, 64}));
              }).find("(N, 3, H, W)"),
              std::string::npos);
}

TEST(EmojiFeatures, LoadsAnExportAndGivesFeaturesAndLogits) {
    testing::TempDir dir;
    const auto c = tiny_config();
    const auto mu = at::arange(16, at::kDouble), sigma = at::eye(16, at::kDouble);
    write_export(dir.file("net.safetensors"), c,
                 {{kEmojiReferenceMu, mu}, {kEmojiReferenceSigma, sigma}});
    const auto net = EmojiFeatureNetwork::load(dir.file("net.safetensors"));
    EXPECT_EQ(net.config().channels, c.channels);
    const auto images = random_images(3);
    const auto f = net.features(images);
    EXPECT_EQ(f.features.sizes(), (at::IntArrayRef{3, 16}));
    EXPECT_EQ(f.logits.sizes(), (at::IntArrayRef{3, 5}));
    EXPECT_EQ(f.features.scalar_type(), at::kFloat);
    // Batch-independent (GroupNorm, no batch statistics) and deterministic.
    const auto one = net.features(images.narrow(0, 1, 1));
    EXPECT_TRUE(at::allclose(one.features[0], f.features[1], 1e-5, 1e-5));
    EXPECT_TRUE(at::allclose(one.logits[0], f.logits[1], 1e-5, 1e-5));
    EXPECT_TRUE(at::equal(net.reference_mu(), mu));
    EXPECT_TRUE(at::equal(net.reference_sigma(), sigma));
    // Different images, different features.
    EXPECT_FALSE(at::allclose(f.features[0], f.features[1]));
}

TEST(EmojiFeatures, StrictLoadNamesWhatIsWrong) {
    testing::TempDir dir;
    const auto c = tiny_config();
    const std::string path = dir.file("net.safetensors");
    auto load_error = [&] {
        return error_of<CheckpointError>([&] { EmojiFeatureNetwork::load(path); });
    };
    write_export(path, c, {}, {{"varscope.kind", "var"}});
    EXPECT_NE(load_error().find("not an emoji feature network"), std::string::npos);
    write_export(path, c, {}, {{"varscope.config", ""}});
    EXPECT_NE(load_error().find("'varscope.config'"), std::string::npos);
    write_export(path, c, {}, {{"varscope.config", "{\"channels\": [8, 12], \"groups\": 3}"}});
    EXPECT_NE(load_error().find("divisible"), std::string::npos);
    // The metadata says more classes than the tensors hold.
    auto wider = c;
    wider.num_classes = 7;
    write_export(path, c, {}, {{"varscope.config", wider.to_json().dump()}});
    EXPECT_NE(load_error().find("'head.weight' has shape"), std::string::npos);
    // An extra tensor, and half the reference statistics.
    write_export(path, c, {{"extra.weight", at::zeros({2})}});
    EXPECT_NE(load_error().find("extra.weight"), std::string::npos);
    write_export(path, c, {{kEmojiReferenceMu, at::zeros({16}, at::kDouble)}});
    EXPECT_NE(load_error().find("one is missing"), std::string::npos);
    write_export(path, c,
                 {{kEmojiReferenceMu, at::zeros({8}, at::kDouble)},
                  {kEmojiReferenceSigma, at::zeros({8, 8}, at::kDouble)}});
    EXPECT_NE(load_error().find("feature size"), std::string::npos);
    EXPECT_FALSE(error_of<CheckpointError>([&] {
                     EmojiFeatureNetwork::load(dir.file("missing.safetensors"));
                 }).empty());
}

// The shipped network on real emoji64 images (both styles): google/ and twitter/ PNGs composited
// on white as pack-emoji does (tools/make_emoji_samples.py wrote the fixture from the dataset).
TEST(EmojiFeatures, ShippedNetworkClassifiesRealEmoji) {
    const auto model = std::filesystem::path(testing::source_dir()) / "resources" / "models" /
                       "emoji-features.safetensors";
    if (!std::filesystem::exists(model)) GTEST_SKIP() << model << " not shipped in this checkout";
    const auto net = EmojiFeatureNetwork::load(model.string());
    const auto samples = load_safetensors(
        (std::filesystem::path(testing::source_dir()) / "tests/fixtures/emoji_samples.safetensors")
            .string());
    const auto& images = samples.at("images");
    const auto& labels = samples.at("labels");
    const auto predicted = net.features(images).logits.argmax(1);
    const int64_t correct = predicted.eq(labels).sum().item<int64_t>();
    EXPECT_EQ(correct, labels.size(0)) << "predicted " << predicted << " for " << labels;
    // Reference statistics ship with it (the data set's own Frechet reference).
    EXPECT_TRUE(net.reference_mu().defined());
}

}  // namespace
}  // namespace varscope
