// CUDA token kernels (kernels/token_ops.h) against float64 ground truth and the LibTorch
// reference, on random inputs with awkward sizes (tails of every loop), in float32, float16 and
// bfloat16. The caching allocator is poisoned with NaN before each call so an unwritten output
// shows. Skips without CUDA or without kernels for the device.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <algorithm>
#include <array>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "kernels/token_ops.h"

namespace vk = varscope::kernels;

namespace {

bool token_kernels_runnable(std::string* why) {
    if (!torch::cuda::is_available()) {
        *why = "no CUDA device";
        return false;
    }
    return vk::cuda_token_ops_supported(at::zeros({1}, at::TensorOptions().device(at::kCUDA)), {},
                                        why);
}

#define REQUIRE_TOKEN_KERNELS()                                   \
    do {                                                          \
        std::string why_;                                         \
        if (!token_kernels_runnable(&why_)) GTEST_SKIP() << why_; \
    } while (0)

// Leaves NaN-filled blocks of these sizes in the caching allocator for the next allocations.
void poison(const std::vector<std::vector<int64_t>>& shapes) {
    std::vector<at::Tensor> held;
    for (const auto& s : shapes)
        held.push_back(at::full(s, std::numeric_limits<float>::quiet_NaN(),
                                at::TensorOptions().device(at::kCUDA)));
    torch::cuda::synchronize();
}

at::Tensor truth_scores(const at::Tensor& x) {
    const auto xd = x.to(at::kCPU, at::kDouble);
    return (xd - xd.mean(1, true)).pow(2).sum(-1);
}

at::Tensor truth_update(const at::Tensor& a, const at::Tensor& b) {
    const auto x = a.to(at::kCPU, at::kDouble), y = b.to(at::kCPU, at::kDouble);
    return 1.0 - (x * y).sum(1) / (x.norm(2, {1}) * y.norm(2, {1})).clamp_min(1e-12);
}

const std::vector<at::ScalarType> kTypes{at::kFloat, at::kHalf, at::kBFloat16};

}  // namespace

TEST(KernelsTokenOpsGpu, PivotalScoresMatchFloat64WithTails) {
    REQUIRE_TOKEN_KERNELS();
    c10::InferenceMode guard;
    const std::vector<std::array<int64_t, 3>> shapes{{1, 1, 1},    {2, 37, 31},     {4, 169, 33},
                                                     {2, 256, 64}, {3, 1000, 1027}, {2, 4096, 96}};
    for (auto type : kTypes) {
        for (const auto& s : shapes) {
            at::manual_seed(s[1] * 7 + s[2]);
            // An offset mean and spread per token, as hidden states have.
            const auto x = (at::randn({s[0], s[1], s[2]}) * at::rand({s[0], s[1], 1}) * 3 + 0.5)
                               .to(at::TensorOptions().device(at::kCUDA).dtype(type));
            poison({{s[0], s[2]}, {s[0], s[1]}});
            const auto got = vk::pivotal_scores(x, vk::KernelPath::Cuda);
            torch::cuda::synchronize();
            const std::string what = std::string(c10::toString(type)) +
                                     " R=" + std::to_string(s[0]) + " N=" + std::to_string(s[1]) +
                                     " C=" + std::to_string(s[2]);
            ASSERT_EQ(got.sizes(), (at::IntArrayRef{s[0], s[1]})) << what;
            ASSERT_EQ(got.scalar_type(), at::kFloat) << what;
            const auto g = got.to(at::kCPU, at::kDouble);
            ASSERT_TRUE(g.isfinite().all().item<bool>()) << what << ": unwritten output";
            const auto want = truth_scores(x);
            const double scale = want.abs().max().item<double>() + 1e-6;
            EXPECT_LT((g - want).abs().max().item<double>() / scale, 2e-5) << what;
            // The reference sees the same inputs and computes in float32 too.
            const auto ref = vk::reference::pivotal_scores(x).to(at::kCPU, at::kDouble);
            EXPECT_LT((g - ref).abs().max().item<double>() / scale, 2e-5) << what;
        }
    }
}

TEST(KernelsTokenOpsGpu, PivotalSelectionKeepsTheHighestScoresAscending) {
    REQUIRE_TOKEN_KERNELS();
    c10::InferenceMode guard;
    for (int64_t n : {1, 64, 169, 256}) {
        at::manual_seed(n);
        const auto x = at::randn({2, n, 48}, at::TensorOptions().device(at::kCUDA));
        for (int64_t keep : {int64_t{1}, (n + 1) / 2, n}) {
            const auto sel = vk::pivotal_token_selection(x, keep, vk::KernelPath::Cuda);
            ASSERT_EQ(sel.kept.sizes(), (at::IntArrayRef{2, keep}));
            const auto kept = sel.kept.cpu();
            const auto truth = truth_scores(x);
            for (int64_t r = 0; r < 2; ++r) {
                const auto ids = kept[r];
                if (keep > 1) {
                    EXPECT_TRUE((ids.narrow(0, 1, keep - 1) > ids.narrow(0, 0, keep - 1))
                                    .all()
                                    .item<bool>())
                        << "ids ascending and distinct";
                }
                auto in = at::zeros({n}, at::kBool).index_fill_(0, ids, true);
                if (keep == n) continue;
                const double lowest_kept = truth[r].masked_select(in).min().item<double>();
                const double highest_left = truth[r].masked_select(~in).max().item<double>();
                EXPECT_GE(lowest_kept, highest_left - 1e-4 * (1 + highest_left))
                    << "n=" << n << " keep=" << keep;
            }
        }
    }
    EXPECT_THROW(
        vk::pivotal_token_selection(at::randn({1, 4, 8}, at::TensorOptions().device(at::kCUDA)), 5),
        c10::Error);
}

// The top-K kernel gives exactly the reference's ids (a stable descending sort: ties to the lower
// id, NaN first, -0 = +0): random scores over tails of the 512-thread tiles, scores with many
// ties, special values, a strided input, keep from 1 to N; the output poisoned before each call.
TEST(KernelsTokenOpsGpu, TopRowsAreTheReferenceIds) {
    REQUIRE_TOKEN_KERNELS();
    c10::InferenceMode guard;
    const auto cuda = at::TensorOptions().device(at::kCUDA);
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<std::pair<std::string, at::Tensor>> cases;
    for (int64_t n : {1, 7, 511, 512, 513, 1600, 2304, 4096, 5000}) {
        at::manual_seed(n);
        cases.push_back({"randn " + std::to_string(n), at::randn({3, n})});
        cases.push_back({"ties " + std::to_string(n), at::randint(0, 4, {2, n}).to(at::kFloat)});
    }
    cases.push_back({"special", at::tensor({0.f, -0.f, inf, -inf, std::nanf(""), -std::nanf(""),
                                            1e-40f, -1e-40f, 3.f, 3.f, 0.f, inf})
                                    .view({1, 12})});
    cases.push_back({"negative", -at::rand({2, 700}) - 1.f});
    cases.push_back({"strided", at::randn({600, 2}).t()});
    for (const auto& [what, cpu] : cases) {
        const int64_t n = cpu.size(1);
        for (int64_t keep :
             {int64_t{1}, std::max<int64_t>(1, n / 3), std::max<int64_t>(1, n - 1), n}) {
            SCOPED_TRACE(what + " keep " + std::to_string(keep));
            poison({{cpu.size(0), 2 * keep}});  // int64 ids: two floats each
            const auto got = vk::top_rows(cpu.to(at::kCUDA), keep, vk::KernelPath::Cuda).cpu();
            const auto want = vk::reference::top_rows(cpu, keep);
            ASSERT_EQ(got.sizes(), want.sizes());
            EXPECT_TRUE(got.equal(want));
        }
    }
    // What FastVAR calls: the scores and the selection on the device, ids ascending.
    const auto x = at::randn({2, 1600, 64}, cuda);
    const auto sel = vk::pivotal_token_selection(x, 700, vk::KernelPath::Cuda);
    EXPECT_TRUE(sel.kept.cpu().equal(vk::reference::top_rows(sel.scores.cpu(), 700)));
    EXPECT_THROW(vk::top_rows(at::zeros({2, 4}, cuda), 5, vk::KernelPath::Cuda), c10::Error);
}

TEST(KernelsTokenOpsGpu, UpdateIndexMatchesFloat64WithTailsAndZeroVectors) {
    REQUIRE_TOKEN_KERNELS();
    c10::InferenceMode guard;
    const std::vector<std::array<int64_t, 4>> shapes{
        {1, 1, 1, 1}, {2, 4, 7, 7}, {2, 32, 16, 16}, {3, 33, 13, 17}, {1, 8, 64, 64}};
    for (auto type : kTypes) {
        for (const auto& s : shapes) {
            at::manual_seed(s[1] + s[2] * 3);
            const auto opts = at::TensorOptions().device(at::kCUDA).dtype(type);
            auto a = at::randn({s[0], s[1], s[2], s[3]});
            // b close to a at some positions (index near 0), unrelated at others.
            auto b = a * at::rand({s[0], 1, s[2], s[3]}) + at::randn_like(a) * 0.3;
            a.select(2, 0).select(2, 0).zero_();  // a zero vector: cos = 0 by the clamp
            const auto ga = a.to(opts), gb = b.to(opts);
            poison({{s[0], s[2], s[3]}});
            const auto got = vk::update_index(ga, gb, vk::KernelPath::Cuda);
            torch::cuda::synchronize();
            const std::string what = std::string(c10::toString(type)) +
                                     " C=" + std::to_string(s[1]) + " " + std::to_string(s[2]) +
                                     "x" + std::to_string(s[3]);
            ASSERT_EQ(got.sizes(), (at::IntArrayRef{s[0], s[2], s[3]})) << what;
            const auto g = got.to(at::kCPU, at::kDouble);
            ASSERT_TRUE(g.isfinite().all().item<bool>()) << what << ": unwritten output";
            EXPECT_LT((g - truth_update(ga, gb)).abs().max().item<double>(), 2e-5) << what;
            EXPECT_NEAR(g[0][0][0].item<double>(), 1.0, 1e-6) << what;
            const auto ref = vk::reference::update_index(ga, gb).to(at::kCPU, at::kDouble);
            EXPECT_LT((g - ref).abs().max().item<double>(), 2e-5) << what;
        }
    }
}

TEST(KernelsTokenOpsGpu, NonContiguousInputsAndForcedReference) {
    REQUIRE_TOKEN_KERNELS();
    c10::InferenceMode guard;
    at::manual_seed(3);
    const auto base = at::randn({2, 40, 70}, at::TensorOptions().device(at::kCUDA));
    const auto x = base.transpose(1, 2);  // (2, 70, 40), channels strided
    const auto got = vk::pivotal_scores(x, vk::KernelPath::Cuda);
    EXPECT_LT((got.cpu().to(at::kDouble) - truth_scores(x)).abs().max().item<double>(), 1e-3);
    const auto a = at::randn({2, 8, 6, 5}, base.options()).permute({0, 1, 3, 2});
    const auto b = at::randn({2, 8, 6, 5}, base.options()).permute({0, 1, 3, 2});
    EXPECT_LT((vk::update_index(a, b).cpu().to(at::kDouble) - truth_update(a, b))
                  .abs()
                  .max()
                  .item<double>(),
              2e-5);
    vk::KernelPolicy forced;
    forced.reference = true;
    std::string why;
    EXPECT_FALSE(vk::cuda_token_ops_supported(x, forced, &why));
    EXPECT_NE(why.find("forced"), std::string::npos) << why;
    EXPECT_THROW(vk::pivotal_scores(x, vk::KernelPath::Cuda, forced), c10::Error);
    EXPECT_TRUE(vk::pivotal_scores(x, vk::KernelPath::Auto, forced)
                    .equal(vk::reference::pivotal_scores(x)));
    EXPECT_TRUE(vk::cuda_token_ops_supported(x));
}
