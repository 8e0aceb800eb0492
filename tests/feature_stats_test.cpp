// Distribution metrics (core/metrics/feature_stats.*) against closed forms; the reference-tool
// parity is tests/fid_parity_test.cpp.
#include "core/metrics/feature_stats.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

#include "core/io/npy.h"
#include "tests/error_of.h"
#include "tests/test_util.h"

namespace varscope {
namespace {

using testing::error_of;

FeatureStats diagonal(std::vector<double> mu, std::vector<double> var) {
    FeatureStats s;
    s.mu = at::tensor(mu, at::kDouble);
    s.sigma = at::diag(at::tensor(var, at::kDouble));
    return s;
}

TEST(FeatureStats, MeanAndUnbiasedCovariance) {
    const auto x = at::tensor({1.0, 2.0, 3.0, 6.0, 5.0, 10.0}, at::kFloat).reshape({3, 2});
    const auto s = feature_stats(x);
    EXPECT_EQ(s.count, 3);
    EXPECT_EQ(s.mu.scalar_type(), at::kDouble);
    EXPECT_NEAR(s.mu[0].item<double>(), 3.0, 1e-12);
    EXPECT_NEAR(s.mu[1].item<double>(), 6.0, 1e-12);
    // Column 0: 1, 3, 5 (var 4); column 1: 2, 6, 10 (var 16); covariance 8.
    EXPECT_NEAR(s.sigma[0][0].item<double>(), 4.0, 1e-12);
    EXPECT_NEAR(s.sigma[1][1].item<double>(), 16.0, 1e-12);
    EXPECT_NEAR(s.sigma[0][1].item<double>(), 8.0, 1e-12);
    EXPECT_NE(error_of<std::invalid_argument>([&] {
                  feature_stats(x.narrow(0, 0, 1));
              }).find("at least 2 samples"),
              std::string::npos);
}

TEST(FeatureStats, FrechetDistanceMatchesClosedForms) {
    // Diagonal covariances: sum (mu1 - mu2)^2 + (sqrt(v1) - sqrt(v2))^2.
    const auto a = diagonal({0, 1, 2}, {1, 4, 9}), b = diagonal({1, 1, 0}, {4, 4, 1});
    const double expected = (1 + 0 + 4) + (1 + 0 + 4);
    EXPECT_NEAR(frechet_distance(a, b), expected, 1e-9);
    EXPECT_NEAR(frechet_distance(b, a), expected, 1e-9);
    // A full covariance against itself.
    const auto x = at::randn({50, 6}, at::TensorOptions().dtype(at::kDouble));
    const auto s = feature_stats(x);
    EXPECT_NEAR(frechet_distance(s, s), 0.0, 1e-9);
    // Shifted copy: only the means differ.
    const auto t = feature_stats(x + 2.0);
    EXPECT_NEAR(frechet_distance(s, t), 6 * 4.0, 1e-8);
    // Fewer samples than features: the singular-value route (kept centred samples) and the
    // eigenvalue route (statistics only, as from a file) agree.
    const auto opt = at::TensorOptions().dtype(at::kDouble);
    auto p = feature_stats(at::randn({9, 30}, opt)),
         q = feature_stats(at::randn({12, 30}, opt).mul(2));
    ASSERT_TRUE(p.centred.defined());
    const double by_svd = frechet_distance(p, q);
    p.centred = at::Tensor();
    const double by_eig = frechet_distance(p, q);
    EXPECT_NEAR(by_svd, by_eig, 1e-6 * by_eig);
    EXPECT_FALSE(feature_stats(at::randn({31, 30}, opt)).centred.defined());
    const auto bad = diagonal({0, 0}, {1, 1});
    EXPECT_NE(error_of<std::invalid_argument>([&] {
                  frechet_distance(a, bad);
              }).find("feature sizes differ"),
              std::string::npos);
}

TEST(FeatureStats, InceptionScoreOfClearAndUniformPredictions) {
    // Uniform predictions: IS 1. Confident and evenly spread over C classes: IS C per split.
    EXPECT_NEAR(inception_score(at::zeros({8, 5}), 2).mean, 1.0, 1e-12);
    const auto confident = at::eye(4, at::kDouble).repeat({2, 1}).mul(60);  // 8 rows, 4 classes
    const auto is = inception_score(confident, 2);
    EXPECT_NEAR(is.mean, 4.0, 1e-6);
    EXPECT_NEAR(is.std, 0.0, 1e-6);
    EXPECT_EQ(is.splits, 2);
    // One class only in the second split: scores 4 and 1, np.std 1.5.
    auto mixed = confident.clone();
    mixed.narrow(0, 4, 4).zero_();
    mixed.narrow(0, 4, 4).select(1, 0).fill_(60);
    const auto m = inception_score(mixed, 2);
    EXPECT_NEAR(m.mean, 2.5, 1e-6);
    EXPECT_NEAR(m.std, 1.5, 1e-6);
    EXPECT_NE(error_of<std::invalid_argument>([&] {
                  inception_score(at::zeros({3, 5}), 4);
              }).find("3 images for 4 splits"),
              std::string::npos);
}

TEST(FeatureStats, PrecisionRecallOfOverlappingAndDisjointSets) {
    const auto real = at::randn({40, 5}, at::TensorOptions().dtype(at::kDouble));
    const auto same = precision_recall(real, real, 3);
    EXPECT_DOUBLE_EQ(same.precision, 1.0);
    EXPECT_DOUBLE_EQ(same.recall, 1.0);
    EXPECT_EQ(same.k, 3);
    const auto far = precision_recall(real + 100.0, real, 3);
    EXPECT_DOUBLE_EQ(far.precision, 0.0);
    EXPECT_DOUBLE_EQ(far.recall, 0.0);
    // Generated = half the real points (plus far ones): every generated point near the real
    // set lies in a real ball, half the generated points are far; the real points not copied
    // are outside the generated balls only when those are small: recall <= 1.
    const auto half = at::cat({real.narrow(0, 0, 20), real.narrow(0, 0, 20) + 100.0});
    const auto pr = precision_recall(half, real, 3);
    EXPECT_DOUBLE_EQ(pr.precision, 0.5);
    EXPECT_GE(pr.recall, 0.5);
    EXPECT_NE(error_of<std::invalid_argument>([&] {
                  precision_recall(real.narrow(0, 0, 3), real);
              }).find("more than k = 3"),
              std::string::npos);
}

TEST(FeatureStats, ReferenceStatisticsRoundTripAndShapeErrors) {
    testing::TempDir dir;
    const auto s = feature_stats(at::randn({10, 4}, at::TensorOptions().dtype(at::kDouble)));
    const auto sp = feature_stats(at::randn({10, 3}, at::TensorOptions().dtype(at::kDouble)));
    write_reference_stats(dir.file("ref.npz"), s, &sp);
    const auto back = read_reference_stats(dir.file("ref.npz"));
    EXPECT_TRUE(at::equal(back.mu, s.mu));
    EXPECT_TRUE(at::equal(back.sigma, s.sigma));
    EXPECT_TRUE(at::equal(read_reference_stats(dir.file("ref.npz"), true).sigma, sp.sigma));

    write_npz({{"mu", at::zeros({4}, at::kDouble)}, {"sigma", at::zeros({3, 3}, at::kDouble)}},
              dir.file("bad.npz"));
    const auto e = error_of<NpyError>([&] { read_reference_stats(dir.file("bad.npz")); });
    EXPECT_NE(e.find("bad.npz: 'sigma' has shape [3, 3], expected (4, 4)"), std::string::npos) << e;
    const auto no_s = error_of<NpyError>([&] { read_reference_stats(dir.file("bad.npz"), true); });
    EXPECT_NE(no_s.find("no array 'mu_s'"), std::string::npos) << no_s;
}

}  // namespace
}  // namespace varscope
