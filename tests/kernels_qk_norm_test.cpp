// The fused q/k normalisation's dispatch on CPU (kernels/qk_norm.h): argument checks name what is
// wrong, CPU tensors never take it (the ATen composition stays the CPU path and the reference),
// and the policy's switch is the first reason given. The kernel itself is tested on CUDA
// (tests/gpu/kernels_qk_norm_test.cpp).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>

#include "kernels/qk_norm.h"
#include "tests/error_of.h"

namespace vk = varscope::kernels;
using varscope::testing::error_of;

TEST(KernelsQkNorm, ArgumentChecksNameTheProblem) {
    const auto q = at::zeros({2, 3, 5, 8}, at::kBFloat16);
    const auto n = at::ones({2, 3, 5, 1}), mul = at::ones({1, 3, 1, 1});
    auto msg = [&](const at::Tensor& a, const at::Tensor& b, const at::Tensor& na,
                   const at::Tensor& m) {
        return error_of<c10::Error>([&] { vk::fused_qk_norm_bf16(a, b, na, n, m); });
    };
    EXPECT_NE(msg(q.view({6, 5, 8}), q, n, mul).find("q must be (B, H, L, c)"), std::string::npos);
    EXPECT_NE(msg(q, q.narrow(2, 0, 4), n, mul).find("must have q's shape"), std::string::npos);
    EXPECT_NE(msg(q, q, n.narrow(2, 0, 4), mul).find("norm_q must be (B, H, L, 1)"),
              std::string::npos);
    EXPECT_NE(msg(q, q, n, at::ones({1, 2, 1, 1})).find("mul must be (1, H or 1, 1, 1)"),
              std::string::npos);
    EXPECT_NE(msg(q, at::Tensor(), n, mul).find("must be defined"), std::string::npos);
    // Well-formed CPU tensors: not the kernel's, said so rather than crashing.
    EXPECT_NE(msg(q, q, n, mul).find("fused q/k norm requested but"), std::string::npos);
    std::string why;
    EXPECT_FALSE(vk::fused_qk_norm_supported(q, q, n, n, mul, {}, &why));
    EXPECT_FALSE(why.empty());
    vk::KernelPolicy off;
    off.fused_elementwise = false;
    EXPECT_FALSE(vk::fused_qk_norm_supported(q, q, n, n, mul, off, &why));
    EXPECT_NE(why.find("switched off"), std::string::npos) << why;
}
