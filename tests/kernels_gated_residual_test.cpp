// The fused gated residual's dispatch on CPU (kernels/gated_residual.h): argument checks name what
// is wrong, CPU tensors never take it (the ATen composition stays the CPU path and the
// reference). The kernel itself is tested on CUDA (tests/gpu/kernels_gated_residual_test.cpp).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>

#include "kernels/gated_residual.h"
#include "tests/error_of.h"

namespace vk = varscope::kernels;
using varscope::testing::error_of;

TEST(KernelsGatedResidual, ArgumentChecksNameTheProblem) {
    const auto x = at::zeros({2, 5, 8}), y = x.to(at::kBFloat16), g = at::zeros({2, 1, 8});
    auto msg = [](const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) {
        return error_of<c10::Error>([&] { vk::fused_gated_residual(a, b, c, true); });
    };
    EXPECT_NE(msg(at::zeros({5, 8}), y, g).find("x must be (B, L, C)"), std::string::npos);
    EXPECT_NE(msg(x, y.narrow(1, 0, 4), g).find("must have x's shape"), std::string::npos);
    EXPECT_NE(msg(x, y, at::zeros({3, 1, 8})).find("gamma must be (B or 1, 1, C)"),
              std::string::npos);
    EXPECT_NE(msg(x, at::Tensor(), g).find("must be defined"), std::string::npos);
    // Well-formed CPU tensors: not the kernel's, said so rather than crashing.
    EXPECT_NE(msg(x, y, g).find("fused gated residual requested but"), std::string::npos);
    std::string why;
    EXPECT_FALSE(vk::fused_gated_residual_supported(x, y, g, {}, &why));
    EXPECT_FALSE(why.empty());
    vk::KernelPolicy off;  // the policy's switch is the first reason given (ExecPolicy)
    off.fused_elementwise = false;
    EXPECT_FALSE(vk::fused_gated_residual_supported(x, y, g, off, &why));
    EXPECT_NE(why.find("switched off"), std::string::npos) << why;
}
