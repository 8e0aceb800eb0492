// The fused RoPE kernel (kernels/rope.h) against the ATen composition it replaces
// (core's apply_rope2d, then .to(bf16)): bitwise equal for fp32 and bf16 outputs, head dims 64
// and 128 (and 6: the one-pair-a-thread path), shared and per-row cos/sin, contiguous, permuted
// (as SelfAttention::project_qkv hands q and k over) and narrowed inputs, odd token counts. The
// caching allocator is poisoned with NaN first so an unwritten output shows. Skips without CUDA
// or without kernels for the device.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <limits>
#include <string>
#include <vector>

#include "core/models/infinity.h"
#include "kernels/rope.h"
#include "tests/gpu/poison_allocator.h"

namespace vk = varscope::kernels;

namespace {

const auto kCuda = at::TensorOptions().device(at::kCUDA);

bool rope_kernel_runnable(std::string* why) {
    if (!torch::cuda::is_available()) {
        *why = "no CUDA device";
        return false;
    }
    const auto x = at::zeros({1, 1, 1, 2}, kCuda);
    return vk::fused_rope_supported(x, at::zeros({2, 1, 1}, kCuda), at::kFloat, {}, why);
}

#define REQUIRE_ROPE_KERNEL()                                   \
    do {                                                        \
        std::string why_;                                       \
        if (!rope_kernel_runnable(&why_)) GTEST_SKIP() << why_; \
    } while (0)

// Same dtype, shape and every bit (NaN payloads and signed zeros included).
void expect_same_bits(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
    ASSERT_EQ(got.scalar_type(), want.scalar_type()) << what;
    ASSERT_EQ(got.sizes(), want.sizes()) << what;
    EXPECT_TRUE(got.is_contiguous()) << what;
    const auto bits = got.scalar_type() == at::kFloat ? at::kInt : at::kShort;
    const auto a = got.contiguous().view(bits), b = want.contiguous().view(bits);
    const int64_t differ = a.ne(b).sum().item<int64_t>();
    EXPECT_EQ(differ, 0) << what << ": " << differ << " of " << a.numel() << " elements differ";
}

// cos/sin of random angles as infinity_rope makes them, (2, L, c/2) or (2, B, L, c/2), on CUDA.
at::Tensor random_rope(int64_t B, int64_t L, int64_t half, bool per_row, at::Generator& gen) {
    const auto angles = per_row ? at::rand({B, L, half}, gen) : at::rand({L, half}, gen);
    const auto a = angles.mul(40.0);
    return at::stack({a.cos(), a.sin()}, 0).to(at::kCUDA);
}

enum class Layout { Contiguous, Permuted, Normalised };

// q (B, H, L, c) on CUDA: contiguous, a slice of a (B, L, 3, H, c) projection permuted to
// (3, B, H, L, c), or that slice l2-normalised and scaled (what project_qkv hands over).
at::Tensor random_x(int64_t B, int64_t H, int64_t L, int64_t c, Layout layout, at::Generator& gen) {
    if (layout == Layout::Contiguous) return at::randn({B, H, L, c}, gen).to(at::kCUDA);
    auto qkv = at::randn({B, L, 3, H, c}, gen).to(at::kCUDA).permute({2, 0, 3, 1, 4});
    auto q = qkv[1];  // k's slot: an offset that is not the allocation's start
    if (layout == Layout::Permuted) return q;
    return (q / q.norm(2, {-1}, true).clamp_min(1e-12)).mul(3.7);
}

}  // namespace

TEST(KernelsRopeGpu, BitwiseEqualToTheAtenComposition) {
    REQUIRE_ROPE_KERNEL();
    c10::InferenceMode guard;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(17);
    int cases = 0;
    for (int64_t c : {64, 128, 6})
        for (int64_t L : {1, 37, 256})
            for (bool per_row : {false, true})
                for (Layout layout : {Layout::Contiguous, Layout::Permuted, Layout::Normalised})
                    for (auto out : {at::kFloat, at::kBFloat16}) {
                        const int64_t B = 2, H = 3;
                        const std::string what = "c=" + std::to_string(c) +
                                                 " L=" + std::to_string(L) +
                                                 (per_row ? " per-row" : " shared") + " layout " +
                                                 std::to_string(static_cast<int>(layout)) +
                                                 (out == at::kFloat ? " fp32" : " bf16");
                        const auto x = random_x(B, H, L, c, layout, gen);
                        const auto rope = random_rope(B, L, c / 2, per_row, gen);
                        const auto want = varscope::apply_rope2d(x, rope).to(out);
                        varscope::testing::poison_cuda_allocator(B * H * L * c);
                        expect_same_bits(vk::fused_rope2d(x, rope, out), want, what);
                        ++cases;
                    }
    EXPECT_EQ(cases, 3 * 3 * 2 * 3 * 2);
}

TEST(KernelsRopeGpu, QueriesAndKeysInOneLaunchMatchOneByOne) {
    REQUIRE_ROPE_KERNEL();
    c10::InferenceMode guard;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
    const int64_t B = 2, H = 4, L = 21, c = 64;
    auto qkv = at::randn({B, L, 3, H, c}, gen).to(at::kCUDA).permute({2, 0, 3, 1, 4});
    const auto q = qkv[0].mul(1.5), k = qkv[1];
    for (bool per_row : {false, true}) {
        const auto rope = random_rope(B, L, c / 2, per_row, gen);
        varscope::testing::poison_cuda_allocator(B * H * L * c);
        const auto [rq, rk] = vk::fused_rope2d(q, k, rope, at::kBFloat16);
        expect_same_bits(rq, varscope::apply_rope2d(q, rope).to(at::kBFloat16), "q");
        expect_same_bits(rk, varscope::apply_rope2d(k, rope).to(at::kBFloat16), "k");
    }
}

// Strides the kernel does not read in place: a rope narrowed out of a longer one (the
// sampler's per-scale slice), an x whose rows start off 16 bytes, a transposed last dimension.
TEST(KernelsRopeGpu, NarrowedMisalignedAndTransposedInputs) {
    REQUIRE_ROPE_KERNEL();
    c10::InferenceMode guard;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(8);
    const int64_t B = 2, H = 2, L = 13, c = 64;
    const auto full = random_rope(B, 50, c / 2, false, gen);
    const auto rope = full.narrow(1, 17, L);
    const auto wide = at::randn({B, H, L, c + 2}, gen).to(at::kCUDA);
    const auto shifted = wide.narrow(3, 2, c);  // rows start 8 bytes in: one pair a thread
    const auto transposed = at::randn({B, H, c, L}, gen).to(at::kCUDA).transpose(2, 3);
    for (const auto& x : {shifted, transposed})
        for (auto out : {at::kFloat, at::kBFloat16})
            expect_same_bits(vk::fused_rope2d(x, rope, out),
                             varscope::apply_rope2d(x, rope).to(out), "strided");
}

TEST(KernelsRopeGpu, PolicyAndDtypesDecideSupport) {
    REQUIRE_ROPE_KERNEL();
    const auto x = at::zeros({1, 1, 4, 8}, kCuda);
    const auto rope = at::zeros({2, 4, 4}, kCuda);
    std::string why;
    EXPECT_TRUE(vk::fused_rope_supported(x, rope, at::kBFloat16, {}, &why)) << why;
    vk::KernelPolicy off;
    off.fused_rope = false;
    EXPECT_FALSE(vk::fused_rope_supported(x, rope, at::kFloat, off, &why));
    EXPECT_NE(why.find("switched off"), std::string::npos) << why;
    vk::KernelPolicy reference;
    reference.reference = true;
    EXPECT_FALSE(vk::fused_rope_supported(x, rope, at::kFloat, reference, &why));
    EXPECT_FALSE(vk::fused_rope_supported(x.to(at::kBFloat16), rope, at::kFloat, {}, &why));
    EXPECT_FALSE(vk::fused_rope_supported(x, rope, at::kHalf, {}, &why));
    EXPECT_THROW(vk::fused_rope2d(x, rope, at::kFloat, off), c10::Error);
}
