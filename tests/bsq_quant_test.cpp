// Infinity's BSQ quantizer, sampler side: codes of bit labels, the quantizer's interpolations and
// the sampler's accumulation against the official code's outputs on the tiny fixture
// (tests/fixtures/bsq_tiny, made by tools/parity/bsq_vae_parity.py --make-fixture).
#include "core/models/bsq_quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/io/checkpoint.h"
#include "tests/test_util.h"

using namespace varscope;

namespace {

const StateDict& expected() {
    static const StateDict e =
        load_checkpoint(varscope::testing::source_dir() + "/tests/fixtures/bsq_tiny/expected.pth");
    return e;
}

const at::Tensor& get(const std::string& name) {
    auto it = expected().find(name);
    if (it == expected().end()) throw std::runtime_error("fixture has no tensor " + name);
    return it->second;
}

bsq::BsqQuantConfig tiny_cfg() {
    bsq::BsqQuantConfig c;
    c.codebook_dim = get("config")[0].item<int64_t>();
    return c;
}

double max_abs(const at::Tensor& a, const at::Tensor& b) {
    return (a - b).abs().max().item<double>();
}

std::vector<bsq::Size3> schedule() {
    const at::Tensor s = get("schedule");
    std::vector<bsq::Size3> out;
    for (int64_t i = 0; i < s.size(0); ++i)
        out.push_back({s[i][0].item<int64_t>(), s[i][1].item<int64_t>(), s[i][2].item<int64_t>()});
    return out;
}

}  // namespace

TEST(BsqQuant, CodesOfBitLabelsAreTheOfficialOnes) {
    const auto cfg = tiny_cfg();
    const at::Tensor codes = bsq::bits_to_codes(get("bits"), cfg);
    ASSERT_EQ(codes.sizes(), get("codes").sizes());
    EXPECT_EQ(codes.scalar_type(), at::kFloat);
    EXPECT_TRUE(at::equal(codes.contiguous(), get("codes"))) << max_abs(codes, get("codes"));
    // Entries are +-1/sqrt(d), the sign given by the bit.
    const double s = 1.0 / std::sqrt(double(cfg.codebook_dim));
    EXPECT_NEAR(codes.abs().max().item<double>(), s, 1e-7);
    EXPECT_TRUE(at::equal(codes.gt(0).permute({0, 2, 3, 4, 1}), get("bits").gt(0)));
}

TEST(BsqQuant, AcceptsFourDimensionalBitsAndOtherIntegerTypes) {
    const auto cfg = tiny_cfg();
    const at::Tensor bits = get("bits");
    const at::Tensor ref = bsq::bits_to_codes(bits, cfg);
    EXPECT_TRUE(at::equal(bsq::bits_to_codes(bits.squeeze(1), cfg), ref));
    EXPECT_TRUE(at::equal(bsq::bits_to_codes(bits.to(at::kBool), cfg), ref));
    EXPECT_TRUE(at::equal(bsq::bits_to_codes(bits.to(at::kInt), cfg), ref));
}

TEST(BsqQuant, RejectsWrongShapes) {
    const auto cfg = tiny_cfg();
    EXPECT_THROW(bsq::bits_to_codes(at::zeros({2, 3, 7}, at::kLong), cfg), std::invalid_argument);
    EXPECT_THROW(bsq::bits_to_codes(at::zeros({2, 1, 3, 3, cfg.codebook_dim + 1}, at::kLong), cfg),
                 std::invalid_argument);
    EXPECT_THROW(bsq::interpolate(at::zeros({2, 3, 4, 4}), {1, 2, 2}, bsq::Interp::Area),
                 std::invalid_argument);
}

TEST(BsqQuant, InterpolationsAreTheOfficialModes) {
    const auto cfg = tiny_cfg();
    const at::Tensor x = get("interp_in");
    struct Case {
        const char* name;
        bsq::Size3 size;
        bool up;
    };
    for (const Case& c :
         {Case{"interp_up", {1, 10, 13}, true}, Case{"interp_up_small", {1, 4, 5}, true},
          Case{"interp_down", {1, 3, 4}, false}}) {
        const at::Tensor y =
            c.up ? bsq::interpolate_up(x, c.size, cfg) : bsq::interpolate_down(x, c.size, cfg);
        ASSERT_EQ(y.sizes(), get(c.name).sizes()) << c.name;
        EXPECT_LE(max_abs(y, get(c.name)), 1e-6) << c.name;
    }
}

// The sampler's loop (see bsq_quant.h) on the labels the official encoder produced.
TEST(BsqQuant, SamplerAccumulationMatchesOfficial) {
    const auto cfg = tiny_cfg();
    const auto sched = schedule();
    at::Tensor summed;
    for (size_t si = 0; si < sched.size(); ++si) {
        const at::Tensor codes = bsq::bits_to_codes(get("enc_bits." + std::to_string(si)), cfg);
        if (si + 1 != sched.size()) {
            const at::Tensor up = bsq::interpolate_up(codes, sched.back(), cfg);
            summed = summed.defined() ? summed + up : up;
            const at::Tensor next = bsq::interpolate_up(summed, sched[si + 1], cfg);
            const at::Tensor ref = get("sampler_next." + std::to_string(si));
            ASSERT_EQ(next.sizes(), ref.sizes());
            EXPECT_LE(max_abs(next, ref), 1e-6) << "scale " << si;
        } else {
            summed = summed + codes;
        }
    }
    EXPECT_LE(max_abs(summed, get("sampler_summed")), 1e-6);
}

TEST(BsqQuant, SpatialPatchifyRoundTrip) {
    bsq::BsqQuantConfig cfg = tiny_cfg();
    cfg.spatial_patchify = true;
    EXPECT_EQ(cfg.token_bits(), 4 * cfg.codebook_dim);
    const bsq::Size3 v = bsq::vae_scale({1, 3, 5}, cfg);
    EXPECT_EQ(v, (bsq::Size3{1, 6, 10}));
    const int64_t d = cfg.codebook_dim;
    const at::Tensor bits = at::randint(0, 2, {2, 3, 5, 4 * d}, at::kLong);
    const at::Tensor un = bsq::unpatchify_bits(bits);
    ASSERT_EQ(un.sizes(), (std::vector<int64_t>{2, 6, 10, d}));
    // pixel_shuffle: token channel c*4 + i*2 + j lands at latent (2y+i, 2x+j), channel c.
    EXPECT_EQ(un[1][2 * 2 + 1][2 * 4 + 0][3].item<int64_t>(),
              bits[1][2][4][3 * 4 + 1 * 2 + 0].item<int64_t>());
    const at::Tensor codes = bsq::bits_to_codes(un, cfg).squeeze(2);  // (B,d,6,10)
    const at::Tensor back = bsq::patchify_codes(codes);               // (B,4d,3,5)
    ASSERT_EQ(back.sizes(), (std::vector<int64_t>{2, 4 * d, 3, 5}));
    EXPECT_TRUE(at::equal(back.gt(0).permute({0, 2, 3, 1}), bits.gt(0)));
}

// The official trainer's BitwiseSelfCorrection.flip_requant (no label noise) on the fixture's
// encoder features: labels and concatenated next-scale inputs, without and with patchify.
TEST(BsqQuant, TeacherForcingMatchesOfficialTrainer) {
    for (const std::string tag : {"tf", "tfp"}) {
        bsq::BsqQuantConfig cfg = tiny_cfg();
        cfg.spatial_patchify = tag == "tfp";
        const at::Tensor s = get(tag + "_schedule");
        std::vector<bsq::Size3> sched;
        for (int64_t i = 0; i < s.size(0); ++i)
            sched.push_back(
                {s[i][0].item<int64_t>(), s[i][1].item<int64_t>(), s[i][2].item<int64_t>()});
        const bsq::TeacherForcing tf = bsq::teacher_forcing(get("enc_h"), sched, cfg);
        ASSERT_EQ(tf.bits.size(), sched.size());
        ASSERT_EQ(tf.next_inputs.size(), sched.size() - 1);
        for (size_t si = 0; si < sched.size(); ++si) {
            const at::Tensor labels = bsq::token_labels(tf.bits[si], cfg);
            const at::Tensor ref = get(tag + "_gt." + std::to_string(si));
            ASSERT_EQ(labels.sizes(), ref.sizes()) << tag << " scale " << si;
            EXPECT_TRUE(at::equal(labels, ref)) << tag << " scale " << si;
        }
        std::vector<at::Tensor> tokens;
        for (const at::Tensor& x : tf.next_inputs) tokens.push_back(bsq::token_inputs(x, cfg));
        const at::Tensor x = at::cat(tokens, 1);
        ASSERT_EQ(x.sizes(), get(tag + "_x").sizes()) << tag;
        EXPECT_LE(max_abs(x, get(tag + "_x")), 1e-6) << tag;
        // Without noise the labels are those of the VAE's own multi-scale encode.
        if (!cfg.spatial_patchify) {
            for (size_t si = 0; si < sched.size(); ++si) {
                EXPECT_TRUE(at::equal(tf.bits[si], get("enc_bits." + std::to_string(si))));
            }
        }
    }
}
