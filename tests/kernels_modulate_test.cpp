// The fused AdaLN modulation's dispatch on CPU (kernels/modulate.h): argument checks name what
// is wrong, CPU tensors never take it (the ATen composition stays the CPU path and the
// reference), and InfinityBlock::attention_inputs on CPU is project_qkv(sa_input) whatever the
// policy says. The kernel itself is tested on CUDA (tests/gpu/kernels_modulate_test.cpp).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <string>

#include "core/models/infinity.h"
#include "kernels/modulate.h"
#include "tests/error_of.h"
#include "tests/tiny_infinity.h"

namespace vk = varscope::kernels;
using namespace varscope;

using varscope::testing::error_of;

TEST(KernelsModulate, ArgumentChecksNameTheProblem) {
    const auto x = at::zeros({2, 5, 8}), s = at::zeros({2, 1, 8});
    auto msg = [](const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) {
        return error_of<c10::Error>([&] { vk::fused_modulate_bf16(a, b, c); });
    };
    EXPECT_NE(msg(at::zeros({5, 8}), s, s).find("x must be (B, L, C)"), std::string::npos);
    EXPECT_NE(msg(x, at::zeros({2, 1, 7}), s).find("scale must be (B or 1, 1, C)"),
              std::string::npos);
    EXPECT_NE(msg(x, s, at::zeros({3, 1, 8})).find("shift must be"), std::string::npos);
    EXPECT_NE(msg(x, s, at::zeros({2, 2, 8})).find("shift must be"), std::string::npos);
    EXPECT_NE(msg(x, at::Tensor(), s).find("must be defined"), std::string::npos);
    // Well-formed CPU tensors: not the kernel's, said so rather than crashing.
    EXPECT_NE(msg(x, s, s).find("fused modulation requested but"), std::string::npos);
    EXPECT_NE(msg(x, at::zeros({1, 1, 8}), s).find("requested but"), std::string::npos);
    std::string why;
    EXPECT_FALSE(vk::fused_modulate_supported(x, s, s, {}, &why));
    EXPECT_FALSE(why.empty());
    vk::KernelPolicy off;  // the policy's switch is the first reason given (ExecPolicy)
    off.fused_elementwise = false;
    EXPECT_FALSE(vk::fused_modulate_supported(x, s, s, off, &why));
    EXPECT_NE(why.find("switched off"), std::string::npos) << why;
}

namespace {

// The block's sampling-loop path (per-call constants, kernel policies) against its per-step
// expressions, in fp32 or the official bf16 mode (bf16 modulation, fp32 LayerNorm output).
void attention_inputs_are_the_composition(bool bf16) {
    auto model = varscope::testing::tiny_block_infinity();
    if (bf16) model->use_autocast_bf16();
    c10::InferenceMode guard;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
    const int64_t B = 2, L = 5;
    const auto x = at::randn({B, L, 64}, gen);
    const auto rope = varscope::testing::tiny_block_rope(L, gen);
    const auto& blk = model->block(0);
    const auto gss = at::randn({B, 1, 6, 64}, gen).mul(0.2);
    const auto m = blk.modulation(gss);
    // The per-call constants (InfinityBlockConstants) give the per-step expressions' bits.
    const auto text = blk.ca->keys_values(at::randn({B, 3, 64}, gen));
    const auto k = blk.constants(m, text);
    const auto want = blk.project_qkv(blk.sa_input(x, m), rope);
    vk::KernelPolicy reference;
    reference.reference = true;
    for (const auto& policy : {vk::KernelPolicy{}, reference}) {
        const auto got = blk.attention_inputs(x, k, rope, policy);
        EXPECT_TRUE(got.q.equal(want.q));
        EXPECT_TRUE(got.k.equal(want.k));
        EXPECT_TRUE(got.v.equal(want.v));
        EXPECT_TRUE(blk.ffn_residual(x, k, &policy).equal(x + blk.ffn_branch(x, m)));
    }
    EXPECT_TRUE(blk.cross_input(x, k).equal(blk.cross_input(x)));
    const auto q = blk.ca->queries(blk.cross_input(x), text);
    EXPECT_TRUE(blk.ca->attend_values(q, k.text_values, {}).equal(blk.ca->attend(q, text, {})));
    // Round trip through the graph prologue's tensor list.
    const auto t = k.tensors();
    ASSERT_EQ(t.size(), varscope::InfinityBlockConstants::kTensors);
    const auto back = varscope::InfinityBlockConstants::from_tensors(t.data());
    for (size_t i = 0; i < t.size(); ++i) EXPECT_TRUE(back.tensors()[i].equal(t[i])) << i;
    // The modulation is fp32 in both modes (the shared gss is fp32, the bf16 ada_gss is
    // promoted): the fused kernel reads 1 + scale and the shift without a cast per step.
    for (const auto& f : {k.scale1p, k.scale2p, k.m.shift1, k.m.shift2})
        EXPECT_EQ(f.scalar_type(), at::kFloat);
    EXPECT_TRUE(blk.attention_inputs(x, back, rope).q.equal(want.q));
}

}  // namespace

TEST(KernelsModulate, AttentionInputsOnCpuAreTheComposition) {
    for (const bool bf16 : {false, true}) {
        SCOPED_TRACE(bf16 ? "official bf16 mode" : "fp32");
        attention_inputs_are_the_composition(bf16);
    }
}
