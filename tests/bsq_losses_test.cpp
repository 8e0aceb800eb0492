// The BSQ quantizer losses (core/training/bsq_losses.h): commitment against the code, and the
// per-sample / codebook entropies on bit groups, checked on inputs whose entropies are known.
#include "core/training/bsq_losses.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/error_of.h"

using namespace varscope;
using varscope::testing::error_of;

namespace {

// x (N, d) of +-1 from a 0/1 bit table, as a (N,d,1,1,1) BSQ input, through bsq_quantize.
bsq::BsqQuantized quantize_rows(const at::Tensor& bits01, double scale = 1.0) {
    const at::Tensor x = bits01.to(at::kFloat).mul(2).sub(1).mul(scale);
    bsq::BsqQuantConfig q;
    q.codebook_dim = x.size(1);
    return bsq::bsq_quantize(x.view({x.size(0), x.size(1), 1, 1, 1}), q);
}

// All 2^d bit patterns as rows (N = 2^d, d).
at::Tensor all_patterns(int64_t d) {
    const at::Tensor k = at::arange(int64_t{1} << d, at::kLong).unsqueeze(1);
    return k.bitwise_right_shift(at::arange(d, at::kLong)).bitwise_and(1);
}

}  // namespace

TEST(BsqLosses, CommitmentIsTheDistanceToTheCode) {
    const at::Tensor x = at::randn({5, 8, 1, 2, 3}, at::detail::createCPUGenerator(1));
    bsq::BsqQuantConfig q;
    q.codebook_dim = 8;
    const bsq::BsqQuantized r = bsq::bsq_quantize(x, q);
    const at::Tensor z = x / x.norm(2, {1}, true);
    const at::Tensor code = z.sign() / std::sqrt(8.0);
    const double want = (z - code).pow(2).mean().item<double>();
    EXPECT_NEAR(bsq_scale_losses(r, BsqLossConfig{}).commitment.item<double>(), want, 1e-6);
}

TEST(BsqLosses, EntropiesOfConfidentBalancedAndCollapsedBits) {
    const BsqLossConfig cfg;  // inv_temperature 100: +-1/sqrt(4) codes are confident
    const BsqScaleLosses all = bsq_scale_losses(quantize_rows(all_patterns(4)), cfg);
    EXPECT_NEAR(all.per_sample_entropy.item<double>(), 0.0, 1e-3);
    EXPECT_NEAR(all.codebook_entropy.item<double>(), 4 * std::log(2.0), 1e-4);
    const BsqScaleLosses same = bsq_scale_losses(quantize_rows(at::ones({16, 4}, at::kLong)), cfg);
    EXPECT_NEAR(same.codebook_entropy.item<double>(), 0.0, 1e-3);
    // A hot temperature makes every position uncertain: per-sample entropy d ln 2.
    BsqLossConfig hot;
    hot.inv_temperature = 1e-3;
    EXPECT_NEAR(
        bsq_scale_losses(quantize_rows(all_patterns(4)), hot).per_sample_entropy.item<double>(),
        4 * std::log(2.0), 1e-4);
    // The aux loss is the documented weighted sum.
    const double want =
        0.25 * all.commitment.item<double>() +
        (all.per_sample_entropy.item<double>() - all.codebook_entropy.item<double>()) / 100.0 * 0.1;
    EXPECT_NEAR(all.aux.item<double>(), want, 1e-7);
}

// Groups see correlations that single bits cannot: bits 0 == 1 and 2 == 3 use 4 of the 16
// codes, 2 bits of codebook entropy, while per bit each looks balanced (4 bits).
TEST(BsqLosses, GroupsMeasureTheJointCodeUse) {
    const at::Tensor two = all_patterns(2);  // (4, 2)
    const at::Tensor tied =
        at::stack({two.select(1, 0), two.select(1, 0), two.select(1, 1), two.select(1, 1)}, 1);
    BsqLossConfig per_bit, pairs;
    pairs.group_size = 2;
    EXPECT_NEAR(bsq_scale_losses(quantize_rows(tied), per_bit).codebook_entropy.item<double>(),
                4 * std::log(2.0), 1e-4);
    EXPECT_NEAR(bsq_scale_losses(quantize_rows(tied), pairs).codebook_entropy.item<double>(),
                2 * std::log(2.0), 1e-4);
    // Independent bits: both agree.
    EXPECT_NEAR(
        bsq_scale_losses(quantize_rows(all_patterns(4)), pairs).codebook_entropy.item<double>(),
        4 * std::log(2.0), 1e-4);
    EXPECT_NEAR(
        bsq_scale_losses(quantize_rows(all_patterns(4)), pairs).per_sample_entropy.item<double>(),
        0.0, 1e-3);
}

TEST(BsqLosses, EntropyGradientReachesTheInput) {
    at::Tensor x = at::randn({4, 6, 1, 3, 3}, at::detail::createCPUGenerator(2)).mul(0.01);
    x.requires_grad_(true);
    bsq::BsqQuantConfig q;
    q.codebook_dim = 6;
    BsqLossConfig cfg;
    cfg.commitment_weight = 0;  // entropy terms alone
    cfg.inv_temperature = 1.0;
    bsq_scale_losses(bsq::bsq_quantize(x, q), cfg).aux.backward();
    ASSERT_TRUE(x.grad().defined());
    EXPECT_GT(x.grad().abs().sum().item<double>(), 0.0);
}

TEST(BsqLosses, ConfigErrorsNameTheKey) {
    EXPECT_EQ(BsqLossConfig::from_json({{"group_size", 3}}).group_size, 3);
    EXPECT_NE(error_of([] {
                  BsqLossConfig::from_json({{"gama", 1}});
              }).find("unknown field 'gama'"),
              std::string::npos);
    EXPECT_NE(error_of([] {
                  BsqLossConfig::from_json({{"zeta", -1}});
              }).find("'zeta'"),
              std::string::npos);
    EXPECT_NE(error_of([] {
                  BsqLossConfig::from_json({{"group_size", 0}});
              }).find("'group_size'"),
              std::string::npos);
    EXPECT_NE(error_of([] {
                  BsqLossConfig::from_json({{"inv_temperature", 0}});
              }).find("'inv_temperature'"),
              std::string::npos);
    BsqLossConfig c;
    c.group_size = 5;
    EXPECT_NE(error_of([&] { c.check_against(16); }).find("must divide codebook_dim 16"),
              std::string::npos);
}
