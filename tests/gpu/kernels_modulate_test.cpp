// The fused AdaLN modulation kernel (kernels/modulate.h) against the ATen composition it replaces
// (x.mul(scale).add_(shift).to(bf16)): bitwise equal for widths 2048 (Infinity-2B), 320 (the
// embedded model) and 6 (the one-channel-a-thread path), per-row and broadcast modulation,
// scale/shift as the strided views Modulation hands over, values around bf16 rounding ties and
// special values; and with the LayerNorm in the same kernel (its Welford order, all widths of
// the models). The allocator is poisoned with NaN first so an unwritten output shows. Skips
// without CUDA or without kernels for the device.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <limits>
#include <string>
#include <vector>

#include "kernels/modulate.h"
#include "tests/gpu/poison_allocator.h"
#include "tests/gpu/special_values.h"

namespace vk = varscope::kernels;

namespace {

const auto kCuda = at::TensorOptions().device(at::kCUDA);

#define REQUIRE_MODULATE_KERNEL()                                                       \
    do {                                                                                \
        if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";             \
        std::string why_;                                                               \
        const auto z_ = at::zeros({1, 1, 4}, kCuda);                                    \
        if (!vk::fused_modulate_supported(z_, z_, z_, {}, &why_)) GTEST_SKIP() << why_; \
    } while (0)

void expect_same_bits(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
    ASSERT_EQ(got.scalar_type(), at::kBFloat16) << what;
    ASSERT_EQ(got.sizes(), want.sizes()) << what;
    EXPECT_TRUE(got.is_contiguous()) << what;
    const auto a = got.view(at::kShort), b = want.contiguous().view(at::kShort);
    const int64_t differ = a.ne(b).sum().item<int64_t>();
    EXPECT_EQ(differ, 0) << what << ": " << differ << " of " << a.numel() << " elements differ";
}

// What the ATen path computes (InfinityBlock's adaLN, then the linear's cast).
at::Tensor reference(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& shift) {
    return x.mul(scale).add_(shift).to(at::kBFloat16);
}

}  // namespace

TEST(KernelsModulateGpu, BitwiseEqualToTheAtenComposition) {
    REQUIRE_MODULATE_KERNEL();
    c10::InferenceMode guard;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(23);
    int cases = 0;
    for (int64_t C : {2048, 320, 6})
        for (int64_t L : {1, 37, 256})
            for (bool broadcast : {false, true}) {
                const int64_t B = 3;
                const std::string what = "C=" + std::to_string(C) + " L=" + std::to_string(L) +
                                         (broadcast ? " broadcast" : " per-row");
                // LayerNorm-like x; Modulation's scale and shift: views of one (B, 1, 6, C).
                const auto x = at::randn({B, L, C}, gen).to(at::kCUDA);
                const auto gss =
                    at::randn({broadcast ? 1 : B, 1, 6, C}, gen).mul(0.3).to(at::kCUDA);
                const auto parts = gss.unbind(2);
                const auto scale = parts[3].add(1), shift = parts[5];
                varscope::testing::poison_cuda_allocator(B * L * C);
                expect_same_bits(vk::fused_modulate_bf16(x, scale, shift),
                                 reference(x, scale, shift), what);
                ++cases;
            }
    EXPECT_EQ(cases, 3 * 3 * 2);
}

// Products and sums that land on or next to bf16 rounding ties, huge and tiny magnitudes,
// signed zeros, infinities: a fused multiply-add or another rounding would show here.
TEST(KernelsModulateGpu, RoundingTiesAndSpecialValues) {
    REQUIRE_MODULATE_KERNEL();
    c10::InferenceMode guard;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(4);
    const int64_t B = 2, L = 64, C = 64;
    auto x = varscope::testing::special_values_stream(B, L, C, gen);
    x = x.to(at::kCUDA);
    const auto scale = (at::rand({B, 1, C}, gen).add(0.5)).to(at::kCUDA);
    const auto shift = at::randn({B, 1, C}, gen).mul(1e-3).to(at::kCUDA);
    expect_same_bits(vk::fused_modulate_bf16(x, scale, shift), reference(x, scale, shift),
                     "ties and special values");
}

// Inputs the kernel does not read in place: a non-contiguous x, a scale whose last dimension
// has stride 2, rows that start off 16 bytes (the one-channel path).
TEST(KernelsModulateGpu, StridedAndMisalignedInputs) {
    REQUIRE_MODULATE_KERNEL();
    c10::InferenceMode guard;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
    const int64_t B = 2, L = 19, C = 64;
    const auto xt = at::randn({B, C, L}, gen).to(at::kCUDA).transpose(1, 2);
    const auto wide = at::randn({B, L, C + 1}, gen).to(at::kCUDA);
    const auto shifted = wide.narrow(2, 1, C);
    const auto scale = at::randn({B, C, 2}, gen).to(at::kCUDA).select(2, 0).unsqueeze(1);
    const auto shift_wide = at::randn({B, 1, C + 1}, gen).to(at::kCUDA);
    const auto shift = shift_wide.narrow(2, 1, C);
    for (const auto& x : {xt, shifted})
        expect_same_bits(vk::fused_modulate_bf16(x, scale, shift), reference(x, scale, shift),
                         "strided");
}

TEST(KernelsModulateGpu, PolicyDtypesAndShapesDecide) {
    REQUIRE_MODULATE_KERNEL();
    const auto x = at::zeros({2, 3, 8}, kCuda), s = at::zeros({2, 1, 8}, kCuda);
    std::string why;
    vk::KernelPolicy reference;
    reference.reference = true;
    EXPECT_FALSE(vk::fused_modulate_supported(x, s, s, reference, &why));
    EXPECT_FALSE(why.empty());
    EXPECT_FALSE(vk::fused_modulate_supported(x.to(at::kBFloat16), s, s, {}, &why));
    EXPECT_NE(why.find("float32"), std::string::npos) << why;
    EXPECT_FALSE(vk::fused_modulate_supported(x.clone().requires_grad_(), s, s, {}, &why));
    EXPECT_NE(why.find("backward"), std::string::npos) << why;
    EXPECT_FALSE(vk::fused_modulate_supported(x, at::zeros({2, 3, 8}, kCuda), s, {}, &why));
    EXPECT_NE(why.find("(B or 1, 1, C)"), std::string::npos) << why;
    EXPECT_TRUE(vk::fused_modulate_supported(x, s, s, {}, &why)) << why;
    EXPECT_THROW(vk::fused_modulate_bf16(x, at::zeros({3, 1, 8}, kCuda), s), c10::Error);
    EXPECT_THROW(vk::fused_modulate_bf16(x, s, at::zeros({2, 1, 7}, kCuda)), c10::Error);
    // Empty inputs are a valid no-op.
    EXPECT_EQ(vk::fused_modulate_bf16(at::zeros({2, 0, 8}, kCuda), s, s).numel(), 0);
}

// ---- the LayerNorm in the same kernel (fused_norm_modulate_bf16) ----

namespace {

// What the ATen path computes: at::layer_norm (ATen's vectorized kernel for these rows), then
// the modulation and the linear's cast.
at::Tensor norm_reference(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& shift,
                          double eps) {
    return reference(at::layer_norm(x, {x.size(2)}, {}, {}, eps), scale, shift);
}

}  // namespace

// Widths of the models (VAR-d30 1920, VAR-d16 1024, Infinity-2B 2048, 8B 3584, the embedded
// models 320 / 512) and ones that leave threads without a vector (4, 12, 100) or give them
// uneven shares (5124); rows of ordinary activations, of huge and tiny magnitudes, constant rows
// (zero variance) and zero rows; scale and shift per batch row and broadcast, as the per-call
// constants hand them over. Any other accumulation order of the Welford statistics shows here.
TEST(KernelsModulateGpu, NormModulateBitwiseEqualToLayerNormThenModulation) {
    REQUIRE_MODULATE_KERNEL();
    c10::InferenceMode guard;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(31);
    int cases = 0;
    for (int64_t C : {1920, 1024, 2048, 3584, 320, 512, 4, 12, 100, 5124})
        for (int64_t L : {1, 37})
            for (bool broadcast : {false, true}) {
                const int64_t B = 2;
                const std::string what = "C=" + std::to_string(C) + " L=" + std::to_string(L) +
                                         (broadcast ? " broadcast" : " per-row");
                // A residual stream: an offset per row, magnitudes from 2^-8 to 2^8.
                auto x = at::randn({B, L, C}, gen)
                             .mul(at::pow(2.0, at::randint(-8, 8, {B, L, 1}, gen)))
                             .add(at::randn({B, L, 1}, gen).mul(4.0));
                if (L > 2) {
                    x.select(1, 1).fill_(3.25f);  // a constant row: variance 0
                    x.select(1, 2).zero_();
                }
                x = x.to(at::kCUDA);
                const auto gss =
                    at::randn({broadcast ? 1 : B, 1, 6, C}, gen).mul(0.3).to(at::kCUDA);
                const auto scale = gss.select(2, 3).add(1);
                const auto shift = gss.select(2, 5);  // a strided view, as Modulation's
                std::string why;
                ASSERT_TRUE(vk::fused_norm_modulate_supported(x, scale, shift, {}, &why))
                    << what << ": " << why;
                for (double eps : {1e-6, 1e-5}) {
                    varscope::testing::poison_cuda_allocator(B * L * C);
                    expect_same_bits(vk::fused_norm_modulate_bf16(x, scale, shift, eps),
                                     norm_reference(x, scale, shift, eps),
                                     what + " eps " + std::to_string(eps));
                }
                ++cases;
            }
    EXPECT_EQ(cases, 10 * 2 * 2);
}

TEST(KernelsModulateGpu, NormModulateSpecialValuesAndWhereItIsOffered) {
    REQUIRE_MODULATE_KERNEL();
    c10::InferenceMode guard;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
    const int64_t B = 2, L = 64, C = 64;
    const auto x = varscope::testing::special_values_stream(B, L, C, gen).to(at::kCUDA);
    const auto scale = (at::rand({B, 1, C}, gen).add(0.5)).to(at::kCUDA);
    const auto shift = at::randn({B, 1, C}, gen).mul(1e-3).to(at::kCUDA);
    expect_same_bits(vk::fused_norm_modulate_bf16(x, scale, shift, 1e-6),
                     norm_reference(x, scale, shift, 1e-6), "special values");
    // Where ATen would not run its vectorized LayerNorm, or the kernel cannot read float4 rows.
    std::string why;
    const auto wide = at::zeros({B, L, C + 4}, kCuda);
    EXPECT_FALSE(vk::fused_norm_modulate_supported(wide.narrow(2, 0, C), scale, shift, {}, &why));
    EXPECT_FALSE(vk::fused_norm_modulate_supported(at::zeros({B, L, 6}, kCuda),
                                                   at::zeros({B, 1, 6}, kCuda),
                                                   at::zeros({B, 1, 6}, kCuda), {}, &why));
    const auto flat = at::zeros({B * L * C + 1}, kCuda);
    EXPECT_FALSE(vk::fused_norm_modulate_supported(flat.narrow(0, 1, B * L * C).view({B, L, C}),
                                                   scale, shift, {}, &why));
    EXPECT_NE(why.find("vectorized LayerNorm"), std::string::npos) << why;
    const auto shift_wide = at::zeros({B, 1, C + 1}, kCuda);
    EXPECT_FALSE(vk::fused_norm_modulate_supported(x, scale, shift_wide.narrow(2, 1, C), {}, &why));
    vk::KernelPolicy off;
    off.fused_elementwise = false;
    EXPECT_FALSE(vk::fused_norm_modulate_supported(x, scale, shift, off, &why));
    EXPECT_EQ(vk::fused_norm_modulate_bf16(at::zeros({B, 0, C}, kCuda), scale, shift, 1e-6).numel(),
              0);
}
