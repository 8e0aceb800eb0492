// The LibTorch references of the sparse attention kernels (kernels/attention_reference.h) and the
// dispatch on CPU tensors. The references define the semantics the CUDA kernels are held to.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/attention_dispatch.h"
#include "kernels/attention_reference.h"

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

TEST(KernelsReference, DispatchOnCpuUsesTheReference) {
    c10::InferenceMode guard;
    at::manual_seed(7);
    const auto q = at::randn({1, 2, 70, 64}), k = at::randn({1, 2, 90, 64}),
               v = at::randn({1, 2, 90, 64});
    const auto idx = at::tensor({0, 1, 1, -1}, at::kInt).view({2, 2});
    const auto cnt = at::tensor({2, 1}, at::kInt);
    std::string why;
    EXPECT_FALSE(vk::cuda_attention_supported(q, 64, 64, &why));
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
