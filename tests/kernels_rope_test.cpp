// The fused RoPE's dispatch on CPU (kernels/rope.h): its argument checks name what is wrong,
// CPU tensors never take it (the ATen composition stays the CPU path and the reference), and
// InfinityBlock::project_qkv on CPU is still that composition whatever the policy says. The
// kernel itself is tested on CUDA (tests/gpu/kernels_rope_test.cpp).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/models/infinity.h"
#include "kernels/rope.h"
#include "tests/tiny_infinity.h"

namespace vk = varscope::kernels;
using namespace varscope;

namespace {

std::string error_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const c10::Error& e) {
        return e.what_without_backtrace();
    }
    return "";
}

}  // namespace

TEST(KernelsRope, ArgumentChecksNameTheProblem) {
    const auto x = at::zeros({2, 3, 5, 8});
    const auto rope = at::zeros({2, 5, 4});
    auto msg = [](const at::Tensor& a, const at::Tensor& r) {
        return error_of([&] { vk::fused_rope2d(a, r, at::kFloat); });
    };
    EXPECT_NE(msg(at::zeros({3, 5, 8}), rope).find("must be (B, H, L, c)"), std::string::npos);
    EXPECT_NE(msg(at::zeros({2, 3, 5, 7}), at::zeros({2, 5, 3})).find("must be even"),
              std::string::npos);
    EXPECT_NE(msg(x, at::zeros({3, 5, 4})).find("rope must be (2, L, c/2)"), std::string::npos);
    EXPECT_NE(msg(x, at::zeros({2, 6, 4})).find("does not fit x"), std::string::npos);
    EXPECT_NE(msg(x, at::zeros({2, 5, 8})).find("does not fit x"), std::string::npos);
    EXPECT_NE(msg(x, at::zeros({2, 3, 5, 4})).find("per-row rope"), std::string::npos);
    EXPECT_NE(msg(x, at::Tensor()).find("must be defined"), std::string::npos);
    const auto k = at::zeros({2, 3, 6, 8});
    EXPECT_NE(error_of([&] { vk::fused_rope2d(x, k, rope, at::kFloat); }).find("k"),
              std::string::npos);
    // Well-formed CPU tensors: not the kernel's, said so rather than crashing.
    EXPECT_NE(msg(x, rope).find("fused RoPE requested but"), std::string::npos);
    EXPECT_NE(msg(x, at::zeros({2, 2, 5, 4})).find("requested but"), std::string::npos);
}

TEST(KernelsRope, SupportNamesTheReason) {
    const auto x = at::zeros({1, 1, 4, 8});
    const auto rope = at::zeros({2, 4, 4});
    std::string why;
    EXPECT_FALSE(vk::fused_rope_supported(x, rope, at::kFloat, {}, &why));
    EXPECT_FALSE(why.empty());
    vk::KernelPolicy off;
    off.fused_rope = false;
    EXPECT_FALSE(vk::fused_rope_supported(x, rope, at::kFloat, off, &why));
    EXPECT_NE(why.find("switched off"), std::string::npos) << why;
    EXPECT_FALSE(vk::fused_rope_supported(at::Tensor(), rope, at::kFloat, {}, &why));
    EXPECT_TRUE(vk::KernelPolicy{}.fused_rope);  // on by default (CUDA only)
}

// apply_rope2d is the pairwise rotation, for shared and per-row positions and strided input.
TEST(KernelsRope, ReferenceRotatesAdjacentPairs) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
    const int64_t B = 2, H = 3, L = 7, c = 8;
    const auto x = at::randn({B, L, H, c}, gen).permute({0, 2, 1, 3});  // strided (B, H, L, c)
    const auto angles = at::rand({B, L, c / 2}, gen).mul(6.0);
    const auto xd = x.to(at::kDouble), ad = angles.to(at::kDouble);
    for (bool per_row : {false, true}) {
        const auto a = per_row ? ad : ad[1];
        const auto rope = at::stack({a.cos(), a.sin()}, 0).to(at::kFloat);
        const auto got = apply_rope2d(x, rope).to(at::kDouble);
        const auto cs = per_row ? a.cos().unsqueeze(1) : a.cos(),
                   sn = per_row ? a.sin().unsqueeze(1) : a.sin();
        const auto x0 = xd.narrow(-1, 0, c).slice(-1, 0, c, 2), x1 = xd.slice(-1, 1, c, 2);
        const auto y0 = got.slice(-1, 0, c, 2), y1 = got.slice(-1, 1, c, 2);
        EXPECT_TRUE(at::allclose(y0, cs * x0 - sn * x1, 1e-5, 1e-6)) << per_row;
        EXPECT_TRUE(at::allclose(y1, sn * x0 + cs * x1, 1e-5, 1e-6)) << per_row;
        EXPECT_TRUE(apply_rope2d(x.contiguous(), rope).equal(apply_rope2d(x, rope)));
    }
}

// On CPU the block's q and k are the ATen composition, with the fused kernel on or off.
TEST(KernelsRope, InfinityBlockOnCpuKeepsTheAtenPath) {
    c10::InferenceMode guard;
    const auto m = varscope::testing::tiny_block_infinity();
    auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
    const int64_t L = 5;
    const auto x = at::randn({2, L, 64}, gen);
    const auto rope = varscope::testing::tiny_block_rope(L, gen);
    const auto& blk = m->block(0);
    const auto q_mul = blk.sa->scale_mul_1H11.clamp_max(std::log(100.0)).exp();
    const auto raw = blk.sa->project_qkv(x, blk.sa->qkv_bias(), q_mul);
    vk::KernelPolicy off;
    off.fused_rope = false;
    for (const auto& policy : {vk::KernelPolicy{}, off}) {
        const auto r = blk.project_qkv(x, rope, policy);
        EXPECT_TRUE(r.q.equal(apply_rope2d(raw.q, rope)));
        EXPECT_TRUE(r.k.equal(apply_rope2d(raw.k, rope)));
        EXPECT_TRUE(r.v.equal(raw.v));
    }
}
