// The LibTorch references of the sparse attention kernels (kernels/attention_reference.h) and the
// dispatch on CPU tensors. The references define the semantics the CUDA kernels are held to.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/attention_dispatch.h"
#include "kernels/attention_reference.h"
#include "kernels/cuda_path.h"
#include "kernels/sdpa_lse.h"
#include "kernels/token_ops.h"

namespace vk = varscope::kernels;

namespace {

at::Tensor randn64(at::IntArrayRef shape) {
    return at::randn(shape, at::kDouble);
}

// Textbook attention for one (b, h) restricted to mask, by explicit loops over rows.
at::Tensor naive_masked(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        const at::Tensor& mask) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
    auto out = at::zeros({q.size(0), v.size(1)}, at::kDouble);
    for (int64_t i = 0; i < q.size(0); ++i) {
        const auto keys = mask[i].nonzero().squeeze(1);
        if (keys.numel() == 0) continue;
        const auto s = at::mv(k.index_select(0, keys), q[i]) * scale;
        const auto p = at::softmax(s, 0);
        out[i] = at::mv(v.index_select(0, keys).t(), p);
    }
    return out;
}

}  // namespace

TEST(KernelsReference, BlockListsExpandToTokenMaskWithTails) {
    // 2 query blocks of 4 rows (last one partial: Lq = 6), key blocks of 3 (Lk = 7 -> 3 blocks).
    const auto idx = at::tensor({2, 0, -1, 1, -1, -1}, at::kInt).view({2, 3});
    const auto cnt = at::tensor({2, 1}, at::kInt);
    const auto m = vk::reference::token_mask_from_block_lists(idx, cnt, 4, 3, 6, 7);
    ASSERT_EQ(m.sizes(), (at::IntArrayRef{6, 7}));
    for (int64_t r = 0; r < 6; ++r) {
        for (int64_t c = 0; c < 7; ++c) {
            const int64_t kb = c / 3;
            const bool want = r < 4 ? (kb == 0 || kb == 2) : kb == 1;
            EXPECT_EQ(m[r][c].item<bool>(), want) << r << "," << c;
        }
    }
    // Entries past the count are ignored even when they are valid block ids.
    const auto idx2 = at::tensor({0, 2, 1, 1}, at::kInt).view({2, 2});
    const auto m2 =
        vk::reference::token_mask_from_block_lists(idx2, at::tensor({1, 1}, at::kInt), 4, 3, 6, 7);
    EXPECT_FALSE(m2[0][6].item<bool>());
    EXPECT_TRUE(m2[0][0].item<bool>());
}

TEST(KernelsReference, BlockSparseEqualsNaiveMaskedAttention) {
    c10::InferenceMode guard;
    at::manual_seed(3);
    const auto q = randn64({2, 3, 10, 8}), k = randn64({2, 3, 13, 8}), v = randn64({2, 3, 13, 8});
    const auto idx = at::tensor({0, 3, -1, 2, -1, -1, 1, 2, 3}, at::kInt).view({3, 3});
    const auto cnt = at::tensor({2, 0, 3}, at::kInt);  // middle block has no keys
    const auto r =
        vk::reference::block_sparse_attention(q, k, v, idx, cnt, 4, 4, std::nullopt, true);
    const auto mask = vk::reference::token_mask_from_block_lists(idx, cnt, 4, 4, 10, 13);
    for (int64_t b = 0; b < 2; ++b) {
        for (int64_t h = 0; h < 3; ++h) {
            const auto want = naive_masked(q[b][h], k[b][h], v[b][h], mask);
            EXPECT_TRUE(at::allclose(r.out[b][h], want, 1e-12, 1e-12));
        }
    }
    // Rows 4..7 have no keys: zero output, lse = -inf.
    EXPECT_TRUE(r.out.narrow(2, 4, 4).eq(0).all().item<bool>());
    EXPECT_TRUE(r.lse.narrow(2, 4, 4).isneginf().all().item<bool>());
    EXPECT_TRUE(r.lse.narrow(2, 0, 4).isfinite().all().item<bool>());
}

TEST(KernelsReference, GatheredEqualsBlockSparseOnTheSameKeys) {
    c10::InferenceMode guard;
    at::manual_seed(4);
    const auto q = randn64({1, 2, 9, 16}), k = randn64({1, 2, 11, 16}), v = randn64({1, 2, 11, 16});
    // Query blocks of 5: block 0 sees key blocks {0, 2} of size 4 -> keys 0..3, 8..10.
    const auto bidx = at::tensor({0, 2, 1, -1}, at::kInt).view({2, 2});
    const auto bcnt = at::tensor({2, 1}, at::kInt);
    const auto kidx =
        at::tensor({8, 1, 0, 10, 3, 2, 9, 4, 5, 6, 7, -1, -1, -1}, at::kInt).view({2, 7});
    const auto kcnt = at::tensor({7, 4}, at::kInt);
    const auto a =
        vk::reference::block_sparse_attention(q, k, v, bidx, bcnt, 5, 4, std::nullopt, true);
    const auto g = vk::reference::gathered_attention(q, k, v, kidx, kcnt, 5, std::nullopt, true);
    EXPECT_TRUE(at::allclose(a.out, g.out, 1e-12, 1e-12));
    EXPECT_TRUE(at::allclose(a.lse, g.lse, 1e-12, 1e-12));
}

TEST(KernelsReference, LseMergesDisjointKeySets) {
    c10::InferenceMode guard;
    at::manual_seed(5);
    const auto q = randn64({1, 1, 6, 8}), k = randn64({1, 1, 12, 8}), v = randn64({1, 1, 12, 8});
    const auto first = at::arange(0, 5, at::kInt).view({1, 5}),
               rest = at::arange(5, 12, at::kInt).view({1, 7});
    const auto a = vk::reference::gathered_attention(q, k, v, first, at::tensor({5}, at::kInt), 6,
                                                     std::nullopt, true);
    const auto b = vk::reference::gathered_attention(q, k, v, rest, at::tensor({7}, at::kInt), 6,
                                                     std::nullopt, true);
    const auto lse = at::logaddexp(a.lse, b.lse).to(at::kDouble);
    const auto merged = a.out * (a.lse.to(at::kDouble) - lse).exp().unsqueeze(-1) +
                        b.out * (b.lse.to(at::kDouble) - lse).exp().unsqueeze(-1);
    const auto full =
        vk::reference::masked_attention(q, k, v, at::ones({6, 12}, at::kBool), std::nullopt, false);
    EXPECT_TRUE(at::allclose(merged, full.out, 1e-6, 1e-6));  // lse is returned as float32
}

TEST(KernelsReference, ColumnSumIsProbabilityMassPerQueryBlock) {
    c10::InferenceMode guard;
    at::manual_seed(6);
    const auto q = randn64({2, 2, 7, 8}), k = randn64({2, 2, 9, 8});
    const auto cs = vk::reference::block_column_sum(q, k, 3, std::nullopt);  // blocks of 3, 3, 1
    ASSERT_EQ(cs.sizes(), (at::IntArrayRef{2, 2, 3, 9}));
    const auto p = at::softmax(at::matmul(q, k.transpose(-2, -1)) / std::sqrt(8.0), -1);
    EXPECT_TRUE(at::allclose(cs.select(2, 0), p.narrow(2, 0, 3).sum(2), 1e-12, 1e-12));
    EXPECT_TRUE(at::allclose(cs.select(2, 2), p.select(2, 6), 1e-12, 1e-12));
    EXPECT_TRUE(at::allclose(cs.sum(-1), at::tensor({3.0, 3.0, 1.0}, at::kDouble).expand({2, 2, 3}),
                             1e-12, 1e-12));
}

// The one-pass form: given each row's log-sum-exp, the sums need no softmax of their own.
TEST(KernelsReference, ColumnSumFromGivenLseEqualsTwoPass) {
    c10::InferenceMode guard;
    at::manual_seed(16);
    const double scale = 0.3;
    const auto q = randn64({2, 3, 11, 8}), k = randn64({2, 3, 17, 8});
    const auto lse = at::logsumexp(at::matmul(q, k.transpose(-2, -1)) * scale, -1);
    for (const int64_t block_q : {1, 4, 64}) {
        const auto two_pass = vk::reference::block_column_sum(q, k, block_q, scale);
        const auto one_pass = vk::reference::block_column_sum(q, k, block_q, scale, lse);
        ASSERT_EQ(one_pass.sizes(), two_pass.sizes());
        EXPECT_TRUE(at::allclose(one_pass, two_pass, 1e-12, 1e-12)) << "block_q " << block_q;
    }
    // The lse decides the result: a shifted one scales every row's mass by exp(-shift).
    const auto shifted = vk::reference::block_column_sum(q, k, 11, scale, lse + std::log(2.0));
    EXPECT_TRUE(at::allclose(shifted.sum(-1), at::full({2, 3, 1}, 5.5, at::kDouble), 1e-12));
    // A row without keys (lse = -inf) contributes nothing.
    auto holed = lse.clone();
    holed.select(2, 0).fill_(-std::numeric_limits<double>::infinity());
    const auto cs = vk::reference::block_column_sum(q, k, 11, scale, holed);
    EXPECT_TRUE(cs.isfinite().all().item<bool>());
    EXPECT_TRUE(at::allclose(cs.sum(-1), at::full({2, 3, 1}, 10.0, at::kDouble), 1e-12));
}

// The dispatch passes a given lse on (CPU: the reference) and names a wrong one.
TEST(KernelsReference, ColumnSumDispatchTakesAnLseAndChecksIt) {
    c10::InferenceMode guard;
    at::manual_seed(17);
    const auto q = at::randn({1, 2, 70, 64}), k = at::randn({1, 2, 90, 64});
    const double scale = 0.125;
    const auto lse = at::logsumexp(at::matmul(q, k.transpose(-2, -1)) * scale, -1);
    const auto two_pass = vk::block_column_sum(q, k, 64, scale);
    const auto one_pass = vk::block_column_sum(q, k, 64, scale, vk::KernelPath::Auto, {}, lse);
    EXPECT_TRUE(at::allclose(one_pass, two_pass, 1e-5, 1e-6));
    for (const auto& bad : {lse.narrow(2, 0, 69), lse.unsqueeze(-1), lse.to(at::kInt)}) {
        try {
            vk::block_column_sum(q, k, 64, scale, vk::KernelPath::Auto, {}, bad);
            ADD_FAILURE() << "accepted lse " << bad.sizes();
        } catch (const c10::Error& e) {
            EXPECT_NE(std::string(e.what()).find("lse"), std::string::npos) << e.what();
        }
    }
}

// SDPA with its log-sum-exp, on the CPU: the flash backend where SDPA takes it (same output, to
// the bit), math (no lse) where it is switched off. The lse is log(sum exp(scale * q.k)).
TEST(KernelsReference, SdpaWithLseIsSdpaPlusItsRowsLogSumExp) {
    c10::InferenceMode guard;
    at::manual_seed(18);
    for (const auto dtype : {at::kFloat, at::kBFloat16, at::kDouble}) {
        for (const std::optional<double> scale : {std::optional<double>(), std::optional(0.2)}) {
            // Lq < Lk: the queries of one scale over a prefix of cached keys.
            const auto q = at::randn({2, 3, 21, 64}).to(dtype);
            const auto k = at::randn({2, 3, 50, 64}).to(dtype), v = at::randn({2, 3, 50, 64});
            const auto got = vk::sdpa_with_lse(q, k, v.to(dtype), scale);
            const auto want = at::scaled_dot_product_attention(q, k, v.to(dtype), std::nullopt, 0.0,
                                                               false, scale);
            EXPECT_TRUE(got.out.equal(want)) << c10::toString(dtype);
            ASSERT_TRUE(got.lse.defined()) << "the CPU flash backend returns its lse";
            ASSERT_EQ(got.lse.sizes(), (at::IntArrayRef{2, 3, 21}));
            EXPECT_TRUE(got.lse.is_contiguous());
            EXPECT_EQ(got.lse.scalar_type(), dtype == at::kDouble ? at::kDouble : at::kFloat);
            const double s = scale.value_or(1.0 / 8.0);
            const auto ref = at::logsumexp(
                at::matmul(q.to(at::kDouble), k.to(at::kDouble).transpose(-2, -1)) * s, -1);
            EXPECT_LT((got.lse.to(at::kDouble) - ref).abs().max().item<double>(),
                      dtype == at::kDouble ? 1e-12 : 1e-4)
                << c10::toString(dtype);
            // The convention block_column_sum takes: the one-pass sums equal the two-pass ones.
            const auto one = vk::block_column_sum(q, k, 8, s, vk::KernelPath::Auto, {}, got.lse);
            const auto two = vk::block_column_sum(q, k, 8, s);
            EXPECT_TRUE(at::allclose(one, two, 1e-4, 1e-5)) << c10::toString(dtype);
        }
    }
    // Flash switched off: SDPA takes math, which has no lse.
    struct FlashOff {
        const bool was = at::globalContext().userEnabledFlashSDP();
        FlashOff() { at::globalContext().setSDPUseFlash(false); }
        ~FlashOff() { at::globalContext().setSDPUseFlash(was); }
    };
    const auto q = at::randn({1, 2, 9, 64}), k = at::randn({1, 2, 12, 64}),
               v = at::randn({1, 2, 12, 64});
    vk::AttentionResult got;
    at::Tensor want;
    {
        const FlashOff off;
        got = vk::sdpa_with_lse(q, k, v);
        want = at::scaled_dot_product_attention(q, k, v);
    }
    EXPECT_FALSE(got.lse.defined());
    EXPECT_TRUE(got.out.equal(want));
    EXPECT_THROW(vk::sdpa_with_lse(q, k.narrow(3, 0, 32), v), c10::Error);
    EXPECT_THROW(vk::sdpa_with_lse(q, k, v.to(at::kDouble)), c10::Error);
    EXPECT_THROW(vk::sdpa_with_lse(q[0], k[0], v[0]), c10::Error);
}

TEST(KernelsReference, DispatchOnCpuUsesTheReference) {
    c10::InferenceMode guard;
    at::manual_seed(7);
    const auto q = at::randn({1, 2, 70, 64}), k = at::randn({1, 2, 90, 64}),
               v = at::randn({1, 2, 90, 64});
    const auto idx = at::tensor({0, 1, 1, -1}, at::kInt).view({2, 2});
    const auto cnt = at::tensor({2, 1}, at::kInt);
    std::string why;
    EXPECT_FALSE(vk::cuda_attention_supported(q, 64, 64, {}, &why));
    EXPECT_FALSE(why.empty());
    vk::AttentionOptions o;
    o.out = at::full(q.sizes(), std::numeric_limits<float>::quiet_NaN());
    const auto got = vk::block_sparse_attention(q, k, v, idx, cnt, 64, 64, o);
    EXPECT_EQ(got.out.data_ptr(), o.out.data_ptr());
    const auto want =
        vk::reference::block_sparse_attention(q, k, v, idx, cnt, 64, 64, std::nullopt, false);
    EXPECT_TRUE(at::allclose(got.out, want.out));
    o.path = vk::KernelPath::Cuda;  // demanded but impossible on CPU tensors
    EXPECT_THROW(vk::block_sparse_attention(q, k, v, idx, cnt, 64, 64, o), c10::Error);
    EXPECT_THROW(vk::block_sparse_attention(q, k.narrow(3, 0, 32), v, idx, cnt, 64, 64),
                 c10::Error);
}

// ---- token ops (kernels/token_ops.h): FastVAR's pivotal scores, LazyVAR's update index

// The shared first checks of every CUDA dispatcher give the first reason that applies.
TEST(KernelsReference, CudaPathBlockerNamesTheFirstReason) {
    const auto cpu = at::zeros({2, 3});
    vk::KernelPolicy reference;
    reference.reference = true;
    const std::string forced = vk::cuda_path_blocker(reference, {cpu});
    const std::string off_device = vk::cuda_path_blocker({}, {cpu, cpu});
    if (!vk::cuda_kernels_built()) {
        EXPECT_EQ(forced, "this build has no CUDA kernels");
        EXPECT_EQ(off_device, "this build has no CUDA kernels");
    } else {
        EXPECT_EQ(forced, "the reference kernels are forced");
        EXPECT_EQ(off_device, "the inputs are not on a CUDA device");
    }
    std::string why = "untouched";
    EXPECT_FALSE(vk::unsupported(&why, "a reason"));
    EXPECT_EQ(why, "a reason");
    EXPECT_FALSE(vk::unsupported(nullptr, "no sink"));
}

TEST(KernelsReference, PivotalScoresAreSquaredDistanceToTheRowMean) {
    c10::InferenceMode guard;
    at::manual_seed(11);
    const auto x = at::randn({2, 5, 3});
    const auto got = vk::reference::pivotal_scores(x);
    ASSERT_EQ(got.sizes(), (at::IntArrayRef{2, 5}));
    ASSERT_EQ(got.scalar_type(), at::kFloat);
    const auto xd = x.to(at::kDouble);
    for (int64_t r = 0; r < 2; ++r) {
        for (int64_t n = 0; n < 5; ++n) {
            double want = 0.0;
            for (int64_t c = 0; c < 3; ++c) {
                double mean = 0.0;
                for (int64_t m = 0; m < 5; ++m) mean += xd[r][m][c].item<double>() / 5.0;
                const double d = xd[r][n][c].item<double>() - mean;
                want += d * d;
            }
            EXPECT_NEAR(got[r][n].item<double>(), want, 1e-5 * (1 + want)) << r << "," << n;
        }
    }
    // bfloat16 tokens are scored in float32: the same as scoring their float32 values.
    const auto xb = x.to(at::kBFloat16);
    EXPECT_TRUE(at::allclose(vk::reference::pivotal_scores(xb),
                             vk::reference::pivotal_scores(xb.to(at::kFloat))));
}

TEST(KernelsReference, PivotalSelectionKeepsTheTopScoresAscending) {
    c10::InferenceMode guard;
    // Row 0: token 3 is the outlier, then 0; row 1: tokens 1 and 4.
    auto x = at::zeros({2, 5, 2});
    x[0][3][0] = 5.0;
    x[0][0][1] = -3.0;
    x[1][4][1] = 4.0;
    x[1][1][0] = -6.0;
    const auto sel = vk::reference::pivotal_token_selection(x, 2);
    EXPECT_TRUE(sel.kept.equal(at::tensor({0, 3, 1, 4}, at::kLong).view({2, 2})));
    EXPECT_EQ(sel.scores.sizes(), (at::IntArrayRef{2, 5}));
    EXPECT_TRUE(vk::reference::pivotal_token_selection(x, 5).kept.equal(
        at::arange(5, at::kLong).expand({2, 5})));
    EXPECT_THROW(vk::reference::pivotal_token_selection(x, 0), c10::Error);
    EXPECT_THROW(vk::reference::pivotal_token_selection(x, 6), c10::Error);
    EXPECT_THROW(vk::reference::pivotal_scores(at::zeros({5, 2})), c10::Error);
}

// Ties go to the lower ids, NaN is above every number, -0 equals +0; ids ascending.
TEST(KernelsReference, TopRowsBreakTiesByTheLowerId) {
    c10::InferenceMode guard;
    const float nan = std::nanf("");
    const auto s = at::tensor({1.f, 3.f, 3.f, 0.f, 3.f, -0.f, nan, 2.f}).view({1, 8});
    auto ids = [&](int64_t k) {
        const auto t = vk::reference::top_rows(s, k);
        return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
    };
    EXPECT_EQ(ids(1), (std::vector<int64_t>{6}));
    EXPECT_EQ(ids(2), (std::vector<int64_t>{1, 6}));
    EXPECT_EQ(ids(3), (std::vector<int64_t>{1, 2, 6}));
    EXPECT_EQ(ids(6), (std::vector<int64_t>{0, 1, 2, 4, 6, 7}));
    EXPECT_EQ(ids(7), (std::vector<int64_t>{0, 1, 2, 3, 4, 6, 7}));  // +0 at 3 before -0 at 5
    EXPECT_EQ(ids(8), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
    // On the CPU the dispatcher is the reference.
    EXPECT_TRUE(vk::top_rows(s, 3).equal(vk::reference::top_rows(s, 3)));
    EXPECT_THROW(vk::reference::top_rows(s, 0), c10::Error);
    EXPECT_THROW(vk::reference::top_rows(s, 9), c10::Error);
    EXPECT_THROW(vk::top_rows(s.view({8}), 1), c10::Error);
}

TEST(KernelsReference, UpdateIndexIsOneMinusCosineAlongChannels) {
    c10::InferenceMode guard;
    at::manual_seed(12);
    const auto a = at::randn({2, 4, 3, 5});
    auto b = at::randn({2, 4, 3, 5});
    b.select(2, 0).select(2, 0).copy_(a.select(2, 0).select(2, 0) * 2.5);  // same direction
    b.select(2, 0).select(2, 1).copy_(-a.select(2, 0).select(2, 1));       // opposite
    b.select(2, 1).select(2, 0).zero_();                                   // zero vector
    const auto got = vk::reference::update_index(a, b);
    ASSERT_EQ(got.sizes(), (at::IntArrayRef{2, 3, 5}));
    EXPECT_NEAR(got[0][0][0].item<double>(), 0.0, 1e-6);
    EXPECT_NEAR(got[1][0][1].item<double>(), 2.0, 1e-6);
    EXPECT_NEAR(got[0][1][0].item<double>(), 1.0, 1e-6);
    for (int64_t n = 0; n < 2; ++n) {
        const auto x = a[n].select(1, 2).select(1, 3).to(at::kDouble);  // (C) at (2, 3)
        const auto y = b[n].select(1, 2).select(1, 3).to(at::kDouble);
        const double cos = (x.dot(y) / (x.norm() * y.norm())).item<double>();
        EXPECT_NEAR(got[n][2][3].item<double>(), 1.0 - cos, 1e-6);
    }
    EXPECT_THROW(vk::reference::update_index(a, b.narrow(1, 0, 3)), c10::Error);
}

TEST(KernelsReference, TokenOpsDispatchOnCpuUsesTheReference) {
    c10::InferenceMode guard;
    at::manual_seed(13);
    const auto x = at::randn({2, 9, 4});
    std::string why;
    EXPECT_FALSE(vk::cuda_token_ops_supported(x, {}, &why));
    EXPECT_FALSE(why.empty());
    const auto sel = vk::pivotal_token_selection(x, 4);
    const auto ref = vk::reference::pivotal_token_selection(x, 4);
    EXPECT_TRUE(sel.scores.equal(ref.scores));
    EXPECT_TRUE(sel.kept.equal(ref.kept));
    const auto a = at::randn({1, 3, 4, 4}), b = at::randn({1, 3, 4, 4});
    EXPECT_TRUE(vk::update_index(a, b).equal(vk::reference::update_index(a, b)));
    EXPECT_THROW(vk::pivotal_scores(x, vk::KernelPath::Cuda), c10::Error);
    EXPECT_THROW(vk::update_index(a, b, vk::KernelPath::Cuda), c10::Error);
}
