// The bf16-autocast precision (LoadOptions::autocast, VarTransformerImpl::use_autocast_bf16):
// which weights become bf16 copies and which stay fp32, the fp32 residual stream, and that the
// mode samples. Token equality with the official sampler under torch.autocast is checked on
// the GPU against the official code (tools/parity/var_speed.py); graphs == eager in
// tests/gpu/var_graph_test.cpp.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include "core/io/module_binding.h"
#include "tests/tiny_models.h"

using namespace varscope;
namespace vt = varscope::testing;

namespace {

VarPipeline autocast_copy(VarPipeline& fp32) {
    auto p = VarPipeline::random(fp32.var_config(), fp32.vae_config(), 0,
                                 load_options("cpu", "bf16-autocast"));
    c10::InferenceMode g;
    bind_state_dict(*p.sampler().transformer(), module_state_dict(*fp32.sampler().transformer()),
                    {});
    bind_state_dict(*p.sampler().vqvae(), module_state_dict(*fp32.sampler().vqvae()), {});
    return p;
}

}  // namespace

TEST(VarAutocast, LoadOptions) {
    const auto o = load_options("cpu", "bf16-autocast");
    EXPECT_EQ(o.precision, Precision::Bf16);
    EXPECT_TRUE(o.autocast);
    EXPECT_FALSE(load_options("cpu", "bf16").autocast);
    EXPECT_THROW(load_options("cpu", "fp16-autocast"), std::invalid_argument);
    EXPECT_THROW(VarPipeline::random(vt::tiny_var_config(), vt::tiny_vqvae_config(), 0,
                                     {"cpu", Precision::Fp16, true}),
                 std::invalid_argument);
}

// tf32: an fp32 mode; on the CPU (no TF32 there) it samples exactly what fp32 does and leaves
// torch's process-wide TF32 setting alone.
TEST(VarAutocast, Tf32IsAnFp32ModeAndANoOpOnTheCpu) {
    const auto o = load_options("cpu", "tf32");
    EXPECT_EQ(o.precision, Precision::Fp32);
    EXPECT_TRUE(o.tf32);
    EXPECT_FALSE(o.autocast);
    EXPECT_FALSE(load_options("cpu", "fp32").tf32);
    LoadOptions bad{"cpu", Precision::Bf16};
    bad.tf32 = true;
    EXPECT_THROW(VarPipeline::random(vt::tiny_var_config(), vt::tiny_vqvae_config(), 0, bad),
                 std::invalid_argument);

    auto fp32 = VarPipeline::random(vt::tiny_var_config(), vt::tiny_vqvae_config(), 5,
                                    load_options("cpu", "fp32"));
    auto tf32 =
        VarPipeline::random(fp32.var_config(), fp32.vae_config(), 0, load_options("cpu", "tf32"));
    {
        c10::InferenceMode g;  // same weights on both sides
        bind_state_dict(*tf32.sampler().transformer(),
                        module_state_dict(*fp32.sampler().transformer()), {});
        bind_state_dict(*tf32.sampler().vqvae(), module_state_dict(*fp32.sampler().vqvae()), {});
    }
    EXPECT_TRUE(tf32.sampler().tf32());
    EXPECT_FALSE(fp32.sampler().tf32());
    const bool before = at::globalContext().allowTF32CuBLAS();
    VarSampleOptions so;
    so.class_ids = {1, 2};
    so.seed = 3;
    const auto a = fp32.generate(so);
    const auto b = tf32.generate(so);
    ASSERT_EQ(a.tokens.size(), b.tokens.size());
    for (size_t si = 0; si < a.tokens.size(); ++si) EXPECT_TRUE(a.tokens[si].equal(b.tokens[si]));
    EXPECT_TRUE(a.images.equal(b.images));
    EXPECT_EQ(at::globalContext().allowTF32CuBLAS(), before);
}

TEST(VarAutocast, LinearInputsBf16RestFp32) {
    auto fp32 = vt::small_pipeline();
    auto p = autocast_copy(fp32);
    auto var = p.sampler().transformer();
    EXPECT_TRUE(var->autocast_bf16());
    EXPECT_EQ(var->compute_dtype(), at::kBFloat16);
    for (const auto& t : var->named_parameters()) {
        const auto& n = t.key();
        const bool linear =
            n.find("mat_qkv") != std::string::npos || n.find("proj.") != std::string::npos ||
            n.find("ffn.") != std::string::npos || n.find("ada_lin") != std::string::npos ||
            n.find("q_bias") != std::string::npos || n.find("v_bias") != std::string::npos ||
            n.rfind("word_embed.", 0) == 0 || n.rfind("head.", 0) == 0;
        EXPECT_EQ(t.value().scalar_type(), linear ? at::kBFloat16 : at::kFloat) << n;
        // The copies are the fp32 weights rounded once (what autocast's casts give).
        const auto original = module_state_dict(*fp32.sampler().transformer()).at(n);
        EXPECT_TRUE(t.value().equal(original.to(t.value().scalar_type()))) << n;
    }
    for (const auto& t : p.sampler().vqvae()->parameters()) EXPECT_EQ(t.scalar_type(), at::kFloat);
}

TEST(VarAutocast, Fp32StreamBf16Products) {
    auto fp32 = vt::small_pipeline();
    auto p = autocast_copy(fp32);
    c10::InferenceMode g;
    const auto& var = *p.sampler().transformer();
    const auto cond = var.class_embedding(at::tensor({2, -1}, at::kLong));
    EXPECT_EQ(cond.scalar_type(), at::kFloat);
    const auto x = var.first_scale_input(cond);
    EXPECT_EQ(x.scalar_type(), at::kFloat);
    const auto& blk = var.block(0);
    const auto k = blk.constants(cond);
    EXPECT_EQ(k.m.gamma1.scalar_type(), at::kBFloat16);  // nn.Linear output under autocast
    EXPECT_EQ(k.scale1p.scalar_type(), at::kBFloat16);   // 1 + scale rounded in bf16
    EXPECT_EQ(k.q_mul.scalar_type(), at::kFloat);
    const auto a = blk.attn_input(x, k);
    EXPECT_EQ(a.scalar_type(), at::kFloat);  // LayerNorm and modulation in fp32
    const auto qkv = blk.attn->project_qkv(a, k.qkv_bias, k.q_mul);
    EXPECT_EQ(qkv.q.scalar_type(), at::kBFloat16);
    EXPECT_EQ(qkv.k.scalar_type(), at::kBFloat16);
    // q and k: normalised in fp32, then rounded (what autocast's SDPA receives).
    const auto raw = at::linear(a.to(at::kBFloat16), blk.attn->mat_qkv->weight, k.qkv_bias)
                         .view({2, 1, 3, var.config().num_heads, var.config().head_dim()})
                         .permute({2, 0, 3, 1, 4});
    const auto kf = raw[1].to(at::kFloat);
    const auto expect_k = (kf / kf.norm(2, {-1}, true).clamp_min(1e-12)).to(at::kBFloat16);
    EXPECT_TRUE(at::allclose(qkv.k.to(at::kFloat), expect_k.to(at::kFloat), 0, 0.0079));
    const auto h = x + blk.ffn_branch(x, k);
    EXPECT_EQ(h.scalar_type(), at::kFloat);  // fp32 residual stream
    // The sampler's constants for the fp32 stream: the factors in fp32, the same values, so the
    // same modulated inputs to the bit (the product promoted them before).
    const auto k32 = blk.constants(cond, /*fp32_stream=*/true);
    for (const auto& [a32, a16] : {std::pair{k32.scale1p, k.scale1p},
                                   {k32.scale2p, k.scale2p},
                                   {k32.shift1, k.shift1},
                                   {k32.shift2, k.shift2}}) {
        EXPECT_EQ(a32.scalar_type(), at::kFloat);
        EXPECT_TRUE(a32.equal(a16.to(at::kFloat)));
    }
    EXPECT_TRUE(blk.attn_input(x, k32).equal(a));
    EXPECT_TRUE(blk.ffn_branch(x, k32).equal(blk.ffn_branch(x, k)));
    EXPECT_TRUE(blk.ffn_residual(x, k32, nullptr).equal(blk.ffn_residual(x, k, nullptr)));
    const auto logits = var.logits(x, cond);
    EXPECT_EQ(logits.scalar_type(), at::kFloat);
}

TEST(VarAutocast, SamplesAndStaysCloseToFp32) {
    auto fp32 = vt::small_pipeline();
    auto p = autocast_copy(fp32);
    const auto a = p.generate(vt::exact_options({1, 4}, 3));
    ASSERT_EQ(a.tokens.size(), fp32.var_config().patch_nums.size());
    EXPECT_TRUE(a.images.isfinite().all().item<bool>());
    for (const auto& t : a.tokens) EXPECT_TRUE(t.ge(0).all().item<bool>());
    // The first scale's logits: bf16 products, fp32 elsewhere: close to the fp32 model's.
    c10::InferenceMode g;
    auto first_logits = [](VarPipeline& pipe) {
        const auto& var = *pipe.sampler().transformer();
        const auto cond = var.class_embedding(at::tensor({1, 4, -1, -1}, at::kLong));
        auto x = var.first_scale_input(cond);
        for (int64_t l = 0; l < var.config().depth; ++l) {
            const auto& blk = var.block(l);
            const auto k = blk.constants(cond);
            const auto qkv = blk.attn->project_qkv(blk.attn_input(x, k), k.qkv_bias, k.q_mul);
            const auto o = attention_sdpa(qkv.q, qkv.k, qkv.v, blk.attn->softmax_scale());
            x = x + blk.attn->project_out(o).mul(k.m.gamma1);
            x = x + blk.ffn_branch(x, k);
            EXPECT_EQ(x.scalar_type(), at::kFloat);
        }
        return var.logits(x, cond);
    };
    const auto la = first_logits(p), lf = first_logits(fp32);
    EXPECT_LT(((la - lf).norm() / lf.norm()).item<double>(), 0.05);
    EXPECT_GT(((la - lf).norm() / lf.norm()).item<double>(), 0.0);  // bf16 products ran
}
