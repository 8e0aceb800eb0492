// The fused gated-residual kernel (kernels/gated_residual.h) against the ATen composition it
// replaces (x + y.mul(gamma), with .to(bf16) on the product where ATen's product is bf16):
// bitwise equal for fp32 and bf16 gates, the product rounded and not, widths 2048 / 320 / 6,
// per-row and broadcast gates, strided gates, special values. The allocator is poisoned with
// NaN first so an unwritten output shows. Skips without CUDA or without kernels for the device.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <limits>
#include <string>
#include <vector>

#include "kernels/gated_residual.h"
#include "tests/gpu/poison_allocator.h"
#include "tests/gpu/special_values.h"

namespace vk = varscope::kernels;

namespace {

const auto kCuda = at::TensorOptions().device(at::kCUDA);

#define REQUIRE_GATED_RESIDUAL_KERNEL()                                                   \
    do {                                                                                  \
        if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";               \
        std::string why_;                                                                 \
        const auto x_ = at::zeros({1, 1, 4}, kCuda);                                      \
        if (!vk::fused_gated_residual_supported(x_, x_.to(at::kBFloat16), x_, {}, &why_)) \
            GTEST_SKIP() << why_;                                                         \
    } while (0)

void expect_same_bits(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
    ASSERT_EQ(got.scalar_type(), at::kFloat) << what;
    ASSERT_EQ(want.scalar_type(), at::kFloat) << what;
    ASSERT_EQ(got.sizes(), want.sizes()) << what;
    EXPECT_TRUE(got.is_contiguous()) << what;
    const auto a = got.view(at::kInt), b = want.contiguous().view(at::kInt);
    const int64_t differ = a.ne(b).sum().item<int64_t>();
    EXPECT_EQ(differ, 0) << what << ": " << differ << " of " << a.numel() << " elements differ";
}

// What the ATen path computes (InfinityBlock's sa_output and ffn_branch, then the sum).
at::Tensor reference(const at::Tensor& x, const at::Tensor& y, const at::Tensor& gamma,
                     bool round) {
    const auto prod = y.mul(gamma);
    return x + (round ? prod.to(at::kBFloat16) : prod);
}

}  // namespace

TEST(KernelsGatedResidualGpu, BitwiseEqualToTheAtenComposition) {
    REQUIRE_GATED_RESIDUAL_KERNEL();
    c10::InferenceMode guard;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(31);
    int cases = 0;
    for (int64_t C : {2048, 320, 6})
        for (int64_t L : {1, 37})
            for (bool broadcast : {false, true})
                for (auto gamma_type : {at::kFloat, at::kBFloat16})
                    for (bool round : {true, false}) {
                        const int64_t B = 3;
                        const std::string what =
                            "C=" + std::to_string(C) + " L=" + std::to_string(L) +
                            (broadcast ? " broadcast" : " per-row") +
                            (gamma_type == at::kFloat ? " fp32 gate" : " bf16 gate") +
                            (round ? " rounded" : " fp32 product");
                        const auto x = at::randn({B, L, C}, gen).mul(4.0).to(at::kCUDA);
                        const auto y = at::randn({B, L, C}, gen).to(at::kCUDA, at::kBFloat16);
                        // A gate as Modulation hands it over: a view of one (B, 1, 6, C).
                        const auto gss =
                            at::randn({broadcast ? 1 : B, 1, 6, C}, gen).to(at::kCUDA, gamma_type);
                        const auto gamma = gss.unbind(2)[0];
                        // ATen's product is bf16 exactly when the gate is: the fp32-gate rows
                        // without rounding and the bf16-gate rows with it are what blocks run.
                        if (gamma_type == at::kBFloat16 && !round) continue;
                        varscope::testing::poison_cuda_allocator(B * L * C);
                        expect_same_bits(vk::fused_gated_residual(x, y, gamma, round),
                                         reference(x, y, gamma, round), what);
                        ++cases;
                    }
    EXPECT_EQ(cases, 3 * 2 * 2 * 3);
}

TEST(KernelsGatedResidualGpu, SpecialValuesAndStridedInputs) {
    REQUIRE_GATED_RESIDUAL_KERNEL();
    c10::InferenceMode guard;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(6);
    const int64_t B = 2, L = 16, C = 64;
    const auto x = varscope::testing::special_values_stream(B, L, C, gen, 5);
    const auto xc = x.to(at::kCUDA);
    const auto y = at::randn({B, C, L}, gen).to(at::kCUDA, at::kBFloat16).transpose(1, 2);
    const auto gamma = at::randn({B, C, 2}, gen).to(at::kCUDA).select(2, 0).unsqueeze(1);
    for (bool round : {true, false})
        expect_same_bits(vk::fused_gated_residual(xc, y, gamma, round),
                         reference(xc, y, gamma, round), round ? "rounded" : "fp32 product");
}

TEST(KernelsGatedResidualGpu, PolicyDtypesAndShapesDecide) {
    REQUIRE_GATED_RESIDUAL_KERNEL();
    const auto x = at::zeros({2, 3, 8}, kCuda), g = at::zeros({2, 1, 8}, kCuda);
    const auto y = x.to(at::kBFloat16);
    std::string why;
    vk::KernelPolicy reference;
    reference.reference = true;
    EXPECT_FALSE(vk::fused_gated_residual_supported(x, y, g, reference, &why));
    EXPECT_FALSE(why.empty());
    EXPECT_FALSE(vk::fused_gated_residual_supported(x, x, g, {}, &why));  // fp32 y
    EXPECT_NE(why.find("bfloat16 y"), std::string::npos) << why;
    EXPECT_FALSE(vk::fused_gated_residual_supported(x, y, at::zeros({2, 3, 8}, kCuda), {}, &why));
    EXPECT_NE(why.find("(B or 1, 1, C)"), std::string::npos) << why;
    EXPECT_TRUE(vk::fused_gated_residual_supported(x, y, g, {}, &why)) << why;
    EXPECT_THROW(vk::fused_gated_residual(x, y.narrow(1, 0, 2), g, true), c10::Error);
    EXPECT_EQ(vk::fused_gated_residual(at::zeros({2, 0, 8}, kCuda),
                                       at::zeros({2, 0, 8}, kCuda).to(at::kBFloat16), g, true)
                  .numel(),
              0);
}
