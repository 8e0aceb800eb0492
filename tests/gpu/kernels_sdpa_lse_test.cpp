// SDPA with its own log-sum-exp (kernels/sdpa_lse.h) on the GPU: the output is bitwise what
// at::scaled_dot_product_attention gives (for every backend it can pick), the lse is
// log(sum exp(scale * q.k)) per query row, and the column-sum kernel fed with it (one QK^T pass)
// matches the two-pass kernel, also inside a CUDA graph. Skips without CUDA; the column-sum parts
// also without kernels for the device.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "kernels/attention_dispatch.h"
#include "kernels/attention_reference.h"
#include "kernels/cuda_graph.h"
#include "kernels/sdpa_lse.h"

namespace vk = varscope::kernels;

namespace {

#define REQUIRE_CUDA() \
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

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

// Only the named SDPA backend enabled while it lives (all of them: SDPA's own choice).
class OnlyBackend {
  public:
    explicit OnlyBackend(std::optional<at::SDPBackend> only) {
        auto& c = at::globalContext();
        flash_ = c.userEnabledFlashSDP();
        efficient_ = c.userEnabledMemEfficientSDP();
        cudnn_ = c.userEnabledCuDNNSDP();
        math_ = c.userEnabledMathSDP();
        if (!only) return;
        c.setSDPUseFlash(*only == at::SDPBackend::flash_attention);
        c.setSDPUseMemEfficient(*only == at::SDPBackend::efficient_attention);
        c.setSDPUseCuDNN(*only == at::SDPBackend::cudnn_attention);
        c.setSDPUseMath(*only == at::SDPBackend::math);
    }
    ~OnlyBackend() {
        auto& c = at::globalContext();
        c.setSDPUseFlash(flash_);
        c.setSDPUseMemEfficient(efficient_);
        c.setSDPUseCuDNN(cudnn_);
        c.setSDPUseMath(math_);
    }
    OnlyBackend(const OnlyBackend&) = delete;
    OnlyBackend& operator=(const OnlyBackend&) = delete;

  private:
    bool flash_ = true, efficient_ = true, cudnn_ = true, math_ = true;
};

const char* name_of(at::SDPBackend b) {
    switch (b) {
        case at::SDPBackend::math:
            return "math";
        case at::SDPBackend::flash_attention:
            return "flash";
        case at::SDPBackend::efficient_attention:
            return "efficient";
        case at::SDPBackend::cudnn_attention:
            return "cudnn";
        default:
            return "other";
    }
}

struct Case {
    int64_t b, lq, lk, d;
};

// Batch 1 and 2, head dims 64 and 128, Lq = Lk and Lq < Lk (a prefix of cached keys), tails
// that are not multiples of 32 (the efficient kernel pads its lse).
const std::vector<Case> kCases = {
    {1, 64, 64, 64},    {2, 100, 100, 64}, {1, 81, 340, 64},
    {1, 128, 128, 128}, {2, 45, 300, 128}, {2, 256, 1000, 128},
};

at::Tensor cuda_randn(at::IntArrayRef shape, at::ScalarType t) {
    return at::randn(shape, at::TensorOptions().dtype(t).device(at::kCUDA));
}

}  // namespace

// (a) the output is SDPA's to the bit; (b) the lse is log(sum exp(scale * q.k)) within 1e-4.
TEST(KernelsSdpaLseGpu, OutputIsSdpaBitwiseAndLseIsTheRowsLogSumExp) {
    REQUIRE_CUDA();
    c10::InferenceMode guard;
    at::manual_seed(30);
    const std::vector<std::optional<at::SDPBackend>> backends = {
        std::nullopt, at::SDPBackend::flash_attention, at::SDPBackend::efficient_attention,
        at::SDPBackend::cudnn_attention, at::SDPBackend::math};
    int with_lse = 0;
    for (const auto& only : backends) {
        for (const auto dtype : {at::kBFloat16, at::kFloat, at::kHalf}) {
            for (const auto& c : kCases) {
                const int64_t h = 3;
                const auto q = cuda_randn({c.b, h, c.lq, c.d}, dtype);
                const auto k = cuda_randn({c.b, h, c.lk, c.d}, dtype);
                const auto v = cuda_randn({c.b, h, c.lk, c.d}, dtype);
                for (const std::optional<double> scale :
                     {std::optional<double>(), std::optional<double>(0.07)}) {
                    const OnlyBackend restrict_to(only);
                    at::SDPBackend chose = at::SDPBackend::error;
                    try {
                        chose = static_cast<at::SDPBackend>(
                            at::_fused_sdp_choice(q, k, v, std::nullopt, 0.0, false, scale));
                    } catch (const c10::Error&) {
                        continue;  // that backend alone cannot take these inputs
                    }
                    if (chose == at::SDPBackend::error) continue;
                    const std::string what = std::string(name_of(chose)) + " " +
                                             c10::toString(dtype) + " b" + std::to_string(c.b) +
                                             " lq" + std::to_string(c.lq) + " lk" +
                                             std::to_string(c.lk) + " d" + std::to_string(c.d) +
                                             (scale ? " scale 0.07" : "");
                    const auto got = vk::sdpa_with_lse(q, k, v, scale);
                    const auto want =
                        at::scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, false, scale);
                    ASSERT_EQ(got.out.sizes(), want.sizes()) << what;
                    EXPECT_EQ(got.out.scalar_type(), want.scalar_type()) << what;
                    EXPECT_TRUE(got.out.equal(want)) << what << ": output differs from SDPA's";
                    // SparVAR's decision scale (bf16, SDPA's own choice) relies on an lse.
                    if (!only && dtype == at::kBFloat16) {
                        EXPECT_NE(chose, at::SDPBackend::math) << what;
                    }
                    if (chose == at::SDPBackend::math) {
                        EXPECT_FALSE(got.lse.defined()) << what;
                        continue;
                    }
                    ASSERT_TRUE(got.lse.defined()) << what;
                    ++with_lse;
                    ASSERT_EQ(got.lse.sizes(), (at::IntArrayRef{c.b, h, c.lq})) << what;
                    EXPECT_TRUE(got.lse.is_contiguous()) << what;
                    EXPECT_EQ(got.lse.scalar_type(), at::kFloat) << what;
                    const double s = scale.value_or(1.0 / std::sqrt(static_cast<double>(c.d)));
                    // Reference from the same (rounded) inputs, in float64.
                    const auto ref = at::logsumexp(
                        at::matmul(q.to(at::kDouble), k.to(at::kDouble).transpose(-2, -1)) * s, -1);
                    const double err = (got.lse.to(at::kDouble) - ref).abs().max().item<double>();
                    EXPECT_LE(err, 1e-4) << what;
                }
            }
        }
    }
    EXPECT_GT(with_lse, 0) << "no backend returned its lse";
}

// (c) the column-sum kernel from a given lse (one pass) against the two-pass kernel and the
// float64 reference, at the existing GPU tolerance (kernels_attention_test.cpp).
TEST(KernelsSdpaLseGpu, OnePassColumnSumsMatchTheTwoPassKernel) {
    REQUIRE_KERNELS();
    c10::InferenceMode guard;
    at::manual_seed(31);
    for (const auto dtype : {at::kBFloat16, at::kHalf}) {
        for (const auto& c : kCases) {
            for (const int64_t block_q : {64, 192}) {
                const int64_t h = 2;
                // Non-contiguous q, as the sampler's (B, L, H, D) projections give.
                const auto q = cuda_randn({c.b, c.lq, h, c.d}, dtype).transpose(1, 2);
                const auto k = cuda_randn({c.b, h, c.lk, c.d}, dtype);
                const auto v = cuda_randn({c.b, h, c.lk, c.d}, dtype);
                const std::string what = std::string(c10::toString(dtype)) + " b" +
                                         std::to_string(c.b) + " lq" + std::to_string(c.lq) +
                                         " lk" + std::to_string(c.lk) + " d" + std::to_string(c.d) +
                                         " bq" + std::to_string(block_q);
                const auto dense = vk::sdpa_with_lse(q, k, v);
                ASSERT_TRUE(dense.lse.defined()) << what;
                const auto one = vk::block_column_sum(q, k, block_q, std::nullopt,
                                                      vk::KernelPath::Cuda, {}, dense.lse);
                const auto two =
                    vk::block_column_sum(q, k, block_q, std::nullopt, vk::KernelPath::Cuda);
                torch::cuda::synchronize();
                const auto ref = vk::reference::block_column_sum(
                    q.to(at::kDouble), k.to(at::kDouble), block_q, std::nullopt);
                ASSERT_EQ(one.sizes(), ref.sizes()) << what;
                auto rel = [&](const at::Tensor& a) {
                    const auto x = a.to(at::kDouble).cpu(), y = ref.to(at::kDouble).cpu();
                    EXPECT_TRUE(x.isfinite().all().item<bool>()) << what;
                    return ((x - y).norm() / y.norm()).item<double>();
                };
                // torch at this precision: scores from a low-precision matmul, softmax in fp32.
                const double s = 1.0 / std::sqrt(static_cast<double>(c.d));
                const auto p =
                    at::softmax(at::matmul(q, k.transpose(-2, -1)).to(at::kFloat) * s, -1);
                const int64_t nqb = (c.lq + block_q - 1) / block_q;
                const auto torch_cs = at::constant_pad_nd(p, {0, 0, 0, nqb * block_q - c.lq})
                                          .view({c.b, h, nqb, block_q, c.lk})
                                          .sum(3);
                const double torch_err = rel(torch_cs), err_one = rel(one), err_two = rel(two);
                EXPECT_LE(err_one, 2.0 * torch_err + 1e-6)
                    << what << ": one-pass " << err_one << " vs torch " << torch_err;
                EXPECT_LE(err_one, 2.0 * err_two + 1e-6)
                    << what << ": one-pass " << err_one << " vs two-pass " << err_two;
                const auto diff =
                    (one.to(at::kDouble) - two.to(at::kDouble)).norm() / two.to(at::kDouble).norm();
                EXPECT_LE(diff.item<double>(), 2.0 * torch_err + 1e-6) << what;
            }
        }
    }
}

// Inside a CUDA graph (as SparVAR's decision scale runs): no host sync, and the one-pass column
// sums launch one kernel fewer than the two-pass ones; replays on new inputs give the eager
// results.
TEST(KernelsSdpaLseGpu, CapturedInAGraphWithOneKernelFewer) {
    REQUIRE_KERNELS();
    if (!vk::cuda_graphs_built()) GTEST_SKIP() << "no CUDA graphs in this build";
    c10::InferenceMode guard;
    at::manual_seed(32);
    const auto dtype = at::kBFloat16;
    const int64_t block_q = 192;
    auto q = cuda_randn({1, 4, 256, 64}, dtype), k = cuda_randn({1, 4, 320, 64}, dtype),
         v = cuda_randn({1, 4, 320, 64}, dtype);
    at::Tensor out, sums, lse_given, sums_two;
    auto one_pass = [&] {
        const auto dense = vk::sdpa_with_lse(q, k, v);
        out = dense.out;
        sums =
            vk::block_column_sum(q, k, block_q, std::nullopt, vk::KernelPath::Cuda, {}, dense.lse);
    };
    vk::run_on_capture_stream(0, one_pass);  // warm-up outside the graph
    vk::CudaGraph graph;
    graph.capture(0, one_pass);
    ASSERT_TRUE(graph.captured());
    for (int round = 0; round < 2; ++round) {
        q.copy_(cuda_randn(q.sizes(), dtype));
        k.copy_(cuda_randn(k.sizes(), dtype));
        v.copy_(cuda_randn(v.sizes(), dtype));
        graph.replay();
        torch::cuda::synchronize();
        const auto eager = vk::sdpa_with_lse(q, k, v);
        EXPECT_TRUE(out.equal(eager.out)) << "round " << round;
        const auto eager_sums =
            vk::block_column_sum(q, k, block_q, std::nullopt, vk::KernelPath::Cuda, {}, eager.lse);
        EXPECT_TRUE(at::allclose(sums, eager_sums, 1e-5, 1e-6)) << "round " << round;
    }
    // Kernel nodes of the column sums alone, with and without a given lse.
    lse_given = vk::sdpa_with_lse(q, k, v).lse;
    vk::CudaGraph with_lse, without;
    with_lse.capture(0, [&] {
        sums =
            vk::block_column_sum(q, k, block_q, std::nullopt, vk::KernelPath::Cuda, {}, lse_given);
    });
    without.capture(0, [&] {
        sums_two = vk::block_column_sum(q, k, block_q, std::nullopt, vk::KernelPath::Cuda);
    });
    EXPECT_EQ(without.kernel_nodes(), with_lse.kernel_nodes() + 1)
        << "with lse " << with_lse.kernel_nodes() << ", without " << without.kernel_nodes();
}
