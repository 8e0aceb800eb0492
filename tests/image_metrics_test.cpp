// Quality metrics used by `compare`, the benches and the GUI.
#include "core/metrics/image_metrics.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

using namespace varscope;

TEST(ImageMetrics, PsnrMatchesTheDefinition) {
    auto a = at::full({2, 3, 8, 8}, 0.5);
    auto b = a.clone();
    b[1].add_(0.1);  // MSE 0.01 -> 20 dB
    const auto p = psnr(a, b);
    ASSERT_EQ(p.size(), 2u);
    EXPECT_TRUE(std::isinf(p[0]));
    EXPECT_NEAR(p[1], 20.0, 1e-5);  // float32 inputs: 0.5 + 0.1 is not exact
    EXPECT_THROW(psnr(a, at::zeros({2, 3, 8, 9})), std::invalid_argument);
}

TEST(ImageMetrics, SsimIsOneForEqualImagesAndFallsWithNoise) {
    at::manual_seed(0);
    auto a = at::rand({1, 3, 32, 32});
    EXPECT_NEAR(ssim(a, a)[0], 1.0, 1e-9);
    const double light = ssim(a, (a + 0.05 * at::randn_like(a)).clamp(0, 1))[0];
    const double heavy = ssim(a, (a + 0.3 * at::randn_like(a)).clamp(0, 1))[0];
    EXPECT_LT(light, 1.0);
    EXPECT_LT(heavy, light);
    // A constant shift keeps structure: SSIM stays well above that of heavy noise.
    EXPECT_GT(ssim(a * 0.5, a * 0.5 + 0.1)[0], heavy);
}

TEST(ImageMetrics, TokenAgreementCountsUndecodedTokensAsDifferent) {
    std::vector<at::Tensor> base = {at::tensor(std::vector<int64_t>{1, 2, 3, 4}).view({1, 4})};
    std::vector<at::Tensor> acc = {at::tensor(std::vector<int64_t>{1, 9, -1, 4}).view({1, 4})};
    const auto t = token_agreement(base, acc);
    ASSERT_EQ(t.size(), 1u);
    EXPECT_EQ(t[0].total, 4);
    EXPECT_EQ(t[0].identical, 2);
    EXPECT_EQ(t[0].undecoded, 1);
    EXPECT_DOUBLE_EQ(t[0].fraction(), 0.5);
    EXPECT_THROW(token_agreement(base, {}), std::invalid_argument);
}
