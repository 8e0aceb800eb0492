// The fused DiffLoss-head path (kernels/diffloss_ops.h) on the CPU: its LibTorch references,
// looped by DiffusionSampler (HeadPath::FusedReference), give exactly the module path's latents
// (the references are the module path's ops), for every CFG mode; the dispatch keeps the module
// path on the CPU and refuses the CUDA path there.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include "core/mar_pipeline.h"
#include "core/sampling/token_sampling.h"
#include "kernels/diffloss_ops.h"
#include "tests/tiny_mar.h"

using namespace varscope;

namespace {

MarPipeline head_model(Precision p, int64_t width = 64, int64_t latent = 8) {
    MarConfig c = varscope::testing::tiny_cpu_mar_config();
    c.vae_embed_dim = latent;
    c.diffloss_d = 3;
    c.diffloss_w = width;
    c.num_sampling_steps = "12";
    return MarPipeline::random(c, 5, {"cpu", p});
}

}  // namespace

TEST(DiffLossFused, ReferenceLoopEqualsModulePathExactly) {
    for (auto prec : {Precision::Fp32, Precision::Bf16}) {
        auto pipe = head_model(prec);
        c10::InferenceMode guard;
        const auto& net = *pipe.sampler().transformer()->diffloss->net;
        const auto& diffusion = pipe.sampler().diffusion();
        const int64_t N = 3, C = net.in_channels(), S = diffusion.schedule().num_steps();
        const auto dtype = net.input_proj->weight.scalar_type();
        for (bool guided : {false, true}) {
            for (int64_t period : {0, 4}) {
                if (!guided && period) continue;
                SCOPED_TRACE(std::string(prec == Precision::Bf16 ? "bf16" : "fp32") +
                             (guided ? " cfg" : " no cfg") + " period " + std::to_string(period));
                const auto z = at::randn({guided ? 2 * N : N, 32}).to(dtype);
                const auto cfg = guided ? at::full({}, 2.5) : at::Tensor();
                auto start = at::empty({N, C}, dtype);
                auto steps = at::empty({S, guided ? 2 * N : N, C}, dtype);
                auto g = seeded_generator(at::kCPU, 7);
                DiffusionSampler::draw_noise(start, steps, g);
                const auto start_copy = start.clone();
                const auto modules = diffusion.sample_with_noise(net, z, cfg, 0.9, start, steps, {},
                                                                 period, HeadPath::Modules);
                const auto fused = diffusion.sample_with_noise(net, z, cfg, 0.9, start, steps, {},
                                                               period, HeadPath::FusedReference);
                EXPECT_TRUE(at::equal(modules, fused))
                    << "max diff " << (modules - fused).abs().max().item<double>();
                EXPECT_TRUE(at::equal(start, start_copy)) << "the start noise was written";
                EXPECT_GT(fused.abs().max().item<double>(), 0.0);
                // Inline draws through the fused loop follow the same random stream.
                auto g1 = seeded_generator(at::kCPU, 9), g2 = seeded_generator(at::kCPU, 9);
                EXPECT_TRUE(at::equal(
                    diffusion.sample(net, z, cfg, 0.9, g1, period, HeadPath::Modules),
                    diffusion.sample(net, z, cfg, 0.9, g2, period, HeadPath::FusedReference)));
            }
        }
    }
}

TEST(DiffLossFused, CpuKeepsTheModulePathAndRefusesCuda) {
    auto pipe = head_model(Precision::Bf16);
    c10::InferenceMode guard;
    const auto& net = *pipe.sampler().transformer()->diffloss->net;
    const auto z = at::randn({4, 32}).to(at::kBFloat16);
    const auto& diffusion = pipe.sampler().diffusion();
    std::string why;
    EXPECT_FALSE(diffusion.uses_fused_head(net, z, true, HeadPath::Auto, &why));
    EXPECT_FALSE(why.empty());
    EXPECT_TRUE(diffusion.uses_fused_head(net, z, true, HeadPath::FusedReference));
    EXPECT_FALSE(diffusion.uses_fused_head(net, z, true, HeadPath::Modules));
    EXPECT_THROW(diffusion.uses_fused_head(net, z, true, HeadPath::FusedCuda), c10::Error);
    const auto x = at::randn({2, 8}).to(at::kBFloat16);
    const auto w = at::randn({64, 8}).to(at::kBFloat16), b = at::randn({64}).to(at::kBFloat16);
    EXPECT_THROW(kernels::diff_input_proj(x, w, b, 4, kernels::KernelPath::Cuda), c10::Error);
    // Auto on the CPU = the reference.
    EXPECT_TRUE(at::equal(kernels::diff_input_proj(x, w, b, 4),
                          kernels::reference::diff_input_proj(x, w, b, 4)));
}

// The folded projection + fc1 op on the CPU: the two references one after the other, bit for
// bit (the sampler's fused reference loop goes through it for block 0); the CUDA path refused.
TEST(DiffLossFused, ProjectionFoldedIntoFc1IsTheTwoReferencesOnTheCpu) {
    auto pipe = head_model(Precision::Bf16);
    c10::InferenceMode guard;
    const auto& net = *pipe.sampler().transformer()->diffloss->net;
    const auto& blk = net.block(0);
    const kernels::DiffBlockWeights w{blk.in_ln->weight, blk.in_ln->bias, blk.in_ln->options.eps(),
                                      blk.fc1()->weight, blk.fc1()->bias, blk.fc2()->weight,
                                      blk.fc2()->bias};
    const int64_t n = 3, rows = 6, W = net.width();
    const auto x = at::randn({n, net.in_channels()}).to(at::kBFloat16);
    const auto mod = at::randn({rows, 2 * W}).to(at::kBFloat16);
    const auto shift = mod.narrow(1, 0, W), scale1 = (1 + mod.narrow(1, W, W)).to(at::kBFloat16);
    const auto& wi = net.input_proj->weight;
    const auto& bi = net.input_proj->bias;
    const auto [a, h] = kernels::diff_proj_block_fc1(x, wi, bi, rows, w, shift, scale1);
    const auto h_ref = kernels::reference::diff_input_proj(x, wi, bi, rows);
    EXPECT_TRUE(at::equal(h, h_ref));
    EXPECT_TRUE(at::equal(a, kernels::reference::diff_block_fc1(h_ref, w, shift, scale1)));
    EXPECT_EQ(h.size(0), rows);
    EXPECT_THROW(
        kernels::diff_proj_block_fc1(x, wi, bi, rows, w, shift, scale1, kernels::KernelPath::Cuda),
        c10::Error);
    EXPECT_THROW(kernels::diff_proj_block_fc1(x, wi, bi, 5, w, shift, scale1), c10::Error);
}

// The whole MAR loop with the fused switch on and off: on the CPU both are the module path.
TEST(DiffLossFused, SamplerOptionIsExactOnTheCpu) {
    auto pipe = head_model(Precision::Fp32);
    auto o = varscope::testing::mar_options({1, 2}, 0, 4, 2.0);  // seed 0, the default
    const auto a = pipe.generate(o);
    o.fused_head = false;
    const auto b = pipe.generate(o);
    EXPECT_TRUE(at::equal(a.tokens, b.tokens));
}
