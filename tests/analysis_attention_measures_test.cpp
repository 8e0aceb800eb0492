// Attention measures against a direct float64 computation, the "keeps all" identities, the head
// and layer typing on constructed cases, and shape errors.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "core/analysis/attention_measures.h"

using namespace varscope::analysis;

namespace {

// Scales of 1, 4 and 9 tokens; queries are the last scale's 9 tokens.
const std::vector<int64_t> kTokens{1, 4, 9};

struct Case {
    at::Tensor q, k, v;
    KeepMask keep;
};

Case random_case(uint64_t seed) {
    at::manual_seed(seed);
    Case c;
    c.q = at::randn({3, 9, 8}, at::kDouble);
    c.k = at::randn({3, 14, 8}, at::kDouble);
    c.v = at::randn({3, 14, 8}, at::kDouble);
    c.keep.queries = at::rand({9}) > 0.3;
    c.keep.keys = at::rand({14}) > 0.2;
    c.keep.pairs = at::rand({3, 5, 5}) > 0.3;  // blocks of 2 queries x 3 keys, per head
    c.keep.block_q = 2;
    c.keep.block_k = 3;
    return c;
}

// The kept set and every measure, one scalar at a time in double.
struct Direct {
    double recall = 0, recall_computed = 0, error = 0, entropy = 0, vert = 0, density = 0;
    std::vector<double> by_scale = std::vector<double>(3, 0.0);
};
Direct direct(const Case& c, int64_t h, double scale) {
    const auto q = c.q[h], k = c.k[h], v = c.v[h];
    const int64_t lq = 9, lk = 14, d = 8;
    Direct r;
    double err2 = 0, norm2 = 0, computed = 0, sumsq = 0;
    std::vector<double> col(lk, 0.0);
    for (int64_t i = 0; i < lq; ++i) {
        std::vector<double> s(lk), p(lk);
        double mx = -1e300;
        for (int64_t j = 0; j < lk; ++j) {
            s[j] = (q[i] * k[j]).sum().item<double>() * scale;
            mx = std::max(mx, s[j]);
        }
        double z = 0;
        for (int64_t j = 0; j < lk; ++j) z += std::exp(s[j] - mx);
        const bool qk = c.keep.queries[i].item<bool>();
        computed += qk;
        double kept = 0;
        std::vector<bool> in(lk);
        for (int64_t j = 0; j < lk; ++j) {
            p[j] = std::exp(s[j] - mx) / z;
            in[j] = qk && c.keep.keys[j].item<bool>() && c.keep.pairs[h][i / 2][j / 3].item<bool>();
            if (in[j]) kept += p[j];
            r.density += in[j];
            if (p[j] > 0) r.entropy -= p[j] * std::log(p[j]);
            col[j] += p[j];
            sumsq += p[j] * p[j];
            r.by_scale[j < 1 ? 0 : j < 5 ? 1 : 2] += p[j] / lq;
        }
        r.recall += kept / lq;
        if (qk) r.recall_computed += kept;
        for (int64_t c2 = 0; c2 < d; ++c2) {
            double od = 0, os = 0;
            for (int64_t j = 0; j < lk; ++j) {
                od += p[j] * v[j][c2].item<double>();
                if (in[j] && kept > 0) os += p[j] / kept * v[j][c2].item<double>();
            }
            err2 += (os - od) * (os - od);
            norm2 += od * od;
        }
    }
    r.recall_computed /= computed;
    r.error = std::sqrt(err2 / norm2);
    r.entropy /= lq;
    r.density /= lq * lk;
    double c2sum = 0;
    for (double x : col) c2sum += x * x;
    r.vert = c2sum / (lq * sumsq);
    return r;
}

}  // namespace

TEST(AttentionMeasures, EqualADirectFloat64Computation) {
    for (uint64_t seed : {1, 2, 3}) {
        const auto c = random_case(seed);
        MeasureOptions opt;
        opt.query_chunk = 4;  // three chunks, the last one short
        opt.sink_scales = 1;
        opt.query_maps = true;
        const auto m = measure_block(2, 5, c.q, c.k, c.v, 0.35, kTokens, c.keep, opt);
        ASSERT_EQ(m.heads.size(), 3u);
        ASSERT_EQ(m.entropy_map.sizes(), (at::IntArrayRef{3, 9}));
        for (int64_t h = 0; h < 3; ++h) {
            const auto want = direct(c, h, 0.35);
            const auto& got = m.heads[h];
            EXPECT_EQ(got.head, h);
            EXPECT_EQ(got.layer, 5);
            EXPECT_NEAR(got.recall, want.recall, 1e-12) << "seed " << seed << " head " << h;
            EXPECT_NEAR(got.recall_computed, want.recall_computed, 1e-12);
            EXPECT_NEAR(got.output_error, want.error, 1e-12);
            EXPECT_NEAR(got.entropy, want.entropy, 1e-12);
            EXPECT_NEAR(got.entropy_normalized, want.entropy / std::log(14.0), 1e-12);
            EXPECT_NEAR(got.verticality, want.vert, 1e-12);
            EXPECT_NEAR(got.pair_density, want.density, 1e-12);
            ASSERT_EQ(got.mass_by_scale.size(), 3u);
            for (int j = 0; j < 3; ++j) EXPECT_NEAR(got.mass_by_scale[j], want.by_scale[j], 1e-12);
            EXPECT_NEAR(got.mass_sink, want.by_scale[0], 1e-12);
            EXPECT_NEAR(got.mass_rest, want.by_scale[1], 1e-12);
            EXPECT_NEAR(got.mass_local, want.by_scale[2], 1e-12);
            EXPECT_NEAR(m.recall_map[h].mean().item<double>(), want.recall, 1e-6);
            EXPECT_NEAR(m.entropy_map[h].mean().item<double>(), want.entropy, 1e-5);
        }
        EXPECT_NEAR(m.heads[0].query_kept, c.keep.queries.to(at::kDouble).mean().item<double>(),
                    1e-12);
    }
}

TEST(AttentionMeasures, Float32InputsAgreeWithFloat64) {
    const auto c = random_case(4);
    const auto d = measure_block(2, 0, c.q, c.k, c.v, 0.35, kTokens, c.keep);
    const auto f = measure_block(2, 0, c.q.to(at::kFloat), c.k.to(at::kFloat), c.v.to(at::kFloat),
                                 0.35, kTokens, c.keep);
    for (size_t h = 0; h < 3; ++h) {
        EXPECT_NEAR(f.heads[h].recall, d.heads[h].recall, 1e-5);
        EXPECT_NEAR(f.heads[h].output_error, d.heads[h].output_error, 1e-5);
        EXPECT_NEAR(f.heads[h].entropy, d.heads[h].entropy, 1e-5);
    }
}

TEST(AttentionMeasures, KeepingEverythingHasRecallOneAndNoError) {
    auto c = random_case(5);
    KeepMask all_true;  // defined but all true: the same as undefined
    all_true.queries = at::ones({9}, at::kBool);
    all_true.keys = at::ones({14}, at::kBool);
    all_true.pairs = at::ones({1, 1, 1}, at::kBool);
    all_true.block_q = 9;
    all_true.block_k = 14;
    for (const KeepMask& keep : {KeepMask{}, all_true}) {
        const auto m = measure_block(2, 0, c.q.to(at::kFloat), c.k.to(at::kFloat),
                                     c.v.to(at::kFloat), 0.35, kTokens, keep);
        for (const auto& h : m.heads) {
            EXPECT_EQ(h.recall, 1.0);
            EXPECT_EQ(h.recall_computed, 1.0);
            EXPECT_EQ(h.output_error, 0.0);
            EXPECT_EQ(h.query_kept, 1.0);
            EXPECT_EQ(h.pair_density, 1.0);
        }
    }
    // And dropping every query keeps nothing.
    KeepMask none;
    none.queries = at::zeros({9}, at::kBool);
    const auto m = measure_block(2, 0, c.q, c.k, c.v, 0.35, kTokens, none);
    EXPECT_EQ(m.heads[0].recall, 0.0);
    EXPECT_NEAR(m.heads[0].output_error, 1.0, 1e-12);
}

TEST(AttentionMeasures, SampledHeadsAreThoseHeadsMeasures) {
    const auto c = random_case(6);
    MeasureOptions opt;
    opt.heads = {2};
    const auto one = measure_block(2, 0, c.q, c.k, c.v, 0.35, kTokens, c.keep, opt);
    const auto all = measure_block(2, 0, c.q, c.k, c.v, 0.35, kTokens, c.keep);
    ASSERT_EQ(one.heads.size(), 1u);
    EXPECT_EQ(one.heads[0].head, 2);
    EXPECT_NEAR(one.heads[0].recall, all.heads[2].recall, 1e-12);
    EXPECT_NEAR(one.heads[0].output_error, all.heads[2].output_error, 1e-12);
    opt.heads = {3};
    EXPECT_THROW(measure_block(2, 0, c.q, c.k, c.v, 0.35, kTokens, c.keep, opt),
                 std::invalid_argument);
}

TEST(AttentionMeasures, NamesShapesThatDoNotFit) {
    const auto c = random_case(7);
    auto message = [&](const std::vector<int64_t>& tokens, const KeepMask& keep) {
        try {
            measure_block(2, 0, c.q, c.k, c.v, 0.35, tokens, keep);
        } catch (const std::invalid_argument& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    EXPECT_NE(message({1, 4, 8}, {}).find("holds 14 keys"), std::string::npos);
    EXPECT_NE(message({1, 4}, {}).find("scales 0..2"), std::string::npos);
    KeepMask bad;
    bad.keys = at::ones({13}, at::kBool);
    EXPECT_NE(message(kTokens, bad).find("key mask"), std::string::npos);
}

// Head 0: every query the same vector (vertical stripes, contextual); head 1: query i matches
// only key 5 + i, its own position at the current scale (a diagonal, structural).
TEST(HeadTyping, ContextualAndStructuralHeadsOnAConstructedCase) {
    const int64_t d = 16;
    auto k = at::zeros({2, 14, d}, at::kDouble);
    for (int64_t j = 0; j < 14; ++j) k[0][j][j % d] = 1.0;
    for (int64_t j = 0; j < 14; ++j) k[1][j][j % d] = 1.0;
    auto q = at::zeros({2, 9, d}, at::kDouble);
    q[0].select(1, 2).fill_(10.0);  // every query attends to key 2 (and 2 + 16, none)
    for (int64_t i = 0; i < 9; ++i) q[1][i][5 + i] = 10.0;
    const auto v = at::randn({2, 14, d}, at::kDouble);
    const auto m = measure_block(2, 3, q, k, v, 1.0, kTokens, {});
    EXPECT_GT(m.heads[0].verticality, 0.99);
    EXPECT_LT(m.heads[1].verticality, 0.2);
    // Head 1 looks at the map being drawn, head 0 at an earlier scale.
    EXPECT_GT(m.heads[1].mass_local, 0.99);
    EXPECT_LT(m.heads[0].mass_local, 0.01);
    // A 1x1 scale says nothing about patterns: typing skips it.
    auto tiny = m.heads[1];
    tiny.queries = 1;
    tiny.verticality = 1.0;
    const auto types = type_heads({m.heads[0], m.heads[1], tiny});
    ASSERT_EQ(types.size(), 2u);
    EXPECT_EQ(types[0].type, "contextual");
    EXPECT_EQ(types[1].type, "structural");
    EXPECT_EQ(types[1].head, 1);
    EXPECT_EQ(types[1].layer, 3);
}

TEST(HeadTyping, DrafterAndRefinerLayers) {
    std::vector<HeadMeasures> rs;
    for (int64_t layer : {0, 1})
        for (int64_t head : {0, 1}) {
            HeadMeasures r;
            r.layer = layer;
            r.head = head;
            r.queries = 16;
            r.mass_local = layer == 0 ? 0.2 + 0.1 * head : 0.7 + 0.1 * head;
            rs.push_back(r);
        }
    const auto layers = type_layers(rs);
    ASSERT_EQ(layers.size(), 2u);
    EXPECT_EQ(layers[0].type, "drafter");
    EXPECT_NEAR(layers[0].mass_local, 0.25, 1e-12);
    EXPECT_EQ(layers[1].type, "refiner");
    TypingRule strict;
    strict.local_threshold = 0.8;
    EXPECT_EQ(type_layers(rs, strict)[1].type, "drafter");
}
