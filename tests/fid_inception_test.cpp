// The FID Inception (core/metrics/fid_inception.*): weight checks with messages naming file and
// tensor, the accepted name layouts, preprocessing. Numbers against pytorch-fid:
// tests/fid_parity_test.cpp.
#include "core/metrics/fid_inception.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "core/io/checkpoint.h"
#include "tests/error_of.h"
#include "tests/test_util.h"

namespace varscope {
namespace {

using testing::error_of;

const StateDict& weights() {
    static const StateDict w = synthetic_inception_weights();
    return w;
}

TEST(FidInception, SyntheticWeightsCoverEveryTensorDeterministically) {
    const auto shapes = inception_tensor_shapes();
    // 94 BasicConv2d layers (conv weight + 4 batch-norm tensors) and the classifier.
    EXPECT_EQ(shapes.size(), 94u * 5 + 2);
    EXPECT_EQ(weights().size(), shapes.size());
    int64_t params = 0;
    for (const auto& [name, t] : weights()) params += t.numel();
    EXPECT_GT(params, 23'000'000);  // pytorch-fid's file: 23.9 M values with running stats
    const auto again = synthetic_inception_weights();
    for (const auto& [name, t] : weights()) ASSERT_TRUE(at::equal(t, again.at(name))) << name;
    EXPECT_GT(weights().at("fc.bias").std().item<double>(), 0.01);
    EXPECT_TRUE(weights().at("Mixed_6d.branch1x1.bn.running_var").ge(1).all().item<bool>());
}

TEST(FidInception, RefusesIncompleteOrForeignWeightsNamingFileAndTensor) {
    StateDict w = weights();
    w.erase("Mixed_6b.branch7x7_2.conv.weight");
    auto e = error_of<CheckpointError>([&] { FidInception(w, "inc.pth"); });
    EXPECT_NE(e.find("'inc.pth'"), std::string::npos) << e;
    EXPECT_NE(e.find("missing tensor 'Mixed_6b.branch7x7_2.conv.weight'"), std::string::npos) << e;

    w = weights();
    w["Mixed_5b.branch_pool.bn.bias"] = at::zeros({31});
    e = error_of<CheckpointError>([&] { FidInception(w, "inc.pth"); });
    EXPECT_NE(e.find("'Mixed_5b.branch_pool.bn.bias' has shape [31], expected [32]"),
              std::string::npos)
        << e;

    w = weights();
    w["AuxLogits.fc.weight"] = at::zeros({1008, 768});
    e = error_of<CheckpointError>([&] { FidInception(w, "inc.pth"); });
    EXPECT_NE(e.find("unexpected tensor 'AuxLogits.fc.weight'"), std::string::npos) << e;

    w = weights();
    w.erase("fc.bias");
    EXPECT_NE(error_of<CheckpointError>([&] { FidInception(w, "inc.pth"); }).find("fc.bias"),
              std::string::npos);

    EXPECT_NE(error_of<CheckpointError>([] {
                  FidInception::load("/nonexistent/inc.pth");
              }).find("/nonexistent/inc.pth"),
              std::string::npos);
}

TEST(FidInception, LoadsFilesAndPytorchFidModuleNames) {
    testing::TempDir dir;
    save_safetensors(weights(), dir.file("inc.safetensors"));
    const auto net = FidInception::load(dir.file("inc.safetensors"));
    EXPECT_TRUE(net.has_logits());

    // pytorch-fid's InceptionV3 module: blocks.<i>.<j>.*, no classifier, num_batches_tracked.
    StateDict module;
    const std::map<std::string, std::string> blocks = {
        {"Conv2d_1a_3x3", "blocks.0.0"}, {"Conv2d_2a_3x3", "blocks.0.1"},
        {"Conv2d_2b_3x3", "blocks.0.2"}, {"Conv2d_3b_1x1", "blocks.1.0"},
        {"Conv2d_4a_3x3", "blocks.1.1"}, {"Mixed_5b", "blocks.2.0"},
        {"Mixed_5c", "blocks.2.1"},      {"Mixed_5d", "blocks.2.2"},
        {"Mixed_6a", "blocks.2.3"},      {"Mixed_6b", "blocks.2.4"},
        {"Mixed_6c", "blocks.2.5"},      {"Mixed_6d", "blocks.2.6"},
        {"Mixed_6e", "blocks.2.7"},      {"Mixed_7a", "blocks.3.0"},
        {"Mixed_7b", "blocks.3.1"},      {"Mixed_7c", "blocks.3.2"}};
    for (const auto& [name, t] : weights()) {
        if (name.rfind("fc.", 0) == 0) continue;
        const auto dot = name.find('.');
        const std::string renamed = "module." + blocks.at(name.substr(0, dot)) + name.substr(dot);
        module[renamed] = t;
        if (renamed.size() > 7 && renamed.compare(renamed.size() - 7, 7, ".weight") == 0 &&
            renamed.find(".bn.") != std::string::npos)
            module[renamed.substr(0, renamed.size() - 7) + ".num_batches_tracked"] =
                at::zeros({}, at::kLong);
    }
    const FidInception from_module(module, "module");
    EXPECT_FALSE(from_module.has_logits());
    // Same pool3 and spatial features as the torchvision-named weights.
    const auto images = at::randint(0, 256, {1, 3, 32, 32}, at::kByte);
    const auto a = net.features(images), b = from_module.features(images);
    EXPECT_TRUE(at::equal(a.pool3, b.pool3));
    EXPECT_TRUE(at::equal(a.spatial, b.spatial));
    EXPECT_FALSE(b.logits.defined());
    EXPECT_EQ(a.pool3.sizes(), at::IntArrayRef({1, kInceptionPool3Dim}));
    EXPECT_EQ(a.logits.sizes(), at::IntArrayRef({1, kInceptionLogitsDim}));
    EXPECT_EQ(a.spatial.sizes(), at::IntArrayRef({1, kInceptionSpatialDim}));
}

TEST(FidInception, PreprocessingQuantisesResizesAndScales) {
    const auto bytes = at::randint(0, 256, {2, 3, 16, 24}, at::kByte);
    const auto x = fid_preprocess(bytes);
    EXPECT_EQ(x.sizes(), at::IntArrayRef({2, 3, 299, 299}));
    EXPECT_GE(x.min().item<double>(), -1.0);
    EXPECT_LE(x.max().item<double>(), 1.0);
    // Float images are quantised as a PNG would be: the same input after / 255.
    EXPECT_TRUE(at::equal(fid_preprocess(bytes.to(at::kFloat).div(255)), x));
    // A constant image stays constant: 2 * 128 / 255 - 1.
    const auto grey = fid_preprocess(at::full({1, 3, 8, 8}, 128, at::kByte));
    EXPECT_NEAR(grey.max().item<double>(), 2 * 128 / 255.0 - 1, 1e-6);
    EXPECT_NEAR(grey.min().item<double>(), 2 * 128 / 255.0 - 1, 1e-6);
    EXPECT_NE(error_of<std::invalid_argument>([] {
                  fid_preprocess(at::zeros({2, 1, 8, 8}));
              }).find("expected RGB images (N, 3, H, W), got [2, 1, 8, 8]"),
              std::string::npos);
    EXPECT_NE(error_of<std::invalid_argument>([] {
                  fid_preprocess(at::zeros({1, 3, 8, 8}, at::kInt));
              }).find("uint8 or float"),
              std::string::npos);
}

}  // namespace
}  // namespace varscope

namespace varscope {
namespace {

// A torch.save'd state dict in pytorch-fid's module layout holding only the first layer
// (tools/parity/fid_parity.py writes it): read through the .pth reader, refused by name.
TEST(FidInception, APartialPthFileIsRefusedNamingFileAndTensor) {
    const std::string path = testing::source_dir() + "/tests/fixtures/inception_partial.pth";
    const auto e = testing::error_of<CheckpointError>([&] { FidInception::load(path); });
    EXPECT_NE(e.find(path), std::string::npos) << e;
    EXPECT_NE(e.find("missing tensor 'Conv2d_2a_3x3.bn.bias'"), std::string::npos) << e;
}

}  // namespace
}  // namespace varscope
