// Infinity's fused element-wise kernels - AdaLN's modulation with the bf16 cast of the product
// after it (kernels/modulate.h, InfinityBlock::attention_inputs, ffn_branch) and the gated
// residual sums (kernels/gated_residual.h, sa_residual, ffn_residual) - change no bit of a
// sampled image: a random tiny Infinity on CUDA in bf16-autocast (the official mode, the only one
// the kernel serves), eager and with CUDA graphs, plain and with FastVAR (pruned rows), against
// the same sampler with only these kernels switched off (KernelPolicy::fused_elementwise) and
// with every kernel on its LibTorch reference (KernelPolicy::reference). Skips without CUDA.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/accel/accel_config.h"
#include "core/pipeline.h"
#include "core/sampling/infinity_sampler.h"
#include "kernels/cuda_graph.h"
#include "kernels/modulate.h"
#include "tests/gpu/tiny_infinity_cuda.h"

using namespace varscope;

TEST(GpuInfinityFusedModulate, SameBitsAsTheReference) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    if (!kernels::cuda_graphs_built()) GTEST_SKIP() << "built without CUDA kernels";
    {
        std::string why;
        const auto z = at::zeros({1, 1, 4}, at::TensorOptions().device(at::kCUDA));
        if (!kernels::fused_modulate_supported(z, z, z, {}, &why)) GTEST_SKIP() << why;
    }
    c10::InferenceMode guard;
    const auto config = varscope::testing::tiny_infinity_cuda_config(4);
    const auto s = infinity_schedule(1.0, "0.06M");  // 7 scales, 16 x 16 last
    const auto view = infinity_hook_view(config, s);
    ASSERT_TRUE(view.has_value());
    auto sampler = varscope::testing::tiny_infinity_sampler_on_cuda(config.depth, /*bf16=*/true);
    const auto text = varscope::testing::tiny_infinity_text({5, 11}, 1);
    ExecPolicy aten, reference;
    aten.kernels.fused_elementwise = false;
    reference.kernels.reference = true;
    for (const std::string& accel : {std::string(), std::string("fastvar")}) {
        const auto hooks =
            accel.empty() ? nullptr : build_accelerators(AccelConfig::from_argument(accel), *view);
        for (bool graphs : {true, false}) {
            SCOPED_TRACE((accel.empty() ? std::string("baseline") : accel) +
                         (graphs ? " graphs" : " eager"));
            sampler.set_exec_policy(ExecPolicy{});
            const auto fused = sampler.sample(
                text, s, varscope::testing::tiny_infinity_options(graphs), hooks.get());
            for (const ExecPolicy& other : {aten, reference}) {
                SCOPED_TRACE(other.kernels.reference ? "reference kernels" : "ATen element-wise");
                sampler.set_exec_policy(other);
                const auto ref = sampler.sample(
                    text, s, varscope::testing::tiny_infinity_options(graphs), hooks.get());
                ASSERT_EQ(fused.bits.size(), ref.bits.size());
                for (size_t si = 0; si < ref.bits.size(); ++si)
                    EXPECT_TRUE(fused.bits[si].equal(ref.bits[si])) << "scale " << si;
                EXPECT_TRUE(fused.summed_codes.equal(ref.summed_codes));
            }
        }
    }
}
