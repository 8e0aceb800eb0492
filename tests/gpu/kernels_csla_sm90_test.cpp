// The sm_90a wgmma kernels (KernelPolicy::sm90_attention, the default on Hopper), CSLA
// block-sparse and CS4A gathered, at both head dims (so each kernel the dispatch runs: CSLA 12 at
// d128, 10 at d64, 6 where no tensor map can be made; CS4A 6 at d128, 0 at d64), against the
// float64 reference: error at most twice torch's own at bf16, tails on both axes, random lists
// with empty query blocks (gathered: counts off tile boundaries and on them, invalid entries
// inside the count), poisoned outputs, two runs bitwise equal; scores that rise along the keys
// (the exponent base must move: it moves only when P would pass 2^16); many items per CTA,
// eagerly and replayed from a CUDA graph. Skips without CUDA, kernels for the device, or a Hopper
// GPU. (The schedules deleted as never the default had a test each: pruned-kernels.md.)
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/attention_dispatch.h"
#include "kernels/attention_reference.h"
#include "kernels/cuda/work_order.h"
#include "kernels/cuda_graph.h"
#include "kernels/cuda_timing.h"

namespace vk = varscope::kernels;

namespace {

bool hopper_runnable(std::string* why) {
    if (!torch::cuda::is_available()) {
        *why = "no CUDA device";
        return false;
    }
    if (vk::cuda_device_info(0).cc_major != 9) {
        *why = "not a Hopper GPU";
        return false;
    }
    const auto probe =
        at::zeros({1, 1, 64, 64}, at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA));
    return vk::cuda_attention_supported(probe, 64, 64, {}, why);
}

double rel(const at::Tensor& a, const at::Tensor& ref) {
    const auto x = a.to(at::kDouble).cpu(), y = ref.to(at::kDouble).cpu();
    EXPECT_TRUE(x.isfinite().all().item<bool>()) << "non-finite values (unwritten output?)";
    return ((x - y).norm() / y.norm()).item<double>();
}

// Random lists: a sink block, a random subset of the rest in random order, every third query
// block empty when asked.
std::pair<at::Tensor, at::Tensor> lists_for(int64_t nqb, int64_t nkb, double keep, bool empty) {
    std::vector<std::vector<int32_t>> rows(nqb);
    int64_t widest = 1;
    for (int64_t u = 0; u < nqb; ++u) {
        if (!(empty && u % 3 == 1)) {
            const auto pick = at::rand({nkb}) < keep;
            for (int64_t j = 0; j < nkb; ++j)
                if (j == 0 || pick[j].item<bool>()) rows[u].push_back(static_cast<int32_t>(j));
            const auto perm = at::randperm(static_cast<int64_t>(rows[u].size()));
            std::vector<int32_t> shuffled;
            for (int64_t j = 0; j < perm.size(0); ++j)
                shuffled.push_back(rows[u][perm[j].item<int64_t>()]);
            rows[u] = shuffled;
        }
        widest = std::max<int64_t>(widest, static_cast<int64_t>(rows[u].size()) + 1);
    }
    auto idx = at::full({nqb, widest}, -1, at::kInt);
    auto cnt = at::zeros({nqb}, at::kInt);
    for (int64_t u = 0; u < nqb; ++u) {
        for (size_t j = 0; j < rows[u].size(); ++j) idx[u][static_cast<int64_t>(j)] = rows[u][j];
        cnt[u] = static_cast<int32_t>(rows[u].size());
    }
    return {idx.cuda(), cnt.cuda()};
}

// Gathered lists: distinct random key rows per query block; counts vary (off and on 64-key tile
// boundaries, longer than one tile), every third block empty; in every fourth block two entries
// inside the count are invalid (-1 and past len_k), which the reference ignores.
std::pair<at::Tensor, at::Tensor> key_lists_for(int64_t nqb, int64_t lk, double keep) {
    const int64_t widest = std::max<int64_t>(2, static_cast<int64_t>(lk * keep) + 70);
    auto idx = at::full({nqb, widest}, -1, at::kInt);
    auto cnt = at::zeros({nqb}, at::kInt);
    for (int64_t u = 0; u < nqb; ++u) {
        if (u % 3 == 1) continue;
        int64_t n = std::min<int64_t>(lk, 1 + at::randint(widest, {1}).item<int64_t>());
        if (u % 3 == 2 && n >= 64) n -= n % 64;  // whole tiles: no masked tail
        idx[u].narrow(0, 0, n).copy_(at::randperm(lk).narrow(0, 0, n).to(at::kInt));
        if (u % 4 == 0 && n >= 3) {
            idx[u][n / 2] = -1;
            idx[u][n - 1] = static_cast<int32_t>(lk + 5);
        }
        cnt[u] = static_cast<int32_t>(n);
    }
    return {idx.cuda(), cnt.cuda()};
}

// The checks both sm90 tests make of one kernel output `got` (and `again`, the same call into a
// fresh poisoned buffer) against the float64 reference under the token mask the lists mean:
// error at most twice torch's own bf16 SDPA error, empty query rows O = 0 and LSE = -inf, the
// LSE, and bitwise determinism.
void expect_matches_masked_reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const at::Tensor& mask, const vk::AttentionResult& got,
                                     const vk::AttentionResult& again, const std::string& what) {
    const auto ref = vk::reference::masked_attention(q.to(at::kDouble), k.to(at::kDouble),
                                                     v.to(at::kDouble), mask, std::nullopt, true);
    const auto has = mask.any(1).to(at::kCUDA);
    auto sel = [&](const at::Tensor& t) { return t.index({"...", has, at::indexing::Slice()}); };
    const auto torch_out = at::scaled_dot_product_attention(q, k, v, mask.to(at::kCUDA));
    const double torch_err = rel(sel(torch_out), sel(ref.out));
    const double err = rel(sel(got.out), sel(ref.out));
    EXPECT_LE(err, 2.0 * torch_err + 1e-6) << what << ": sm90 " << err << " vs torch " << torch_err;
    const auto empty = has.logical_not();
    if (empty.any().item<bool>()) {
        EXPECT_TRUE(got.out.index({"...", empty, at::indexing::Slice()}).eq(0).all().item<bool>())
            << what << ": empty rows not zero";
        EXPECT_TRUE(got.lse.index({"...", empty}).isneginf().all().item<bool>()) << what;
    }
    const auto lse_err = (got.lse.index({"...", has}).to(at::kDouble).cpu() -
                          ref.lse.index({"...", has}).to(at::kDouble).cpu())
                             .abs()
                             .max()
                             .item<double>();
    EXPECT_LE(lse_err, 2e-2) << what << ": lse";
    EXPECT_TRUE(at::equal(got.out, again.out)) << what << ": not deterministic";
}

// block_sparse_attention on the CUDA path twice, each time into a fresh NaN-poisoned buffer (a
// race shows as a difference), then the checks above against the token mask the lists mean.
void check_block_sparse(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        const at::Tensor& idx, const at::Tensor& cnt, int64_t bq, int64_t bk,
                        const std::string& what) {
    vk::AttentionOptions o;
    o.path = vk::KernelPath::Cuda;
    o.return_lse = true;
    auto run = [&] {
        o.out = at::full(q.sizes(), std::numeric_limits<double>::quiet_NaN(), q.options());
        auto r = vk::block_sparse_attention(q, k, v, idx, cnt, bq, bk, o);
        torch::cuda::synchronize();
        return r;
    };
    const auto got = run();
    const auto again = run();
    const auto mask =
        vk::reference::token_mask_from_block_lists(idx, cnt, bq, bk, q.size(2), k.size(2));
    expect_matches_masked_reference(q, k, v, mask, got, again, what);
}

}  // namespace

// The dispatch's CSLA kernels (12 at d128, 10 at d64). The fixture checks afterwards that they
// ran: where no tensor map can be made they run 6, and the test would then have checked 6.
class KernelsCslaSm90 : public ::testing::Test {
  protected:
    void SetUp() override {
        std::string why;
        if (!hopper_runnable(&why)) GTEST_SKIP() << why;
        fallbacks_before = vk::sm90_ws_fallback_count();
    }
    void TearDown() override {
        if (!IsSkipped()) {
            EXPECT_EQ(vk::sm90_ws_fallback_count(), fallbacks_before) << "fell back to 6";
        }
    }
    c10::InferenceMode inference;
    const at::TensorOptions opts = at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA);
    int fallbacks_before = 0;

    // More items than the persistent kernel has CTAs (ManyItemsPerCta): batch 2, 24 heads, 19
    // query blocks (a tail of 5 rows) = 912 items, random lists with empty query blocks.
    struct Problem {
        at::Tensor q, k, v, idx, cnt;
        int64_t block = 64;
    };
    Problem many_items_problem(int64_t d) const {
        const int64_t b = 2, h = 24, lq = 18 * 64 + 5, lk = 1500;
        Problem pr;
        pr.q = at::randn({b, h, lq, d}, opts);
        pr.k = at::randn({b, h, lk, d}, opts);
        pr.v = at::randn({b, h, lk, d}, opts);
        std::tie(pr.idx, pr.cnt) =
            lists_for((lq + pr.block - 1) / pr.block, (lk + pr.block - 1) / pr.block, 0.4, true);
        return pr;
    }
};

TEST_F(KernelsCslaSm90, BlockSparseMatchesReference) {
    at::manual_seed(21);
    struct Shape {
        int64_t b, h, lq, lk, d;
    };
    const std::vector<Shape> shapes = {
        {1, 2, 64, 64, 64},    {2, 3, 200, 333, 64},   {1, 2, 130, 1000, 128},
        {2, 1, 17, 70, 128},   {1, 2, 256, 2048, 128}, {1, 1, 192, 900, 64},  // a 64-key tile
        {1, 1, 320, 4200, 128}};  // wholly past the end at block 128; long lists (pipeline)
    {
        for (const auto& s : shapes) {
            // Equal and mixed query/key block sizes.
            for (const auto& [bq, bk] : std::vector<std::pair<int64_t, int64_t>>{
                     {64, 64}, {128, 128}, {128, 64}, {64, 128}}) {
                for (const bool strided : {false, true}) {
                    const auto q = strided ? at::randn({s.b, s.lq, s.h, s.d}, opts).transpose(1, 2)
                                           : at::randn({s.b, s.h, s.lq, s.d}, opts);
                    const auto k = at::randn({s.b, s.h, s.lk, s.d}, opts);
                    const auto v = at::randn({s.b, s.h, s.lk, s.d}, opts);
                    const int64_t nqb = (s.lq + bq - 1) / bq, nkb = (s.lk + bk - 1) / bk;
                    // Empty query blocks at every block size: at 64 the pair kernels then see
                    // one warpgroup with a list and one without.
                    const auto [idx, cnt] = lists_for(nqb, nkb, 0.4, true);
                    check_block_sparse(
                        q, k, v, idx, cnt, bq, bk,
                        "lq=" + std::to_string(s.lq) + " lk=" + std::to_string(s.lk) +
                            " d=" + std::to_string(s.d) + " block=" + std::to_string(bq) + "x" +
                            std::to_string(bk) + (strided ? " strided" : ""));
                }
            }
        }
    }
}

// Keys scaled by a ramp (x1 at the first key to x12 at the last) and lists in random order: a
// tile's scores can exceed the exponent base by far more than 2^16 in P, so the base moves many
// times, upwards and, for tiles visited after larger ones, stays. A schedule that failed to
// rescale O or the row sums when it moves is off by orders of magnitude here; with random keys
// of one scale (the test above) the base hardly ever moves after the first tile.
TEST_F(KernelsCslaSm90, RisingScoresMoveTheBase) {
    at::manual_seed(22);
    for (const int64_t d : {64, 128}) {
        const int64_t lq = 192, lk = 2000, block = 64;
        const auto q = at::randn({1, 2, lq, d}, opts);
        const auto ramp = at::linspace(1.0, 12.0, lk, opts).view({1, 1, lk, 1});
        const auto k = (at::randn({1, 2, lk, d}, opts) * ramp).to(at::kBFloat16);
        const auto v = at::randn({1, 2, lk, d}, opts);
        const int64_t nqb = (lq + block - 1) / block, nkb = (lk + block - 1) / block;
        const auto [idx, cnt] = lists_for(nqb, nkb, 0.6, false);
        check_block_sparse(q, k, v, idx, cnt, block, block, "rising scores d=" + std::to_string(d));
    }
}

// More query blocks than the persistent kernel (12, d128) has CTAs (two per SM, at most 2 x 144 on
// a Hopper part): every CTA takes three or more items in turn, so its Q slots and O buffer are
// reused, its O stores wait for their buffer, and its K/V ring runs on across items (the shapes
// above fit in one item per CTA). A tail of 5 query rows and empty query blocks as above. 912 items
// are not whole rounds of 2 x 132 (H100/H200) or 2 x 144 CTAs, so the last items are claimed from
// the launch's counter (WorkOrder); the second run of each check shows that the first left the
// counter at zero (an item skipped would leave its NaN poison), and the d = 128 launch, after the d
// = 64 one on the same stream, the same across kernels.
TEST_F(KernelsCslaSm90, ManyItemsPerCta) {
    at::manual_seed(23);
    for (const int64_t d : {64, 128}) {
        const auto pr = many_items_problem(d);
        check_block_sparse(pr.q, pr.k, pr.v, pr.idx, pr.cnt, pr.block, pr.block,
                           "many items per CTA d=" + std::to_string(d));
    }
}

// The same shape captured in a CUDA graph (as the per-scale steps are) and replayed: a warm-up
// on the capture stream makes that stream's claim counter, the captured launch uses it, and
// every replay must leave it at zero for the next. Each replay writes into a NaN-poisoned output
// and must equal the eager run bitwise.
TEST_F(KernelsCslaSm90, GraphReplaysMatchTheEagerRun) {
    if (!vk::cuda_graphs_built()) GTEST_SKIP() << "no CUDA graphs in this build";
    at::manual_seed(29);
    const auto pr = many_items_problem(128);
    vk::AttentionOptions o;
    o.path = vk::KernelPath::Cuda;
    const auto nan = std::numeric_limits<double>::quiet_NaN();
    at::Tensor eager;
    vk::run_on_capture_stream(0, [&] {
        o.out = at::full(pr.q.sizes(), nan, pr.q.options());
        eager =
            vk::block_sparse_attention(pr.q, pr.k, pr.v, pr.idx, pr.cnt, pr.block, pr.block, o).out;
    });
    torch::cuda::synchronize();
    const auto out = at::full(pr.q.sizes(), nan, pr.q.options());
    o.out = out;
    vk::CudaGraph graph;
    graph.capture(0, [&] {
        vk::block_sparse_attention(pr.q, pr.k, pr.v, pr.idx, pr.cnt, pr.block, pr.block, o);
    });
    for (int replay = 0; replay < 3; ++replay) {
        out.fill_(nan);
        graph.replay();
        torch::cuda::synchronize();
        EXPECT_TRUE(at::equal(out, eager)) << "replay " << replay;
    }
}

// Keys and values shared by every head (expanded: head stride 0) give the reference's result.
// Written expecting no TMA tensor map for them (so schedule 6 would run); on an H200 at 63ce8ec
// the maps were made and no call fell back (sm90_ws_fallback_count stayed 0 for d=64 and 128),
// so this checks the result of the default kernel on such inputs. Schedule 6's CSLA fallback has
// no input here that is known to reach it.
TEST(KernelsCslaSm90Fallback, ZeroStrideKeysMatchTheReference) {
    std::string why;
    if (!hopper_runnable(&why)) GTEST_SKIP() << why;
    c10::InferenceMode inference;
    at::manual_seed(24);
    const auto opts = at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA);
    for (const int64_t d : {64, 128}) {
        const int64_t h = 3, lq = 200, lk = 700, block = 64;
        const auto q = at::randn({1, h, lq, d}, opts);
        const auto k = at::randn({1, 1, lk, d}, opts).expand({1, h, lk, d});
        const auto v = at::randn({1, 1, lk, d}, opts).expand({1, h, lk, d});
        const auto [idx, cnt] =
            lists_for((lq + block - 1) / block, (lk + block - 1) / block, 0.5, true);
        check_block_sparse(q, k, v, idx, cnt, block, block,
                           "zero-stride keys d=" + std::to_string(d));
    }
}

// Which schedule runs is what the docs and the bench notes report (bench/results/2026-11-26-h200/):
// a default that silently stayed on an older schedule went unnoticed for a session. Host logic:
// runs in every build with the CUDA kernels, GPU or not (without nvcc there are none and
// sm90_schedule says -1: found on a fresh Debian 12, which has no CUDA toolkit).
TEST(KernelsSm90Schedule, Defaults) {
    if (!vk::cuda_kernels_built()) GTEST_SKIP() << "no CUDA kernels in this build (no nvcc)";
    EXPECT_EQ(vk::sm90_schedule(128, false), 12);
    EXPECT_EQ(vk::sm90_schedule(64, false), 10);
    EXPECT_EQ(vk::sm90_schedule(128, true), 6);
    EXPECT_EQ(vk::sm90_schedule(64, true), 0);
}

// Which items the persistent kernel claims instead of dealing them round-robin: from the head
// where the last partial round starts. Host logic: runs in every CUDA build, GPU or not.
TEST(KernelsSm90Schedule, ClaimedItemsStartAtTheLastPartialRound) {
    using varscope::kernels::cuda::first_claimed_item;
    // SparVAR's Table 1 on 132 SMs: 24 heads x 64 query blocks on 264 CTAs. The last partial
    // round starts at item 1320 (head 20, query block 40); claims start at head 20.
    EXPECT_EQ(first_claimed_item(64, 1536, 264), 1280);
    // ManyItemsPerCta (19 query blocks, 48 heads) on 132 and on 144 SMs.
    EXPECT_EQ(first_claimed_item(19, 912, 264), 779);
    EXPECT_EQ(first_claimed_item(19, 912, 288), 855);
    // Whole rounds, and fewer items than CTAs: nothing claimed.
    EXPECT_EQ(first_claimed_item(64, 528, 264), 528);
    EXPECT_EQ(first_claimed_item(4, 240, 240), 240);
    // The last partial round inside the first head: everything is claimed.
    EXPECT_EQ(first_claimed_item(1200, 1200, 264), 0);
    EXPECT_EQ(first_claimed_item(600, 1200, 264), 600);  // the second of two heads
    // No items, or a bad grid: nothing claimed.
    EXPECT_EQ(first_claimed_item(64, 0, 264), 0);
    EXPECT_EQ(first_claimed_item(64, 1536, 0), 1536);
}

// CS4A on Hopper: the same tile machinery with key rows gathered by index (6 at d128, 0 at d64).
TEST(KernelsCs4aSm90, GatheredMatchesReference) {
    std::string why;
    if (!hopper_runnable(&why)) GTEST_SKIP() << why;
    c10::InferenceMode guard;
    at::manual_seed(22);
    struct Shape {
        int64_t b, h, lq, lk, d;
        double keep;
    };
    const std::vector<Shape> shapes = {{1, 2, 64, 64, 64, 0.5},     {2, 3, 200, 333, 64, 0.3},
                                       {1, 2, 130, 1000, 128, 0.3}, {2, 1, 17, 70, 128, 0.8},
                                       {1, 1, 384, 4200, 128, 0.3},  // long lists (pipeline)
                                       {1, 2, 250, 2100, 64, 0.25}};
    const auto opts = at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA);
    const std::string impl = std::to_string(vk::sm90_schedule(64, true)) + "/" +
                             std::to_string(vk::sm90_schedule(128, true));
    for (const auto& s : shapes) {
        for (const int64_t bq : {64, 192}) {
            for (const bool strided : {false, true}) {
                const auto q = strided ? at::randn({s.b, s.lq, s.h, s.d}, opts).transpose(1, 2)
                                       : at::randn({s.b, s.h, s.lq, s.d}, opts);
                const auto k = at::randn({s.b, s.h, s.lk, s.d}, opts);
                const auto v = at::randn({s.b, s.h, s.lk, s.d}, opts);
                const int64_t nqb = (s.lq + bq - 1) / bq;
                const auto [idx, cnt] = key_lists_for(nqb, s.lk, s.keep);
                vk::AttentionOptions o;
                o.path = vk::KernelPath::Cuda;
                o.return_lse = true;
                o.out = at::full(q.sizes(), std::numeric_limits<double>::quiet_NaN(), opts);
                const auto got = vk::gathered_attention(q, k, v, idx, cnt, bq, o);
                torch::cuda::synchronize();
                o.out = at::full(q.sizes(), std::numeric_limits<double>::quiet_NaN(), opts);
                const auto again = vk::gathered_attention(q, k, v, idx, cnt, bq, o);
                torch::cuda::synchronize();
                const std::string what =
                    std::string("impl ") + impl + " lq=" + std::to_string(s.lq) +
                    " lk=" + std::to_string(s.lk) + " d=" + std::to_string(s.d) +
                    " bq=" + std::to_string(bq) + (strided ? " strided" : "");
                const auto mask =
                    vk::reference::token_mask_from_key_lists(idx, cnt, bq, s.lq, s.lk);
                ASSERT_TRUE(mask.any().item<bool>()) << what << ": the lists select no key";
                expect_matches_masked_reference(q, k, v, mask, got, again, what + " (gathered)");
            }
        }
    }
}
