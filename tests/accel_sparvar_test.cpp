// SparVAR: CSLA masks (shape, sinks, local windows after rescaling, block OR, the paper's
// sparsity, block lists), CS4A pieces (column sums, Top-K, O_cache identity, index mapping), the
// policy (off settings are the baseline, on changes attention, probes) and config errors.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/accel/accel_config.h"
#include "core/accel/csla_mask.h"
#include "core/accel/probe_kinds.h"
#include "core/accel/resample.h"
#include "core/accel/sparvar.h"
#include "core/accel/sparvar_cs4a.h"
#include "core/accel/sparvar_csla.h"
#include "core/resources.h"
#include "kernels/block_list_order.h"
#include "kernels/upsample_add.h"
#include "tests/tiny_models.h"

using namespace varscope;
using varscope::testing::small_pipeline;

namespace {

const std::vector<int64_t> kInfinity{1, 2, 4, 6, 8, 12, 16, 20, 24, 32, 40, 48, 64};

int64_t prefix_tokens(const std::vector<int64_t>& pns, int64_t upto) {
    int64_t n = 0;
    for (int64_t s = 0; s <= upto; ++s) n += pns[s] * pns[s];
    return n;
}

// Brute-force reference of one mask entry, straight from the paper's formula.
bool reference_entry(const std::vector<int64_t>& pns, int64_t q_scale, const CslaSpec& spec,
                     int64_t qi, int64_t kj) {
    int64_t h = 0, begin = 0;
    while (kj >= begin + pns[h] * pns[h]) begin += pns[h] * pns[h], ++h;
    if (h < spec.sink_scales) return true;
    const int64_t pq = pns[q_scale], ph = pns[h];
    const int64_t x = qi / pq, y = qi % pq, xk = (kj - begin) / ph, yk = (kj - begin) % ph;
    const double xr = std::nearbyint(static_cast<double>(x) * ph / pq);
    const double yr = std::nearbyint(static_cast<double>(y) * ph / pq);
    const int64_t r = spec.window_for(q_scale, h) / 2;
    return std::abs(xr - xk) <= r && std::abs(yr - yk) <= r;
}

}  // namespace

TEST(SparVarCslaMask, ShapeAndSinkColumns) {
    CslaSpec spec{5, {3, 5, 7}, 3};
    auto m = csla_token_mask(kInfinity, 12, spec);
    ASSERT_EQ(m.scalar_type(), at::kBool);
    EXPECT_EQ(m.size(0), 4096);
    EXPECT_EQ(m.size(1), 10521);
    EXPECT_EQ(prefix_tokens(kInfinity, 4), 121);  // App. B: the first 5 scales hold 121 tokens
    EXPECT_TRUE(m.narrow(1, 0, 121).all().item<bool>());
    EXPECT_FALSE(m.narrow(1, 121, 10521 - 121).all().item<bool>());
    // Every query attends at least its own token (window at its own scale).
    for (int64_t qi : {0, 63, 2048, 4095}) EXPECT_TRUE(m[qi][10521 - 4096 + qi].item<bool>()) << qi;
}

TEST(SparVarCslaMask, MatchesPaperFormulaEntrywise) {
    const std::vector<int64_t> pns{1, 2, 3, 4, 6, 8};
    CslaSpec spec{2, {1, 3}, 3};
    for (int64_t qs = 0; qs < 6; ++qs) {
        auto m = csla_token_mask(pns, qs, spec);
        ASSERT_EQ(m.size(0), pns[qs] * pns[qs]);
        ASSERT_EQ(m.size(1), prefix_tokens(pns, qs));
        auto acc = m.accessor<bool, 2>();
        for (int64_t i = 0; i < m.size(0); ++i)
            for (int64_t j = 0; j < m.size(1); ++j)
                ASSERT_EQ(acc[i][j], reference_entry(pns, qs, spec, i, j))
                    << "scale " << qs << " q " << i << " k " << j;
    }
}

TEST(SparVarCslaMask, WindowsAreLocalAfterRescaling) {
    // Query scale 64 vs key scale 32: query (10, 20) maps to (5, 10); radius 1 -> a 3x3 patch.
    const std::vector<int64_t> pns{1, 32, 64};
    CslaSpec spec{1, {3, 1}, 1};  // key scale 32 window 3, own scale window 1
    auto m = csla_token_mask(pns, 2, spec);
    auto row = m[10 * 64 + 20].narrow(0, 1, 32 * 32).view({32, 32});
    EXPECT_EQ(row.sum().item<int64_t>(), 9);
    EXPECT_TRUE(row.narrow(0, 4, 3).narrow(1, 9, 3).all().item<bool>());
    auto own = m[10 * 64 + 20].narrow(0, 1 + 1024, 4096);
    EXPECT_EQ(own.sum().item<int64_t>(), 1);
    EXPECT_TRUE(own[10 * 64 + 20].item<bool>());
    // Ties round to even: query row 1 of 64 on a 32 grid is 0.5 -> 0; row 3 -> 1.5 -> 2.
    auto r1 = m[1 * 64 + 0].narrow(0, 1, 1024).view({32, 32});
    EXPECT_TRUE(r1[0][0].item<bool>() && r1[1][0].item<bool>() && !r1[2][0].item<bool>());
    auto r3 = m[3 * 64 + 0].narrow(0, 1, 1024).view({32, 32});
    EXPECT_TRUE(r3[1][0].item<bool>() && r3[3][0].item<bool>() && !r3[0][0].item<bool>());
}

TEST(SparVarCslaMask, WindowListIsRelativeToTheQueryScale) {
    CslaSpec spec{0, {3, 5, 7}, 1};
    EXPECT_EQ(spec.window_for(12, 12), 7);
    EXPECT_EQ(spec.window_for(12, 11), 5);
    EXPECT_EQ(spec.window_for(12, 10), 3);
    EXPECT_EQ(spec.window_for(12, 9), 1);
    EXPECT_EQ(spec.window_for(11, 11), 7);
    EXPECT_EQ(spec.window_for(11, 8), 1);
}

TEST(SparVarCslaMask, HugeWindowsAttendEverything) {
    const std::vector<int64_t> pns{1, 2, 3, 4, 6, 8};
    CslaSpec spec{1, {15}, 15};
    for (int64_t qs = 0; qs < 6; ++qs) {
        auto m = csla_token_mask(pns, qs, spec);
        EXPECT_TRUE(m.all().item<bool>()) << qs;
        EXPECT_EQ(mask_sparsity(m), 0.0);
    }
}

TEST(SparVarCslaMask, BadArgumentsThrow) {
    const std::vector<int64_t> pns{1, 2, 4};
    EXPECT_THROW(csla_token_mask(pns, 3, {}), std::invalid_argument);
    EXPECT_THROW(csla_token_mask(pns, -1, {}), std::invalid_argument);
    EXPECT_THROW(csla_token_mask(pns, 2, CslaSpec{0, {0}, 3}), std::invalid_argument);
    EXPECT_THROW(csla_block_mask(at::ones({4, 4}, at::kBool), 0, 2), std::invalid_argument);
}

TEST(SparVarCslaMask, BlockMaskIsOrOverBlocks) {
    auto tok = at::zeros({5, 7}, at::kBool);
    tok[0][0] = true;
    tok[4][6] = true;  // in the padded corner block
    tok[2][3] = true;
    auto b = csla_block_mask(tok, 2, 3);
    ASSERT_EQ(b.sizes(), at::IntArrayRef({3, 3}));
    auto expect = at::zeros({3, 3}, at::kBool);
    expect[0][0] = true;
    expect[2][2] = true;
    expect[1][1] = true;
    EXPECT_TRUE(at::equal(b, expect));
    // Every token of the block expansion covers the token mask.
    auto full = expand_block_mask(b, 2, 3, 5, 7);
    EXPECT_TRUE(at::logical_or(full, tok.logical_not()).all().item<bool>());
    EXPECT_EQ(full.sum().item<int64_t>(), 6 + 6 + 1);  // 2x3 + 2x3 + the padded corner (1x1)
}

TEST(SparVarCslaMask, InfinityLastScaleBlockSparsityMatchesTable1) {
    // Infinity last scale, sinks = scales 1..5 (1-based), windows [3, 5, 7], middle 3, block 64:
    // the issue measured 83.4 % (paper Table 1: 83.50 %, Table 4: 83.46 %).
    CslaSpec spec{5, {3, 5, 7}, 3};
    auto tok = csla_token_mask(kInfinity, 12, spec);
    auto blk = csla_block_mask(tok, 64, 64);
    ASSERT_EQ(blk.size(0), 64);
    ASSERT_EQ(blk.size(1), (10521 + 63) / 64);
    EXPECT_NEAR(mask_sparsity(blk), 0.834, 0.015);
    EXPECT_GT(mask_sparsity(tok), mask_sparsity(blk));  // blocks only add tokens
    // Table 4's window ablation (same sinks): [3,3,3] 86.77 %, [7,7,7] 81.18 %.
    EXPECT_NEAR(
        mask_sparsity(csla_block_mask(csla_token_mask(kInfinity, 12, {5, {3, 3, 3}, 3}), 64, 64)),
        0.8677, 0.015);
    EXPECT_NEAR(
        mask_sparsity(csla_block_mask(csla_token_mask(kInfinity, 12, {5, {7, 7, 7}, 3}), 64, 64)),
        0.8118, 0.015);
}

TEST(SparVarCslaMask, BlockListsMatchTheMask) {
    CslaSpec spec{3, {3, 5}, 3};
    const std::vector<int64_t> pns{1, 2, 3, 4, 6, 8, 12, 16};
    auto blk = csla_block_mask(csla_token_mask(pns, 7, spec), 16, 16);
    auto lists = csla_block_lists(blk);
    ASSERT_EQ(lists.indices.scalar_type(), at::kInt);
    ASSERT_EQ(lists.counts.scalar_type(), at::kInt);
    ASSERT_EQ(lists.indices.size(0), blk.size(0));
    EXPECT_EQ(lists.indices.size(1), blk.sum(1).max().item<int64_t>());
    const int64_t stride = lists.indices.size(1);
    std::vector<int32_t> ascending(static_cast<size_t>(blk.size(0) * stride), -1);
    for (int64_t u = 0; u < blk.size(0); ++u) {
        const int64_t n = lists.counts[u].item<int64_t>();
        EXPECT_EQ(n, blk[u].sum().item<int64_t>());
        std::vector<int64_t> ids;
        for (int64_t i = 0; i < stride; ++i) {
            const int64_t id = lists.indices[u][i].item<int64_t>();
            if (i >= n) {
                EXPECT_EQ(id, -1);
                continue;
            }
            EXPECT_TRUE(blk[u][id].item<bool>());
            ids.push_back(id);
        }
        std::sort(ids.begin(), ids.end());
        EXPECT_EQ(std::adjacent_find(ids.begin(), ids.end()), ids.end());  // each block once
        std::copy(ids.begin(), ids.end(), ascending.begin() + u * stride);
    }
    // The order is the kernels' (kernels/block_list_order.h) of the ascending lists.
    const std::vector<int32_t> counts(lists.counts.data_ptr<int32_t>(),
                                      lists.counts.data_ptr<int32_t>() + blk.size(0));
    kernels::order_block_lists_for_shared_reads(ascending.data(), counts.data(), blk.size(0),
                                                stride);
    EXPECT_TRUE(std::equal(ascending.begin(), ascending.end(), lists.indices.data_ptr<int32_t>()));
    auto empty = csla_block_lists(at::zeros({2, 3}, at::kBool));
    EXPECT_EQ(empty.indices.size(1), 0);
    EXPECT_EQ(empty.counts.sum().item<int64_t>(), 0);
}

// ---------------------------------------------------------------------------- CSLA attention

TEST(SparVarCsla, AllTrueMaskIsCloseToDense) {
    c10::InferenceMode guard;
    auto q = at::randn({2, 3, 16, 8}), k = at::randn({2, 3, 30, 8}), v = at::randn({2, 3, 30, 8});
    auto dense = attention_sdpa(q, k, v, 0.3);
    auto masked = sparvar::csla_attention(q, k, v, 0.3, at::ones({16, 30}, at::kBool));
    EXPECT_TRUE(at::allclose(masked, dense, 1e-5, 1e-6));
    auto ref = sparvar::masked_attention(q, k, v, 0.3, at::ones({16, 30}, at::kBool));
    EXPECT_TRUE(at::allclose(ref, dense, 1e-5, 1e-6));
}

TEST(SparVarCsla, MaskedAttentionEqualsAttentionOverTheKeptKeys) {
    c10::InferenceMode guard;
    auto q = at::randn({1, 2, 4, 8}), k = at::randn({1, 2, 10, 8}), v = at::randn({1, 2, 10, 8});
    auto attend = at::zeros({4, 10}, at::kBool);
    attend.narrow(1, 2, 5).fill_(true);
    auto sub = attention_sdpa(q, k.narrow(2, 2, 5), v.narrow(2, 2, 5), 0.5);
    EXPECT_TRUE(at::allclose(sparvar::csla_attention(q, k, v, 0.5, attend), sub, 1e-5, 1e-6));
}

TEST(SparVarCsla, BlockModeAttendsWholeActiveBlocks) {
    const std::vector<int64_t> pns{1, 2, 3, 4, 6, 8};
    auto m = sparvar::build_csla_scale_mask(pns, 5, {2, {1, 3}, 1}, 4, false);
    EXPECT_TRUE(at::equal(m.attend, expand_block_mask(m.block, 4, 4, 64, 130)));
    EXPECT_TRUE(at::logical_or(m.attend, m.token.logical_not()).all().item<bool>());
    EXPECT_GT(m.token_sparsity, mask_sparsity(m.attend));
    EXPECT_FALSE(m.dense());
    auto t = sparvar::build_csla_scale_mask(pns, 5, {2, {1, 3}, 1}, 4, true);
    EXPECT_TRUE(at::equal(t.attend, t.token));
}

// ---------------------------------------------------------------------------- CS4A pieces

TEST(SparVarCs4a, ColumnSumsAreBlockSumsOfDenseProbabilities) {
    auto probs = at::softmax(at::randn({2, 3, 10, 7}), -1);
    auto d = sparvar::block_column_sums(probs, 4);
    ASSERT_EQ(d.sizes(), (at::IntArrayRef{2, 3, 3, 7}));
    EXPECT_TRUE(at::allclose(d.select(2, 0), probs.narrow(2, 0, 4).sum(2)));
    EXPECT_TRUE(at::allclose(d.select(2, 1), probs.narrow(2, 4, 4).sum(2)));
    EXPECT_TRUE(at::allclose(d.select(2, 2), probs.narrow(2, 8, 2).sum(2)));  // partial block
    // Each block's column sums add up to its number of rows.
    EXPECT_NEAR(d[1][2][0].sum().item<float>(), 4.0f, 1e-5);
}

TEST(SparVarCs4a, TopKKeepsTheLargestColumnsAscending) {
    auto d = at::tensor({0.1f, 0.9f, 0.3f, 0.8f, 0.0f, 0.5f}).view({1, 1, 1, 6});
    auto idx = sparvar::top_k_indices(d, 3);
    EXPECT_TRUE(at::equal(idx.view({3}), at::tensor({1, 3, 5}, at::kLong)));
    auto sel = sparvar::selection_from_indices(idx, 6);
    EXPECT_TRUE(at::equal(sel.view({6}), at::tensor({0, 1, 0, 1, 0, 1}, at::kLong).to(at::kBool)));
    EXPECT_EQ(sparvar::top_k_count(0.2, 100), 20);
    EXPECT_EQ(sparvar::top_k_count(0.2, 101), 21);
    EXPECT_EQ(sparvar::top_k_count(0.001, 5), 1);
    EXPECT_EQ(sparvar::top_k_count(1.0, 5), 5);
}

// The loop adds O_cache with kernels::upsample_add over bilinear_taps: o + upsample_cache within
// float32 rounding (the taps are torch's weights; the GEMMs sum the same two products), rounded
// once to o's dtype.
TEST(SparVarCs4a, UpsampleAddIsTheSparseOutputPlusTheUpsampledCache) {
    c10::InferenceMode guard;
    at::manual_seed(5);
    for (const auto& [g, t] : std::vector<std::pair<int64_t, int64_t>>{{4, 6}, {4, 8}, {5, 5}}) {
        const auto cache = at::randn({2, 3, g * g, 8}), o = at::randn({2, 3, t * t, 8});
        const auto taps = bilinear_taps(g, t);
        const auto got = kernels::upsample_add(o, cache, taps.ids, taps.weights);
        const auto want = o + sparvar::upsample_cache(cache, g, t);
        ASSERT_EQ(got.sizes(), want.sizes());
        EXPECT_TRUE(at::allclose(got, want, 1e-6, 1e-6)) << (got - want).abs().max();
        const auto b16 = kernels::upsample_add(o.to(at::kBFloat16), cache, taps.ids, taps.weights);
        EXPECT_EQ(b16.scalar_type(), at::kBFloat16);
        EXPECT_TRUE(at::allclose(b16.to(at::kFloat), want, 1e-2, 1e-2));
    }
    // The residual as two outputs (SparVAR's kernel path keeps O_dense and O_sparse): the float32
    // cache their subtraction gives.
    {
        const auto dense = at::randn({2, 3, 16, 8}).to(at::kBFloat16);
        const auto sparse = at::randn({2, 3, 16, 8}).to(at::kBFloat16);
        const auto o = at::randn({2, 3, 36, 8}).to(at::kBFloat16);
        const auto taps = bilinear_taps(4, 6);
        EXPECT_TRUE(kernels::upsample_add_difference(o, dense, sparse, taps.ids, taps.weights)
                        .equal(kernels::upsample_add(o, at::sub(dense.to(at::kFloat), sparse),
                                                     taps.ids, taps.weights)));
        EXPECT_THROW(kernels::upsample_add_difference(o, dense, sparse.narrow(2, 0, 9), taps.ids,
                                                      taps.weights),
                     c10::Error);
    }
    // One tap where the grids agree: the cache itself.
    const auto same = bilinear_taps(5, 5);
    EXPECT_TRUE(same.weights.select(1, 1).eq(0).all().item<bool>());
    EXPECT_TRUE(same.ids.select(1, 0).equal(at::arange(5, at::kLong)));
    EXPECT_THROW(kernels::upsample_add(at::zeros({1, 1, 9, 2}), at::zeros({1, 1, 4, 2}), same.ids,
                                       same.weights),
                 c10::Error);  // taps for 5 rows, o has 3
    EXPECT_THROW(kernels::upsample_add(at::zeros({1, 1, 8, 2}), at::zeros({1, 1, 4, 2}), same.ids,
                                       same.weights),
                 c10::Error);  // 8 rows: no square grid
}

TEST(SparVarCs4a, CacheIdentityAtTheDecisionScale) {
    c10::InferenceMode guard;
    auto q = at::randn({2, 2, 16, 8}), k = at::randn({2, 2, 30, 8}), v = at::randn({2, 2, 30, 8});
    at::Tensor probs;
    auto dense = attention_eager(q, k, v, 0.4, {}, &probs);
    auto inds = sparvar::top_k_indices(sparvar::block_column_sums(probs, 5), 6);
    auto sel = sparvar::selection_from_indices(inds, 30);
    auto mask = sparvar::expand_query_blocks(sel, 5, 16);
    ASSERT_EQ(mask.sizes(), (at::IntArrayRef{2, 2, 16, 30}));
    auto sparse = sparvar::masked_attention(q, k, v, 0.4, mask);
    auto cache = dense - sparse;
    EXPECT_TRUE(at::allclose(sparse + cache, dense, 1e-6, 1e-6));
    EXPECT_GT(cache.abs().max().item<float>(), 1e-3);  // the Top-K set is not everything
    // Query rows 5..9 (block 1) use block 1's keys only.
    auto row = sparvar::masked_attention(q.narrow(2, 7, 1), k, v, 0.4, sel.narrow(2, 1, 1));
    EXPECT_TRUE(at::allclose(row, sparse.narrow(2, 7, 1), 1e-5, 1e-6));
}

TEST(SparVarCs4a, QueryBlockHomography) {
    EXPECT_EQ(sparvar::query_block_homography(4, 2), (std::vector<int64_t>{0, 0, 1, 1}));
    EXPECT_EQ(sparvar::query_block_homography(3, 1), (std::vector<int64_t>{0, 0, 0}));
    EXPECT_EQ(sparvar::query_block_homography(2, 2), (std::vector<int64_t>{0, 1}));
    // (g + 0.5) * 3 / 5 - 0.5: -0.2, 0.4, 1.0, 1.6, 2.2 -> 0, 0, 1, 2, 2
    EXPECT_EQ(sparvar::query_block_homography(5, 3), (std::vector<int64_t>{0, 0, 1, 2, 2}));
}

TEST(SparVarCs4a, RelativeScaleAlignmentDecomposesAlignsProjects) {
    const std::vector<int64_t> pns{1, 2, 4, 6, 8};            // begins 0, 1, 5, 21, 57; total 121
    auto map = sparvar::relative_scale_alignment(pns, 2, 4);  // S = 2 (pn 4), K = 4 (pn 8)
    ASSERT_EQ(map.numel(), 21);
    // Scale 0 -> scale 2 (pn 4): (0, 0) -> index 5.
    EXPECT_EQ(map[0].item<int64_t>(), 5);
    // Scale 1 (pn 2) -> scale 3 (pn 6): (1, 1) -> (3, 3) -> 21 + 3 * 6 + 3.
    EXPECT_EQ(map[1 + 3].item<int64_t>(), 21 + 21);
    // Scale 2 (pn 4) -> scale 4 (pn 8): (1, 3) -> (2, 6) -> 57 + 2 * 8 + 6.
    EXPECT_EQ(map[5 + 1 * 4 + 3].item<int64_t>(), 57 + 22);
    // The patch view covers every key of scales 2..4 and agrees with the point map.
    auto inv = sparvar::patch_alignment(pns, 2, 4);
    ASSERT_EQ(inv.numel(), 121);
    EXPECT_TRUE(inv.narrow(0, 0, 5).eq(-1).all().item<bool>());
    EXPECT_TRUE(inv.narrow(0, 5, 116).ge(0).all().item<bool>());
    for (int64_t j = 0; j < 21; ++j) EXPECT_EQ(inv[map[j].item<int64_t>()].item<int64_t>(), j);
    // Scale 4 (pn 8) from scale 2 (pn 4): each source cell owns a 2x2 patch.
    EXPECT_EQ(inv[57 + 3 * 8 + 5].item<int64_t>(), 5 + 1 * 4 + 2);
}

TEST(SparVarCs4a, MapSelectionAddsSinksAndFollowsTheHomography) {
    const std::vector<int64_t> pns{1, 2, 4, 6, 8};
    // Source: S = 2, N_S = 16, query block 8 -> G_S = 2; kv 21. Block 0 keeps key 5 + 0
    // (scale 2, (0, 0)); block 1 keeps key 5 + 15 (scale 2, (3, 3)).
    auto src = at::zeros({1, 1, 2, 21}, at::kBool);
    src[0][0][0][5] = true;
    src[0][0][1][20] = true;
    auto sel = sparvar::map_selection(src, pns, 2, 4, 8, /*sink_tokens=*/1, false);
    ASSERT_EQ(sel.sizes(), (at::IntArrayRef{1, 1, 8, 121}));  // G_K = 64 / 8
    for (int64_t g = 0; g < 8; ++g) {
        const int64_t expected_key = g < 4 ? 57 + 0 : 57 + 6 * 8 + 6;
        EXPECT_TRUE(sel[0][0][g][0].item<bool>()) << g;  // sink
        EXPECT_TRUE(sel[0][0][g][expected_key].item<bool>()) << g;
        EXPECT_EQ(sel[0][0][g].sum().item<int64_t>(), 2) << g;
    }
    auto patch = sparvar::map_selection(src, pns, 2, 4, 8, 1, true);
    EXPECT_EQ(patch[0][0][0].sum().item<int64_t>(), 1 + 4);  // sink + 2x2 patch
    EXPECT_TRUE(patch[0][0][0][57 + 1 * 8 + 1].item<bool>());
    auto lists = sparvar::selection_lists(sel);
    ASSERT_EQ(lists.sizes(), (at::IntArrayRef{1, 8, 2}));
    EXPECT_EQ(lists[0][7][1].item<int64_t>(), 57 + 54);
}

TEST(SparVarCs4a, UpsampledCacheKeepsConstantsAndShape) {
    auto c = at::full({2, 3, 16, 5}, 0.25f);
    auto up = sparvar::upsample_cache(c, 4, 8);
    ASSERT_EQ(up.sizes(), (at::IntArrayRef{2, 3, 64, 5}));
    EXPECT_TRUE(at::allclose(up, at::full_like(up, 0.25f)));
    // Token (x, y) of the 4x4 grid is channel-wise placed at the 8x8 positions (2x, 2y)..
    auto ramp = at::arange(16, at::kFloat).view({1, 1, 16, 1});
    auto r = sparvar::upsample_cache(ramp, 4, 4);
    EXPECT_TRUE(at::allclose(r, ramp));
}

// ---------------------------------------------------------------------------- policy

namespace {

VarSampleOptions options(std::vector<int64_t> classes = {3, 5}, uint64_t seed = 7) {
    return varscope::testing::exact_options(std::move(classes), seed);
}

// small_pipeline(): scales 1,2,3,4,6,8, depth 4; sparse_scales 2 -> decision scale 3 (pn 4).
nlohmann::json small_config() {
    return {{"enabled", true},    {"sparse_scales", 2}, {"sink_scales", 2}, {"windows", {1, 3}},
            {"middle_window", 1}, {"block", 4},         {"query_block", 4}, {"top_k", 0.2}};
}

VarSampleResult run(VarPipeline& p, const nlohmann::json& sparvar, const VarSampleOptions& o,
                    ProbeSink* probe = nullptr) {
    auto cfg = SparVarConfig::from_json(sparvar);
    auto hooks = make_sparvar(cfg, p.var_config(), probe);
    return p.generate(o, hooks.get(), probe);
}

void expect_same_tokens(const VarSampleResult& a, const VarSampleResult& b) {
    ASSERT_EQ(a.tokens.size(), b.tokens.size());
    for (size_t s = 0; s < a.tokens.size(); ++s)
        EXPECT_TRUE(at::equal(a.tokens[s], b.tokens[s])) << "scale " << s;
}

// Counts the attend() calls that SparVAR answered, behind a pass-through wrapper.
struct Answered : SamplingHooks {
    std::shared_ptr<SamplingHooks> inner;
    std::map<std::pair<int64_t, int64_t>, bool> answered;
    at::Tensor attend(const BlockContext& c, const at::Tensor& q, const at::Tensor& k,
                      const at::Tensor& v, double s) override {
        auto o = inner->attend(c, q, k, v, s);
        answered[{c.scale.scale, c.layer}] = o.defined();
        return o;
    }
};

}  // namespace

TEST(SparVarPolicy, OffSettingsReproduceTheBaseline) {
    auto p = small_pipeline();
    const auto base = p.generate(options());
    // Windows covering every key and Top-K = all keys: nothing is masked.
    auto cfg = small_config();
    cfg["windows"] = {15};
    cfg["middle_window"] = 15;
    cfg["top_k"] = 1.0;
    Answered probe_hooks;
    probe_hooks.inner = make_sparvar(SparVarConfig::from_json(cfg), p.var_config(), nullptr);
    auto off = p.generate(options(), &probe_hooks);
    expect_same_tokens(base, off);
    EXPECT_TRUE(off.images.equal(base.images));
    for (const auto& [key, answered] : probe_hooks.answered)
        EXPECT_FALSE(answered) << "scale " << key.first << " layer " << key.second;
    // CSLA alone (cs4a_fraction 0) with all-covering windows, CS4A alone with top_k 1.
    auto csla_only = cfg;
    csla_only["cs4a_fraction"] = 0.0;
    expect_same_tokens(base, run(p, csla_only, options()));
    auto cs4a_only = cfg;
    cs4a_only["cs4a_fraction"] = 1.0;
    expect_same_tokens(base, run(p, cs4a_only, options()));
}

TEST(SparVarPolicy, OnChangesAttentionOnlyAtTheSparseScales) {
    auto p = small_pipeline();
    const auto base = p.generate(options());
    Answered hooks;
    hooks.inner = make_sparvar(SparVarConfig::from_json(small_config()), p.var_config(), nullptr);
    auto on = p.generate(options(), &hooks);
    // Scales 0..3 are untouched except the CS4A layers' dense decision output at scale 3.
    for (int64_t s = 0; s < 3; ++s) EXPECT_TRUE(at::equal(on.tokens[s], base.tokens[s])) << s;
    // cs4a_fraction 0.6 of 4 layers -> layers 0, 1 CS4A (round(2.4) = 2), 2, 3 CSLA.
    EXPECT_TRUE(hooks.answered.at({3, 0}));
    EXPECT_TRUE(hooks.answered.at({3, 1}));
    EXPECT_FALSE(hooks.answered.at({3, 2}));
    EXPECT_FALSE(hooks.answered.at({2, 0}));
    for (int64_t s : {4, 5})
        for (int64_t l = 0; l < 4; ++l) EXPECT_TRUE(hooks.answered.at({s, l})) << s << "," << l;
    bool changed = false;
    for (int64_t s : {4, 5}) changed = changed || !at::equal(on.tokens[s], base.tokens[s]);
    EXPECT_TRUE(changed);
}

TEST(SparVarPolicy, BlockOutputsEqualTheMaskedReference) {
    // One CSLA layer's attention output (via attend) equals csla_attention with the block mask.
    auto p = small_pipeline();
    auto cfg = SparVarConfig::from_json(small_config());
    cfg.cs4a_fraction = 0.0;
    auto hooks = make_sparvar(cfg, p.var_config(), nullptr);
    struct Check : SamplingHooks {
        std::shared_ptr<SamplingHooks> inner;
        SparVarConfig cfg;
        int64_t checked = 0;
        at::Tensor attend(const BlockContext& c, const at::Tensor& q, const at::Tensor& k,
                          const at::Tensor& v, double s) override {
            auto o = inner->attend(c, q, k, v, s);
            if (c.scale.scale == 5) {
                auto m = sparvar::build_csla_scale_mask(c.scale.config.patch_nums, 5,
                                                        cfg.csla_spec(), cfg.block, false);
                auto expect = sparvar::masked_attention(q, k, v, s, m.attend);
                EXPECT_TRUE(at::allclose(o.to(at::kFloat), expect, 1e-4, 1e-5));
                EXPECT_FALSE(at::allclose(o, attention_sdpa(q, k, v, s), 1e-4, 1e-5));
                ++checked;
            }
            return o;
        }
    } check;
    check.inner = hooks;
    check.cfg = cfg;
    p.generate(options(), &check);
    EXPECT_EQ(check.checked, 4);
}

TEST(SparVarPolicy, Cs4aOutputIsSparseAttentionPlusUpsampledCache) {
    // Layer 0 (CS4A): recompute scale 5's output from scale 3's q, k, v with the pieces.
    auto p = small_pipeline();
    auto cfg = SparVarConfig::from_json(small_config());
    struct Capture : SamplingHooks {
        std::shared_ptr<SamplingHooks> inner;
        std::map<int64_t, std::vector<at::Tensor>> seen;  // scale -> q, k, v, out
        double scale = 0;
        at::Tensor attend(const BlockContext& c, const at::Tensor& q, const at::Tensor& k,
                          const at::Tensor& v, double s) override {
            auto o = inner->attend(c, q, k, v, s);
            if (c.layer == 0) seen[c.scale.scale] = {q, k, v, o}, scale = s;
            return o;
        }
    } cap;
    cap.inner = make_sparvar(cfg, p.var_config(), nullptr);
    p.generate(options(), &cap);
    ASSERT_TRUE(cap.seen.count(3) && cap.seen.count(5));
    const auto& d = cap.seen[3];
    const auto& t = cap.seen[5];
    at::Tensor probs;
    auto dense = attention_eager(d[0], d[1], d[2], cap.scale, {}, &probs);
    EXPECT_TRUE(at::allclose(d[3], dense));
    auto sums = sparvar::block_column_sums(probs, 4);
    auto sel = sparvar::selection_from_indices(sparvar::top_k_indices(sums, 6), 30);
    sel.narrow(3, 0, 5).fill_(true);  // sinks: scales 0, 1
    auto cache =
        dense.to(at::kFloat) - sparvar::masked_attention(d[0], d[1], d[2], cap.scale,
                                                         sparvar::expand_query_blocks(sel, 4, 16));
    const std::vector<int64_t> pns{1, 2, 3, 4, 6, 8};
    auto mapped = sparvar::map_selection(sel, pns, 3, 5, 4, 5, false);
    auto expect = sparvar::masked_attention(t[0], t[1], t[2], cap.scale,
                                            sparvar::expand_query_blocks(mapped, 4, 64)) +
                  sparvar::upsample_cache(cache, 4, 8);
    EXPECT_TRUE(at::allclose(t[3].to(at::kFloat), expect, 1e-4, 1e-5));
    // Without the cache the output is the sparse part alone.
    EXPECT_FALSE(at::allclose(t[3].to(at::kFloat), expect - sparvar::upsample_cache(cache, 4, 8),
                              1e-4, 1e-5));
}

TEST(SparVarPolicy, ProbesReportMasksAndSelections) {
    auto p = small_pipeline();
    ProbeRecorder rec;
    run(p, small_config(), options(), &rec);
    auto tok = rec.accel(probe_kinds::kCslaTokenMask);
    ASSERT_EQ(tok.size(), 2u);  // scales 4 and 5
    EXPECT_EQ(tok[1].scale, 5);
    EXPECT_EQ(tok[1].data.sizes(), (at::IntArrayRef{64, 130}));
    EXPECT_EQ(tok[1].values.at("cuda_kernels"), 0.0);  // the CPU: the exact masked reference
    auto blk = rec.accel(probe_kinds::kCslaBlockMask, 5);
    ASSERT_EQ(blk.size(), 1u);
    EXPECT_EQ(blk[0].data.sizes(), (at::IntArrayRef{16, 33}));
    EXPECT_EQ(blk[0].values.at("block"), 4.0);
    EXPECT_NEAR(blk[0].values.at("block_sparsity"), mask_sparsity(blk[0].data), 1e-12);
    EXPECT_GT(blk[0].values.at("token_sparsity"), 0.5);
    auto selected = rec.accel(probe_kinds::kCs4aSelected);
    ASSERT_EQ(selected.size(), 2u);  // CS4A layers 0, 1 at decision scale 3
    EXPECT_EQ(selected[0].scale, 3);
    EXPECT_EQ(selected[1].layer, 1);
    // pn 4 -> 16 queries, C 4 -> 4 blocks; kv 30, top_k 0.2 -> 6 keys; 2 heads.
    EXPECT_EQ(selected[0].data.sizes(), (at::IntArrayRef{2, 4, 6}));
    auto mapped = rec.accel(probe_kinds::kCs4aMapped);
    ASSERT_EQ(mapped.size(), 4u);  // 2 layers x scales 4, 5
    EXPECT_EQ(mapped[3].scale, 5);
    EXPECT_EQ(mapped[3].data.size(1), 16);  // 64 queries / 4
    // Sinks (scales 0, 1 = 5 tokens) first in every list.
    EXPECT_TRUE(at::equal(mapped[3].data.narrow(2, 0, 5)[0][0], at::arange(5, at::kLong)));
}

TEST(SparVarPolicy, EmbeddedModelOffIsBaselineAndDefaultsRun) {
    auto p = VarPipeline::load(embedded_model_files(), {});
    auto o = options({1891}, 3);
    o.cfg = 3.0;
    const auto base = p.generate(o);
    nlohmann::json off = {
        {"enabled", true}, {"windows", {31}}, {"middle_window", 31}, {"top_k", 1.0}};
    expect_same_tokens(base, run(p, off, o));
    // Paper defaults (block 128, C 192) on the 10-scale emoji model: decision scale 7.
    ProbeRecorder rec;
    auto on = run(p, {{"enabled", true}, {"block", 32}}, o, &rec);
    ASSERT_EQ(on.images.sizes(), base.images.sizes());
    EXPECT_TRUE(at::isfinite(on.images).all().item<bool>());
    auto blk = rec.accel(probe_kinds::kCslaBlockMask, 9);
    ASSERT_EQ(blk.size(), 1u);
    EXPECT_GT(blk[0].values.at("block_sparsity"), 0.2);
    EXPECT_EQ(rec.accel(probe_kinds::kCs4aSelected).front().scale, 7);
}

TEST(SparVarConfigErrors, NamesTheField) {
    auto p = small_pipeline();
    auto expect_error = [&](nlohmann::json j, const std::string& prefix) {
        try {
            make_sparvar(SparVarConfig::from_json(j), p.var_config(), nullptr);
            ADD_FAILURE() << "no error for " << j.dump();
        } catch (const AccelConfigError& e) {
            EXPECT_EQ(std::string(e.what()).rfind(prefix, 0), 0u) << e.what();
        }
    };
    expect_error({{"sparse_scales", 6}}, "sparvar.sparse_scales: must be in [1, 5]");
    expect_error({{"sink_scales", -1}}, "sparvar.sink_scales: must be in [0, 30]");
    // The defaults (sink_scales 5) on the 6-scale model, decision scale 3: sinks capped there,
    // so the preset runs on short schedules.
    EXPECT_NO_THROW(
        make_sparvar(SparVarConfig::from_json({{"enabled", true}, {"sparse_scales", 2}}),
                     p.var_config(), nullptr));
    expect_error({{"sink_scales", 2}, {"windows", {1, 1, 1, 1, 1, 1, 1}}},
                 "sparvar.windows: at most 6 entries");
    expect_error({{"top_k", 0.0}}, "sparvar.top_k: must be in [0.001, 1]");
    expect_error({{"windows", {3, 0}}}, "sparvar.windows[1]: must be in [1, 255]");
    expect_error({{"block", 0}}, "sparvar.block: must be in [1, 1024]");
    expect_error({{"typo", 1}}, "sparvar.typo: unknown field");
    EXPECT_NO_THROW(
        make_sparvar(SparVarConfig::from_json(small_config()), p.var_config(), nullptr));
    // Round trip.
    auto c = SparVarConfig::from_json(small_config());
    EXPECT_EQ(SparVarConfig::from_json(c.to_json()).to_json(), c.to_json());
    EXPECT_EQ(c.cs4a_layers(4), 2);
    EXPECT_EQ(SparVarConfig{}.cs4a_layers(16), 10);
}

// The kernel path's key lists hold exactly the masks' key sets: at the decision scale (Top-k
// plus sinks, Top-k ids among the sinks counted once) and after the point mapping to every later
// scale (several source keys on one target key counted once), ascending, padded with kv_len.
TEST(SparVarCs4a, KeyListsEqualTheMasks) {
    const std::vector<int64_t> pns{1, 2, 3, 4, 6, 8};
    const int64_t S = 3, C = 4, sinks = 5;  // sinks: scales 0, 1
    int64_t kv_s = 0;
    for (int64_t s = 0; s <= S; ++s) kv_s += pns[s] * pns[s];
    const int64_t G = (pns[S] * pns[S] + C - 1) / C;
    at::manual_seed(3);
    for (const int64_t top : std::vector<int64_t>{1, 6, kv_s}) {
        SCOPED_TRACE("top " + std::to_string(top));
        const auto sums = at::rand({2, 3, G, kv_s});
        const auto inds = sparvar::top_k_indices(sums, top);
        auto mask = sparvar::selection_from_indices(inds, kv_s);
        mask.narrow(3, 0, sinks).fill_(true);
        const auto lists = sparvar::decision_key_lists(inds, sinks, kv_s);
        EXPECT_EQ(lists.keys.size(3), top + sinks);
        EXPECT_TRUE(sparvar::selection_from_lists(lists, kv_s).equal(mask));
        EXPECT_TRUE(lists.counts.equal(mask.sum(-1)));
        // Kept keys first and ascending, then the padding.
        const auto keys = lists.keys;
        const auto w = keys.size(3);
        EXPECT_TRUE(keys.narrow(3, 1, w - 1).ge(keys.narrow(3, 0, w - 1)).all().item<bool>());
        EXPECT_TRUE(keys.lt(kv_s).sum(-1).equal(lists.counts));
        for (int64_t K = S + 1; K < static_cast<int64_t>(pns.size()); ++K) {
            SCOPED_TRACE("K " + std::to_string(K));
            const auto map = sparvar::selection_map(pns, S, K, C, G, false);
            EXPECT_TRUE(map.increasing);  // growing grids: what the CUDA key lists rely on
            const auto want = sparvar::map_selection(mask, map, sinks);
            const auto got = sparvar::map_key_lists(lists, map, sinks);
            EXPECT_TRUE(sparvar::selection_from_lists(got, map.kv_len).equal(want));
            EXPECT_TRUE(got.counts.equal(want.sum(-1)));
            EXPECT_TRUE(got.keys.lt(map.kv_len).sum(-1).equal(got.counts));
        }
    }
}
