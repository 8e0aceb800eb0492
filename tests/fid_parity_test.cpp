// Parity with the reference tools (issue #34), from tests/fixtures/fid_parity.npz, which
// tools/parity/fid_parity.py writes with pytorch-fid 0.3.0 and torch-fidelity 0.4.0: the same
// formula weights in pytorch-fid's InceptionV3, 2 x 12 emoji64 images. The bars:
// features within 1e-5, FID within 1e-3 relative; IS and precision/recall as torch-fidelity.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "core/io/npy.h"
#include "core/metrics/feature_stats.h"
#include "core/metrics/fid_inception.h"
#include "tests/test_util.h"

namespace varscope {
namespace {

const std::map<std::string, at::Tensor>& fixture() {
    static const auto f = read_npz(testing::source_dir() + "/tests/fixtures/fid_parity.npz");
    return f;
}

double scalar(const char* name, int64_t i = 0) {
    return fixture().at(name).reshape({-1})[i].item<double>();
}

const InceptionFeatures& ours(const char* set) {
    static std::map<std::string, InceptionFeatures> cache;
    auto it = cache.find(set);
    if (it == cache.end()) {
        static const FidInception net(synthetic_inception_weights(), "formula");
        it = cache.emplace(set, net.features(fixture().at(std::string("images_") + set))).first;
    }
    return it->second;
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
    EXPECT_EQ(a.sizes(), b.sizes());
    return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

TEST(FidParity, InceptionFeaturesMatchPytorchFid) {
    for (const char* set : {"a", "b"}) {
        SCOPED_TRACE(set);
        const auto& f = ours(set);
        const std::string s = set;
        const double pool3 = max_abs_diff(f.pool3, fixture().at("pool3_" + s));
        const double logits = max_abs_diff(f.logits, fixture().at("logits_" + s));
        const double spatial = max_abs_diff(f.spatial, fixture().at("spatial_" + s));
        std::printf(
            "[parity] set %s: max |ours - pytorch-fid| pool3 %.3g, logits %.3g, "
            "spatial %.3g\n",
            set, pool3, logits, spatial);
        EXPECT_LE(pool3, 1e-5);
        EXPECT_LE(spatial, 1e-5);
        EXPECT_LE(logits,
                  1e-5 * std::max(1.0, fixture().at("logits_" + s).abs().max().item<double>()));
    }
}

TEST(FidParity, FrechetDistanceMatchesPytorchFid) {
    // Well-conditioned statistics (256 samples of 24 features) and pytorch-fid's own mean/cov.
    const auto x = feature_stats(fixture().at("feat_x")), y = feature_stats(fixture().at("feat_y"));
    EXPECT_LE(max_abs_diff(x.mu, fixture().at("mu_x")), 1e-12);
    EXPECT_LE(max_abs_diff(x.sigma, fixture().at("sigma_x")), 1e-10);
    const double fid_xy = frechet_distance(x, y);
    std::printf("[parity] FID(x, y) ours %.10g pytorch-fid %.10g\n", fid_xy, scalar("fid_xy"));
    EXPECT_NEAR(fid_xy, scalar("fid_xy"), 1e-6 * scalar("fid_xy"));

    // Inception pool3 of 12 vs 12 images: a singular covariance product (rank <= 11 in 2048),
    // the case where the square root is least stable. The fixture's features through the
    // 2048 x 2048 eigenvalue route (statistics only, as from a reference file), then ours end
    // to end (singular values of the kept samples).
    const double ref = scalar("fid_ab");
    auto stats_only = [](const at::Tensor& f) {
        auto s = feature_stats(f);
        s.centred = at::Tensor();
        return s;
    };
    const double from_fixture =
        frechet_distance(stats_only(fixture().at("pool3_a")), stats_only(fixture().at("pool3_b")));
    const double from_ours =
        frechet_distance(feature_stats(ours("a").pool3), feature_stats(ours("b").pool3));
    std::printf(
        "[parity] FID(a, b) pytorch-fid %.10g, ours on its features %.10g, ours end to "
        "end %.10g\n",
        ref, from_fixture, from_ours);
    EXPECT_NEAR(from_fixture, ref, 1e-3 * ref);
    EXPECT_NEAR(from_ours, ref, 1e-3 * ref);
}

TEST(FidParity, InceptionScoreMatchesTorchFidelity) {
    const auto z = inception_score(fixture().at("logits_z"), 5);
    EXPECT_NEAR(z.mean, scalar("isc_z", 0), 1e-9);
    EXPECT_NEAR(z.std, scalar("isc_z", 1), 1e-9);
    const auto a = inception_score(ours("a").logits, 4);
    std::printf("[parity] IS(a) ours %.10g +- %.3g, torch-fidelity %.10g +- %.3g\n", a.mean, a.std,
                scalar("isc_a", 0), scalar("isc_a", 1));
    EXPECT_NEAR(a.mean, scalar("isc_a", 0), 1e-6);
    EXPECT_NEAR(a.std, scalar("isc_a", 1), 1e-6);
}

TEST(FidParity, PrecisionRecallMatchesTorchFidelity) {
    const auto xy = precision_recall(fixture().at("feat_x"), fixture().at("feat_y"), 3);
    EXPECT_DOUBLE_EQ(xy.precision, scalar("prc_xy", 0));
    EXPECT_DOUBLE_EQ(xy.recall, scalar("prc_xy", 1));
    const auto ab = precision_recall(ours("a").pool3, ours("b").pool3, 3);
    EXPECT_DOUBLE_EQ(ab.precision, scalar("prc_ab", 0));
    EXPECT_DOUBLE_EQ(ab.recall, scalar("prc_ab", 1));
}

}  // namespace
}  // namespace varscope
