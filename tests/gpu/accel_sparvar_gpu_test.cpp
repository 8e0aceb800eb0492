// SparVAR on CUDA: the policy with the CUDA kernels (block-sparse CSLA, gathered CS4A, column
// sums at the decision scale) against the same policy forced onto the LibTorch reference
// (reference_kernels = true). Skips without CUDA or without kernels for the device.
//
// What is asserted, and why:
//   - Per attend() call, on identical q, k, v (both policies see the same inputs): the kernel
//     output is within the precision's tolerance of the reference. bf16/fp16 round the output
//     (and, for SDPA vs the eager reference, the probabilities), so the bounds are a few ulps of
//     the output precision; CS4A's sparse scales also inherit any Top-K tie that the kernel's
//     column sums broke differently, hence their looser bound.
//   - End to end in bf16 with greedy sampling: identical tokens before the decision scale (no
//     sparse attention runs there) and high token agreement after it. Not identical: a logit
//     difference of one bf16 ulp can flip an argmax near a tie, and flips propagate.
//   - In fp32 the kernels do not run (they take bf16/fp16), so the two settings are the same
//     code and the tokens must be identical.
//   - attention_flops: what attend() reports adds up to the run's total, is below dense, and
//     CSLA's count equals 4 * B * H * d * (pairs of the expanded block mask).
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <cstdio>
#include <map>
#include <string>

#include "core/accel/csla_mask.h"
#include "core/accel/probe_kinds.h"
#include "core/accel/sparvar.h"
#include "core/io/module_binding.h"
#include "kernels/attention_dispatch.h"
#include "tests/gpu/device_pipelines.h"
#include "tests/tiny_models.h"

using namespace varscope;
namespace vk = varscope::kernels;

namespace {

// Head dim 64 (the kernels take 64 or 128), scales up to 16x16, four blocks.
VarPipeline kernel_pipeline(Precision precision) {
    auto cpu = varscope::testing::kernel_sized_cpu_pipeline();
    return varscope::testing::with_weights_of(cpu, {"cuda", precision});
}

constexpr int64_t kDecisionScale = 5;  // 8 scales, sparse_scales 2
constexpr int64_t kCs4aLayers = 2;     // round(0.6 * 4)
constexpr const char* kLoopCountsFlops =
    "the sampling loop must sum attention FLOPs into VarSampleResult::attention_flops, with "
    "BlockContext::attention_flops for answered attend() calls (core/sampling/var_sampler.cpp)";

// Block and query block 64 so the kernels can run; sinks = scales 0, 1; small windows so the
// CSLA masks are sparse at 12x12 and 16x16.
SparVarConfig sparvar_config(bool reference) {
    return SparVarConfig::from_json({{"enabled", true},
                                     {"sparse_scales", 2},
                                     {"sink_scales", 2},
                                     {"windows", {1, 3}},
                                     {"middle_window", 1},
                                     {"block", 64},
                                     {"query_block", 64},
                                     {"top_k", 0.2},
                                     {"reference_kernels", reference}});
}

VarSampleOptions greedy() {
    VarSampleOptions o;
    o.class_ids = {1, 4};
    o.seed = 5;
    o.top_k = 1;
    o.top_p = 0;
    o.cfg = 2;
    o.decode = false;
    return o;
}

double rel(const at::Tensor& a, const at::Tensor& b) {
    const auto x = a.to(at::kCPU, at::kDouble), y = b.to(at::kCPU, at::kDouble);
    return ((x - y).norm() / y.norm()).item<double>();
}

// Runs the kernel policy (its output drives the loop) and the reference policy on the same
// inputs of every attend() call, and keeps the difference and the reported FLOPs.
struct Twin : SamplingHooks {
    std::shared_ptr<SamplingHooks> kern, ref;
    std::map<std::pair<int64_t, int64_t>, double> rel_err, kern_flops, ref_flops;
    int64_t kernel_capable = 0;  // calls whose q the kernels accept
    at::Tensor attend(const BlockContext& ctx, const at::Tensor& q, const at::Tensor& k,
                      const at::Tensor& v, double s) override {
        auto& mctx = const_cast<BlockContext&>(ctx);  // the loop's own, mutable context
        // Each policy's report plus the pairs it counted on the device for this call (CS4A
        // defers them: take_deferred_attention_flops, read here per call).
        const auto a = kern->attend(ctx, q, k, v, s);
        const double fa = ctx.attention_flops + kern->take_deferred_attention_flops(ctx.scale);
        mctx.attention_flops = -1.0;
        const auto b = ref->attend(ctx, q, k, v, s);
        const double fb = ctx.attention_flops + ref->take_deferred_attention_flops(ctx.scale);
        mctx.attention_flops = fa;
        EXPECT_EQ(a.defined(), b.defined())
            << "scale " << ctx.scale.scale << " layer " << ctx.layer;
        if (a.defined() && b.defined()) {
            const std::pair<int64_t, int64_t> key{ctx.scale.scale, ctx.layer};
            EXPECT_EQ(a.sizes(), q.sizes());
            EXPECT_EQ(a.scalar_type(), q.scalar_type());
            EXPECT_TRUE(a.isfinite().all().item<bool>());
            rel_err[key] = rel(a, b);
            kern_flops[key] = fa;
            ref_flops[key] = fb;
            kernel_capable += vk::cuda_attention_supported(q, 64, 64) ? 1 : 0;
        }
        return a;
    }
};

#define REQUIRE_CUDA() \
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

bool kernels_for(at::ScalarType t, std::string* why) {
    const auto probe = at::zeros({1, 2, 64, 64}, at::TensorOptions().dtype(t).device(at::kCUDA));
    return vk::cuda_attention_supported(probe, 64, 64, {}, why);
}

}  // namespace

TEST(GpuSparVar, KernelsMatchTheReferencePerCall) {
    REQUIRE_CUDA();
    std::string why;
    if (!kernels_for(at::kBFloat16, &why)) GTEST_SKIP() << why;
    for (auto precision : {Precision::Bf16, Precision::Fp16}) {
        const bool bf16 = precision == Precision::Bf16;
        auto p = kernel_pipeline(precision);
        Twin twin;
        twin.kern = make_sparvar(sparvar_config(false), p.var_config(), nullptr);
        twin.ref = make_sparvar(sparvar_config(true), p.var_config(), nullptr);
        p.generate(greedy(), &twin);
        // Decision scale: CS4A layers; sparse scales 6, 7: every layer (CSLA masks are sparse).
        ASSERT_EQ(twin.rel_err.size(), static_cast<size_t>(kCs4aLayers + 2 * 4));
        EXPECT_EQ(twin.kernel_capable, static_cast<int64_t>(twin.rel_err.size()));
        const double unit = bf16 ? 1.0 : 0.25;  // fp16 has 3 more mantissa bits
        for (const auto& [key, err] : twin.rel_err) {
            const auto [scale, layer] = key;
            const bool cs4a = layer < kCs4aLayers;
            const double bound = (scale == kDecisionScale || !cs4a ? 2e-2 : 6e-2) * unit;
            EXPECT_LT(err, bound) << (bf16 ? "bf16" : "fp16") << " scale " << scale << " layer "
                                  << layer << (cs4a ? " (CS4A)" : " (CSLA)");
            std::printf("%s scale %ld layer %ld %s: rel err %.2e, flops kernel %.4g ref %.4g\n",
                        bf16 ? "bf16" : "fp16", static_cast<long>(scale), static_cast<long>(layer),
                        cs4a ? "CS4A" : "CSLA", err, twin.kern_flops[key], twin.ref_flops[key]);
            // Same pairs on both paths except the decision scale's column-sum passes.
            if (scale != kDecisionScale) {
                EXPECT_DOUBLE_EQ(twin.kern_flops[key], twin.ref_flops[key]);
            } else {
                EXPECT_GT(twin.kern_flops[key], twin.ref_flops[key]);
            }
        }
    }
}

TEST(GpuSparVar, Bf16TokensAgreeWithTheReference) {
    REQUIRE_CUDA();
    std::string why;
    if (!kernels_for(at::kBFloat16, &why)) GTEST_SKIP() << why;
    auto p = kernel_pipeline(Precision::Bf16);
    const auto kern_hooks = make_sparvar(sparvar_config(false), p.var_config(), nullptr);
    const auto ref_hooks = make_sparvar(sparvar_config(true), p.var_config(), nullptr);
    const auto a = p.generate(greedy(), kern_hooks.get());
    const auto b = p.generate(greedy(), ref_hooks.get());
    ASSERT_EQ(a.tokens.size(), b.tokens.size());
    for (int64_t s = 0; s < kDecisionScale; ++s)
        EXPECT_TRUE(a.tokens[s].equal(b.tokens[s])) << "scale " << s << " is dense in both";
    int64_t same = 0, total = 0;
    for (size_t s = kDecisionScale; s < a.tokens.size(); ++s) {
        same += a.tokens[s].eq(b.tokens[s]).sum().item<int64_t>();
        total += a.tokens[s].numel();
    }
    const double agreement = static_cast<double>(same) / static_cast<double>(total);
    std::printf("bf16 token agreement kernels vs reference (scales >= %ld): %.4f\n",
                static_cast<long>(kDecisionScale), agreement);
    EXPECT_GE(agreement, 0.8);
    // Even with the column-sum kernel's extra QK^T pass(es) at the decision scale, the run
    // attends to fewer pairs than dense attention does.
    const auto dense = p.generate(greedy());
    ASSERT_GT(dense.attention_flops, 0.0) << kLoopCountsFlops;
    EXPECT_LT(a.attention_flops, dense.attention_flops);
}

TEST(GpuSparVar, Fp32UsesTheReferenceOnBothSettings) {
    REQUIRE_CUDA();
    std::string why;
    EXPECT_FALSE(kernels_for(at::kFloat, &why));
    auto p = kernel_pipeline(Precision::Fp32);
    const auto kern_hooks = make_sparvar(sparvar_config(false), p.var_config(), nullptr);
    const auto ref_hooks = make_sparvar(sparvar_config(true), p.var_config(), nullptr);
    const auto a = p.generate(greedy(), kern_hooks.get());
    const auto b = p.generate(greedy(), ref_hooks.get());
    for (size_t s = 0; s < a.tokens.size(); ++s)
        EXPECT_TRUE(a.tokens[s].equal(b.tokens[s])) << "scale " << s;
    EXPECT_DOUBLE_EQ(a.attention_flops, b.attention_flops);
}

TEST(GpuSparVar, ReportedFlopsAddUpAndCslaCountsItsBlockMask) {
    REQUIRE_CUDA();
    std::string why;
    if (!kernels_for(at::kBFloat16, &why)) GTEST_SKIP() << why;
    auto p = kernel_pipeline(Precision::Bf16);
    Twin twin;
    twin.kern = make_sparvar(sparvar_config(false), p.var_config(), nullptr);
    twin.ref = make_sparvar(sparvar_config(true), p.var_config(), nullptr);
    const auto on = p.generate(greedy(), &twin);
    const auto dense = p.generate(greedy());
    ASSERT_GT(dense.attention_flops, 0.0) << kLoopCountsFlops;
    const auto& cfg = p.var_config();
    const double rows = 2.0 * 2 * cfg.num_heads, d = cfg.embed_dim / cfg.num_heads;
    std::vector<int64_t> prefix{0};
    for (auto pn : cfg.patch_nums) prefix.push_back(prefix.back() + pn * pn);
    // Total = dense everywhere, with each answered call's dense count replaced by its report.
    double want = dense.attention_flops;
    for (const auto& [key, flops] : twin.kern_flops) {
        const auto [scale, layer] = key;
        const int64_t pn = cfg.patch_nums[scale];
        const double dense_call = 4.0 * rows * d * pn * pn * prefix[scale + 1];
        want += flops - dense_call;
        if (layer < kCs4aLayers) continue;
        const auto c = sparvar_config(false);
        const auto token = csla_token_mask(cfg.patch_nums, scale, c.csla_spec());
        const auto block = csla_block_mask(token, 64, 64);
        const auto attend = expand_block_mask(block, 64, 64, token.size(0), token.size(1));
        const double pairs = attend.sum().item<double>();
        EXPECT_DOUBLE_EQ(flops, 4.0 * rows * d * pairs) << "scale " << scale << " layer " << layer;
        EXPECT_LT(flops, dense_call);
    }
    EXPECT_NEAR(on.attention_flops, want, 1e-9 * want);
}

// The CSLA mask record says which path ran (the GUI names the reference path under the images).
TEST(GpuSparVar, CslaRecordsSayWhichPathRan) {
    REQUIRE_CUDA();
    std::string why;
    if (!kernels_for(at::kBFloat16, &why)) GTEST_SKIP() << why;
    auto path_of = [](Precision precision, bool reference) {
        auto p = kernel_pipeline(precision);
        ProbeRecorder rec;
        const auto hooks = make_sparvar(sparvar_config(reference), p.var_config(), &rec);
        p.generate(greedy(), hooks.get(), &rec);
        const auto masks = rec.accel(probe_kinds::kCslaTokenMask);
        EXPECT_FALSE(masks.empty());
        std::vector<double> out;
        for (const auto& m : masks) out.push_back(m.values.at("cuda_kernels"));
        return out;
    };
    for (const double k : path_of(Precision::Bf16, false)) EXPECT_EQ(k, 1.0);
    for (const double k : path_of(Precision::Bf16, true)) EXPECT_EQ(k, 0.0);
    for (const double k : path_of(Precision::Fp32, false)) EXPECT_EQ(k, 0.0);
}

// The CS4A kernel path reads K and V in place where they are a KV cache narrowed from its
// capacity (the gathered kernel's long sequence is the cache buffer itself) and copies them
// otherwise: both give the same bits and the same FLOP count.
TEST(GpuSparVar, CacheViewsAndContiguousKvGiveTheSameBits) {
    REQUIRE_CUDA();
    std::string why;
    if (!kernels_for(at::kBFloat16, &why)) GTEST_SKIP() << why;
    struct Layouts : SamplingHooks {
        std::shared_ptr<SamplingHooks> views, copies;
        int64_t compared = 0, in_place = 0;
        at::Tensor attend(const BlockContext& ctx, const at::Tensor& q, const at::Tensor& k,
                          const at::Tensor& v, double s) override {
            auto& mctx = const_cast<BlockContext&>(ctx);
            const auto a = views->attend(ctx, q, k, v, s);
            const double fa = ctx.attention_flops + views->take_deferred_attention_flops(ctx.scale);
            const auto b = copies->attend(ctx, q, k.contiguous(), v.contiguous(), s);
            const double fb =
                ctx.attention_flops + copies->take_deferred_attention_flops(ctx.scale);
            mctx.attention_flops = fa;
            EXPECT_EQ(a.defined(), b.defined());
            if (a.defined() && b.defined()) {
                ++compared;
                in_place += k.is_contiguous() ? 0 : 1;
                EXPECT_TRUE(a.equal(b)) << "scale " << ctx.scale.scale << " layer " << ctx.layer;
                EXPECT_DOUBLE_EQ(fa, fb) << "scale " << ctx.scale.scale << " layer " << ctx.layer;
            }
            return a;
        }
    };
    auto p = kernel_pipeline(Precision::Bf16);
    Layouts hooks;
    hooks.views = make_sparvar(sparvar_config(false), p.var_config(), nullptr);
    hooks.copies = make_sparvar(sparvar_config(false), p.var_config(), nullptr);
    p.generate(greedy(), &hooks);
    EXPECT_EQ(hooks.compared, kCs4aLayers + 2 * 4);
    EXPECT_GT(hooks.in_place, 0)
        << "no call saw a narrowed KV cache: the in-place path ran nowhere";
}
