// core/models/block_elementwise.h on the CPU, where the ATen composition always runs: the
// modulated input and the gated residual give exactly the expressions the VAR and Infinity
// blocks wrote before (the product in ATen's promoted dtype, or rounded back to the branch's),
// for every dtype pairing the precisions produce. The fused CUDA kernels behind them are held to
// the same expressions in tests/gpu/kernels_{modulate,gated_residual}_test.cpp.
#include "core/models/block_elementwise.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <string>

namespace varscope {
namespace {

bool same_bits(const at::Tensor& a, const at::Tensor& b) {
    return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() && a.equal(b);
}

TEST(BlockElementwise, ModulatedInputIsTheCompositionOnTheCpu) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(2);
    const auto normed = at::randn({2, 5, 8}, gen);
    const kernels::KernelPolicy policy;
    for (auto dtype : {at::kFloat, at::kBFloat16}) {
        const auto s = at::randn({2, 1, 8}, gen).to(dtype).add(1),
                   t = at::randn({2, 1, 8}, gen).to(dtype);
        torch::nn::Linear consumer(8, 8);
        consumer->to(at::kBFloat16);
        const auto want = normed.mul(s).add_(t);
        for (const kernels::KernelPolicy* fuse :
             {&policy, static_cast<const kernels::KernelPolicy*>(nullptr)})
            EXPECT_TRUE(same_bits(modulated_input(normed, s, t, consumer, fuse), want))
                << (dtype == at::kFloat ? "fp32" : "bf16") << (fuse ? " fuse" : "");
    }
}

TEST(BlockElementwise, GatedResidualFormsTheProductAsTheBlocksDid) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
    const auto x = at::randn({2, 5, 8}, gen).mul(3.0);
    const kernels::KernelPolicy policy;
    struct Case {
        at::ScalarType y, gamma;
        GateProduct product;
        bool rounded;  // the product rounded to y's dtype before the sum
    };
    const Case cases[] = {
        {at::kBFloat16, at::kFloat, GateProduct::Promoted, false},    // Infinity's FFN
        {at::kBFloat16, at::kFloat, GateProduct::AsBranch, true},     // Infinity's attention
        {at::kBFloat16, at::kBFloat16, GateProduct::Promoted, true},  // VAR under autocast
        {at::kFloat, at::kFloat, GateProduct::Promoted, false},       // fp32 models
    };
    for (const auto& c : cases) {
        const auto y = at::randn({2, 5, 8}, gen).to(c.y);
        const auto gamma = at::randn({2, 1, 8}, gen).to(c.gamma);
        const auto prod = y.mul(gamma);
        const auto want = x + (c.rounded ? prod.to(c.y) : prod);
        for (const kernels::KernelPolicy* fuse :
             {&policy, static_cast<const kernels::KernelPolicy*>(nullptr)}) {
            const auto got = gated_residual(x, y, gamma, c.product, fuse);
            EXPECT_TRUE(same_bits(got, want))
                << c10::toString(c.y) << " x " << c10::toString(c.gamma);
            EXPECT_EQ(got.scalar_type(), at::kFloat);
        }
    }
    // The rounding is visible: an fp32 product differs from its bf16 rounding somewhere here.
    const auto y = at::randn({2, 5, 8}, gen).to(at::kBFloat16);
    const auto g = at::randn({2, 1, 8}, gen);
    EXPECT_FALSE(gated_residual(x, y, g, GateProduct::Promoted, nullptr)
                     .equal(gated_residual(x, y, g, GateProduct::AsBranch, nullptr)));
}

}  // namespace
}  // namespace varscope
