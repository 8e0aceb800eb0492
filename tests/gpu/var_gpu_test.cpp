// GPU tests: the same math on CUDA as on the CPU. Every test skips (reported as skipped) when
// no CUDA device is visible.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include "core/io/module_binding.h"
#include "tests/gpu/device_pipelines.h"
#include "tests/tiny_models.h"

using namespace varscope;

#define REQUIRE_CUDA() \
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device"

namespace {

VarPipeline on_device(VarPipeline& cpu, const std::string& dev, Precision p = Precision::Fp32) {
    return varscope::testing::with_weights_of(cpu, {dev, p});
}

double rel(const at::Tensor& a, const at::Tensor& b) {
    auto x = a.to(at::kDouble).cpu(), y = b.to(at::kDouble).cpu();
    return ((x - y).norm() / y.norm()).item<double>();
}

VarSampleOptions options() {
    VarSampleOptions o;
    o.class_ids = {1, 4};
    o.seed = 5;
    o.top_k = 0;
    o.top_p = 0;
    o.cfg = 2;
    return o;
}

}  // namespace

TEST(GpuVar, TeacherLogitsMatchCpu) {
    REQUIRE_CUDA();
    auto cpu = varscope::testing::tiny_pipeline();
    auto gpu = on_device(cpu, "cuda");
    auto res = cpu.generate(options());
    c10::InferenceMode g;
    auto x = cpu.sampler().vqvae()->idx_to_var_input(res.tokens);
    auto want = cpu.sampler().transformer()->forward_teacher(res.labels, x);
    auto got = gpu.sampler().transformer()->forward_teacher(res.labels.cuda(), x.cuda());
    EXPECT_LT(rel(got, want), 1e-4);
    auto img_cpu = cpu.sampler().vqvae()->decode(res.f_hat);
    auto img_gpu = gpu.sampler().vqvae()->decode(res.f_hat.cuda());
    EXPECT_LT(rel(img_gpu, img_cpu), 1e-3);  // cuDNN may use TF32 convolutions
}

TEST(GpuVar, SeededSamplingIsDeterministicOnCuda) {
    REQUIRE_CUDA();
    auto cpu = varscope::testing::tiny_pipeline();
    auto gpu = on_device(cpu, "cuda");
    auto a = gpu.generate(options()), b = gpu.generate(options());
    ASSERT_TRUE(a.images.is_cuda());
    for (size_t si = 0; si < a.tokens.size(); ++si) EXPECT_TRUE(a.tokens[si].equal(b.tokens[si]));
}

TEST(GpuVar, HalfPrecisionsProduceFiniteImages) {
    REQUIRE_CUDA();
    auto cpu = varscope::testing::tiny_pipeline();
    for (auto p : {Precision::Fp16, Precision::Bf16}) {
        auto gpu = on_device(cpu, "cuda", p);
        auto r = gpu.generate(options());
        EXPECT_TRUE(r.images.isfinite().all().item<bool>());
        EXPECT_EQ(r.images.sizes(), (at::IntArrayRef{2, 3, 8, 8}));
    }
}
