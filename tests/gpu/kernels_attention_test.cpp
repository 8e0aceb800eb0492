// CUDA sparse attention kernels against their float64 reference, FlashAttention-style: on fresh
// random inputs the kernel's error must be at most twice what torch itself makes at the same
// precision. Outputs are poisoned (NaN) before each launch, lengths have tails, and every launch
// is followed by a synchronising check. Skips without CUDA or without kernels for the device.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/attention_dispatch.h"
#include "kernels/attention_reference.h"

namespace vk = varscope::kernels;

namespace {

bool kernels_runnable(std::string* why) {
    if (!torch::cuda::is_available()) {
        *why = "no CUDA device";
        return false;
    }
    const auto probe =
        at::zeros({1, 1, 64, 64}, at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA));
    return vk::cuda_attention_supported(probe, 64, 64, {}, why);
}

#define REQUIRE_KERNELS()                                   \
    do {                                                    \
        std::string why_;                                   \
        if (!kernels_runnable(&why_)) GTEST_SKIP() << why_; \
    } while (0)

at::TensorOptions cuda_opts(at::ScalarType t) {
    return at::TensorOptions().dtype(t).device(at::kCUDA);
}

// ||a - ref|| / ||ref|| in float64 over rows selected by row_mask (B, H, Lq) (all when undefined).
double rel_err(const at::Tensor& a, const at::Tensor& ref) {
    const auto x = a.to(at::kDouble).cpu(), y = ref.to(at::kDouble).cpu();
    EXPECT_TRUE(x.isfinite().all().item<bool>()) << "non-finite values (unwritten output?)";
    return ((x - y).norm() / y.norm()).item<double>();
}

double max_abs(const at::Tensor& a, const at::Tensor& ref) {
    return (a.to(at::kDouble).cpu() - ref.to(at::kDouble).cpu()).abs().max().item<double>();
}

void sync_and_check() {
    torch::cuda::synchronize();
}  // throws on an asynchronous CUDA error

struct Qkv {
    at::Tensor q, k, v;
};

// Random q/k/v on the GPU. Non-contiguous q (a transposed (B, L, H, D) buffer) when asked.
Qkv random_qkv(int64_t b, int64_t h, int64_t lq, int64_t lk, int64_t d, at::ScalarType t,
               bool strided_q = false) {
    Qkv r;
    r.q = strided_q ? at::randn({b, lq, h, d}, cuda_opts(t)).transpose(1, 2)
                    : at::randn({b, h, lq, d}, cuda_opts(t));
    r.k = at::randn({b, h, lk, d}, cuda_opts(t));
    r.v = at::randn({b, h, lk, d}, cuda_opts(t));
    return r;
}

struct Lists {
    at::Tensor indices, counts;  // int32 on the GPU
};

// Random block lists: every query block keeps the first key block (a sink) unless empty_rows,
// plus a random subset of the others in random order; some blocks get none when empty_rows.
Lists random_block_lists(int64_t nqb, int64_t nkb, double keep, bool empty_rows) {
    std::vector<std::vector<int32_t>> rows(nqb);
    int64_t widest = 1;
    for (int64_t u = 0; u < nqb; ++u) {
        const bool empty = empty_rows && u % 3 == 1;
        if (!empty) {
            const auto pick = at::rand({nkb}) < keep;
            for (int64_t j = 0; j < nkb; ++j)
                if (j == 0 || pick[j].item<bool>()) rows[u].push_back(static_cast<int32_t>(j));
            const auto perm = at::randperm(static_cast<int64_t>(rows[u].size()));
            std::vector<int32_t> shuffled;
            for (int64_t j = 0; j < perm.size(0); ++j)
                shuffled.push_back(rows[u][perm[j].item<int64_t>()]);
            rows[u] = shuffled;
        }
        widest = std::max<int64_t>(widest, static_cast<int64_t>(rows[u].size()) + 1);  // + padding
    }
    auto idx = at::full({nqb, widest}, -1, at::kInt);
    auto cnt = at::zeros({nqb}, at::kInt);
    for (int64_t u = 0; u < nqb; ++u) {
        for (size_t j = 0; j < rows[u].size(); ++j) idx[u][static_cast<int64_t>(j)] = rows[u][j];
        cnt[u] = static_cast<int32_t>(rows[u].size());
    }
    return {idx.cuda(), cnt.cuda()};
}

// Random distinct key rows per query block; counts vary (not multiples of 64), some are 0.
Lists random_key_lists(int64_t nqb, int64_t lk, double keep, bool empty_rows) {
    const int64_t widest = std::max<int64_t>(1, static_cast<int64_t>(lk * keep) + 7);
    auto idx = at::full({nqb, widest}, -1, at::kInt);
    auto cnt = at::zeros({nqb}, at::kInt);
    for (int64_t u = 0; u < nqb; ++u) {
        if (empty_rows && u % 3 == 1) continue;
        const int64_t n = std::min<int64_t>(lk, 1 + at::randint(widest, {1}).item<int64_t>());
        idx[u].narrow(0, 0, n).copy_(at::randperm(lk).narrow(0, 0, n).to(at::kInt));
        cnt[u] = static_cast<int32_t>(n);
    }
    return {idx.cuda(), cnt.cuda()};
}

at::Tensor poisoned_like(const at::Tensor& q) {
    return at::full(q.sizes(), std::numeric_limits<double>::quiet_NaN(), q.options()).contiguous();
}

// Compares a kernel result with the float64 reference and with torch's own error: SDPA on the
// same low-precision inputs with the equivalent boolean mask.
void expect_close_to_reference(const vk::AttentionResult& got, const Qkv& x, const at::Tensor& mask,
                               const std::string& what) {
    const auto ref = vk::reference::masked_attention(x.q.to(at::kDouble), x.k.to(at::kDouble),
                                                     x.v.to(at::kDouble), mask, std::nullopt, true);
    const auto has_keys = mask.any(1).to(at::kCUDA);  // (Lq)
    // torch's own result at this precision (rows without keys excluded: SDPA gives NaN there).
    const auto torch_out = at::scaled_dot_product_attention(x.q, x.k, x.v, mask.to(at::kCUDA));
    auto select = [&](const at::Tensor& t) {
        return t.index({"...", has_keys, at::indexing::Slice()});
    };
    const double torch_err = rel_err(select(torch_out), select(ref.out));
    const double err = rel_err(select(got.out), select(ref.out));
    EXPECT_LE(err, 2.0 * torch_err + 1e-6)
        << what << ": kernel " << err << " vs torch " << torch_err;
    EXPECT_LE(max_abs(select(got.out), select(ref.out)),
              4.0 * max_abs(select(torch_out), select(ref.out)) + 1e-4)
        << what;
    // Rows without any key are exactly zero with lse = -inf.
    const auto empty = has_keys.logical_not();
    if (empty.any().item<bool>()) {
        const auto rows = got.out.index({"...", empty, at::indexing::Slice()});
        EXPECT_TRUE(rows.eq(0).all().item<bool>()) << what << ": empty rows not zero";
        if (got.lse.defined()) {
            EXPECT_TRUE(got.lse.index({"...", empty}).isneginf().all().item<bool>()) << what;
        }
    }
    if (got.lse.defined()) {
        // torch's log-sum-exp at this precision: scores from a low-precision matmul.
        const double scale = 1.0 / std::sqrt(static_cast<double>(x.q.size(-1)));
        const auto s = at::matmul(x.q, x.k.transpose(-2, -1)).to(at::kFloat) * scale;
        const auto torch_lse = at::logsumexp(s.masked_fill(mask.to(at::kCUDA).logical_not(),
                                                           -std::numeric_limits<float>::infinity()),
                                             -1);
        const auto sel_lse = [&](const at::Tensor& t) { return t.index({"...", has_keys}); };
        const double lse_err = max_abs(sel_lse(got.lse), sel_lse(ref.lse));
        EXPECT_LE(lse_err, 2.0 * max_abs(sel_lse(torch_lse), sel_lse(ref.lse)) + 1e-4) << what;
    }
}

struct Shape {
    int64_t b, h, lq, lk, d;
};

const std::vector<Shape> kShapes = {
    {1, 2, 64, 64, 64},      // exact tiles
    {2, 3, 200, 333, 64},    // tails on both axes
    {1, 2, 130, 1000, 128},  // one row past a tile, long keys
    {2, 1, 17, 70, 128},     // shorter than one tile
};

}  // namespace

// The sm_80 kernels (KernelPolicy::sm90_attention off: what every non-Hopper GPU runs); the
// sm_90a ones: kernels_csla_sm90_test.cpp.
TEST(KernelsAttentionGpu, BlockSparseMatchesReference) {
    REQUIRE_KERNELS();
    c10::InferenceMode guard;
    at::manual_seed(11);
    for (const auto dtype : {at::kBFloat16, at::kHalf}) {
        for (const auto& s : kShapes) {
            for (const int64_t block : {64, 128}) {
                for (const bool strided : {false, true}) {
                    const auto x = random_qkv(s.b, s.h, s.lq, s.lk, s.d, dtype, strided);
                    const int64_t nqb = (s.lq + block - 1) / block,
                                  nkb = (s.lk + block - 1) / block;
                    const auto lists = random_block_lists(nqb, nkb, 0.4, block == 128);
                    vk::AttentionOptions o;
                    o.path = vk::KernelPath::Cuda;
                    o.return_lse = true;
                    o.out = poisoned_like(x.q);
                    o.policy.sm90_attention = false;
                    const auto got = vk::block_sparse_attention(x.q, x.k, x.v, lists.indices,
                                                                lists.counts, block, block, o);
                    sync_and_check();
                    EXPECT_EQ(got.out.data_ptr(), o.out.data_ptr());
                    const auto mask = vk::reference::token_mask_from_block_lists(
                        lists.indices, lists.counts, block, block, s.lq, s.lk);
                    expect_close_to_reference(
                        got, x, mask,
                        std::string(c10::toString(dtype)) + " lq=" + std::to_string(s.lq) +
                            " lk=" + std::to_string(s.lk) + " d=" + std::to_string(s.d) +
                            " block=" + std::to_string(block) + (strided ? " strided" : ""));
                }
            }
        }
    }
}

TEST(KernelsAttentionGpu, BlockSparseMixedBlockSizesAndAllActiveEqualsDense) {
    REQUIRE_KERNELS();
    c10::InferenceMode guard;
    at::manual_seed(12);
    const auto x = random_qkv(1, 4, 300, 777, 128, at::kBFloat16);
    // block_q 128, block_k 64 lists.
    const auto lists = random_block_lists(3, 13, 0.3, false);
    vk::AttentionOptions o;
    o.path = vk::KernelPath::Cuda;
    o.out = poisoned_like(x.q);
    const auto got =
        vk::block_sparse_attention(x.q, x.k, x.v, lists.indices, lists.counts, 128, 64, o);
    sync_and_check();
    expect_close_to_reference(
        got, x,
        vk::reference::token_mask_from_block_lists(lists.indices, lists.counts, 128, 64, 300, 777),
        "bq=128 bk=64");
    // Every block active: dense attention.
    auto all = at::arange(13, at::kInt).unsqueeze(0).repeat({5, 1}).cuda();
    auto cnt = at::full({5}, 13, at::kInt).cuda();
    o.out = poisoned_like(x.q);
    const auto dense = vk::block_sparse_attention(x.q, x.k, x.v, all, cnt, 64, 64, o);
    sync_and_check();
    expect_close_to_reference(dense, x, at::ones({300, 777}, at::kBool), "all active");
}

TEST(KernelsAttentionGpu, GatheredMatchesReference) {
    REQUIRE_KERNELS();
    c10::InferenceMode guard;
    at::manual_seed(13);
    // sm90: the sm_90a kernel on Hopper for bf16 (fp16 and other GPUs run the sm_80 one).
    for (const bool sm90 : {false, true}) {
        for (const auto dtype : {at::kBFloat16, at::kHalf}) {
            for (const auto& s : kShapes) {
                for (const int64_t block_q : {64, 192}) {
                    const auto x = random_qkv(s.b, s.h, s.lq, s.lk, s.d, dtype, s.b == 2);
                    const int64_t nqb = (s.lq + block_q - 1) / block_q;
                    const auto lists = random_key_lists(nqb, s.lk, 0.3, nqb > 2);
                    vk::AttentionOptions o;
                    o.path = vk::KernelPath::Cuda;
                    o.return_lse = true;
                    o.out = poisoned_like(x.q);
                    o.policy.sm90_attention = sm90;
                    const auto got = vk::gathered_attention(x.q, x.k, x.v, lists.indices,
                                                            lists.counts, block_q, o);
                    sync_and_check();
                    const auto mask = vk::reference::token_mask_from_key_lists(
                        lists.indices, lists.counts, block_q, s.lq, s.lk);
                    expect_close_to_reference(
                        got, x, mask,
                        std::string(c10::toString(dtype)) + " gathered lq=" + std::to_string(s.lq) +
                            " lk=" + std::to_string(s.lk) + " d=" + std::to_string(s.d) +
                            " bq=" + std::to_string(block_q) + (sm90 ? " sm90" : " sm80"));
                }
            }
        }
    }
}

TEST(KernelsAttentionGpu, ColumnSumMatchesReference) {
    REQUIRE_KERNELS();
    c10::InferenceMode guard;
    at::manual_seed(14);
    for (const auto dtype : {at::kBFloat16, at::kHalf}) {
        for (const auto& s : kShapes) {
            for (const int64_t block_q : {64, 192}) {
                const auto x = random_qkv(s.b, s.h, s.lq, s.lk, s.d, dtype, true);
                const auto got =
                    vk::block_column_sum(x.q, x.k, block_q, std::nullopt, vk::KernelPath::Cuda);
                sync_and_check();
                const auto ref = vk::reference::block_column_sum(
                    x.q.to(at::kDouble), x.k.to(at::kDouble), block_q, std::nullopt);
                // torch at this precision: scores from a low-precision matmul, softmax in float32.
                const double scale = 1.0 / std::sqrt(static_cast<double>(s.d));
                const auto p =
                    at::softmax(at::matmul(x.q, x.k.transpose(-2, -1)).to(at::kFloat) * scale, -1);
                const int64_t nqb = (s.lq + block_q - 1) / block_q;
                const auto torch_cs = at::constant_pad_nd(p, {0, 0, 0, nqb * block_q - s.lq})
                                          .view({s.b, s.h, nqb, block_q, s.lk})
                                          .sum(3);
                ASSERT_EQ(got.sizes(), ref.sizes());
                const double err = rel_err(got, ref), torch_err = rel_err(torch_cs, ref);
                EXPECT_LE(err, 2.0 * torch_err + 1e-6) << c10::toString(dtype) << " lq=" << s.lq
                                                       << " lk=" << s.lk << " bq=" << block_q;
                // Each block's mass is its number of rows.
                const auto mass = got.sum(-1).to(at::kDouble).cpu();
                for (int64_t u = 0; u < nqb; ++u) {
                    const double rows = static_cast<double>(std::min(block_q, s.lq - u * block_q));
                    EXPECT_NEAR(mass.index({0, 0, u}).item<double>(), rows, 1e-3 * rows);
                }
            }
        }
    }
}

TEST(KernelsAttentionGpu, LseMergeOfTwoGatheredHalvesEqualsWhole) {
    REQUIRE_KERNELS();
    c10::InferenceMode guard;
    at::manual_seed(15);
    // CS4A combines attention over selected keys with attention over the rest via the lse.
    const auto x = random_qkv(1, 2, 128, 500, 64, at::kBFloat16);
    const auto perm = at::randperm(500).to(at::kInt);
    const auto a_idx = perm.narrow(0, 0, 180).unsqueeze(0).repeat({2, 1}).cuda();
    const auto b_idx = perm.narrow(0, 180, 320).unsqueeze(0).repeat({2, 1}).cuda();
    const auto a_cnt = at::full({2}, 180, at::kInt).cuda(),
               b_cnt = at::full({2}, 320, at::kInt).cuda();
    vk::AttentionOptions o;
    o.path = vk::KernelPath::Cuda;
    o.return_lse = true;
    const auto a = vk::gathered_attention(x.q, x.k, x.v, a_idx, a_cnt, 64, o);
    const auto b = vk::gathered_attention(x.q, x.k, x.v, b_idx, b_cnt, 64, o);
    sync_and_check();
    const auto lse = at::logaddexp(a.lse, b.lse);
    const auto merged = a.out.to(at::kFloat) * (a.lse - lse).exp().unsqueeze(-1) +
                        b.out.to(at::kFloat) * (b.lse - lse).exp().unsqueeze(-1);
    const auto ref = vk::reference::masked_attention(
        x.q.to(at::kDouble), x.k.to(at::kDouble), x.v.to(at::kDouble),
        at::ones({128, 500}, at::kBool), std::nullopt, true);
    EXPECT_LT(rel_err(merged, ref.out), 2e-2);
    EXPECT_LT(max_abs(lse, ref.lse), 2e-2);
}

TEST(KernelsAttentionGpu, DispatchFallsBackAndSwitchForcesReference) {
    REQUIRE_KERNELS();
    c10::InferenceMode guard;
    at::manual_seed(16);
    const auto x = random_qkv(1, 2, 100, 150, 64, at::kBFloat16);
    const auto lists = random_block_lists(2, 3, 0.5, false);
    const auto cuda_out =
        vk::block_sparse_attention(x.q, x.k, x.v, lists.indices, lists.counts, 64, 64);
    vk::AttentionOptions forced;
    forced.policy.reference = true;
    std::string why;
    EXPECT_FALSE(vk::cuda_attention_supported(x.q, 64, 64, forced.policy, &why));
    EXPECT_NE(why.find("forced"), std::string::npos);
    const auto ref_out =
        vk::block_sparse_attention(x.q, x.k, x.v, lists.indices, lists.counts, 64, 64, forced);
    EXPECT_LT(rel_err(cuda_out.out, ref_out.out), 2e-2);
    // Unsupported shapes (head dim 32, block 32) fall back to the reference under Auto ...
    const auto small = random_qkv(1, 1, 40, 40, 32, at::kBFloat16);
    const auto l2 = random_block_lists(2, 2, 1.0, false);
    const auto fb =
        vk::block_sparse_attention(small.q, small.k, small.v, l2.indices, l2.counts, 32, 32);
    EXPECT_TRUE(fb.out.isfinite().all().item<bool>());
    // ... and are an error when the CUDA path is demanded.
    vk::AttentionOptions o;
    o.path = vk::KernelPath::Cuda;
    EXPECT_THROW(
        vk::block_sparse_attention(small.q, small.k, small.v, l2.indices, l2.counts, 32, 32, o),
        c10::Error);
}
