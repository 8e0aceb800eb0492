// The FID Inception and the distribution metrics on CUDA (issue #34): the parity fixture's
// images (tests/fixtures/fid_parity.npz, pytorch-fid's CPU features) through the network on
// the GPU, with cuDNN's TF32 convolutions off (fp32, as the CPU) and on (PyTorch's default,
// what pytorch-fid gets on the same GPU); precision/recall from CUDA features. Skips without CUDA.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdio>

#include "core/io/npy.h"
#include "core/metrics/feature_stats.h"
#include "core/metrics/fid_inception.h"
#include "tests/test_util.h"
#include "tests/tiny_models.h"

using namespace varscope;

namespace {

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
    return (a.to(at::kCPU, at::kDouble) - b.to(at::kCPU, at::kDouble)).abs().max().item<double>();
}

// Restores cuDNN's TF32 switch (process-wide) when the test ends.
struct Tf32Conv {
    bool before = at::globalContext().allowTF32CuDNN();
    explicit Tf32Conv(bool on) { at::globalContext().setAllowTF32CuDNN(on); }
    ~Tf32Conv() { at::globalContext().setAllowTF32CuDNN(before); }
};

}  // namespace

TEST(FidInceptionGpu, FeaturesOnCudaMatchPytorchFidsCpuFeatures) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    const auto f = read_npz(varscope::testing::source_dir() + "/tests/fixtures/fid_parity.npz");
    FidInception net(synthetic_inception_weights(), "formula");
    net.to(at::Device(at::kCUDA, 0));
    const auto images = f.at("images_a").to(at::Device(at::kCUDA, 0));
    {
        Tf32Conv fp32(false);
        const auto ours = net.features(images);
        EXPECT_TRUE(ours.pool3.is_cuda());
        const double pool3 = max_abs_diff(ours.pool3, f.at("pool3_a"));
        const double spatial = max_abs_diff(ours.spatial, f.at("spatial_a"));
        std::printf("[gpu fp32] max |cuda - pytorch-fid cpu| pool3 %.3g spatial %.3g\n", pool3,
                    spatial);
        EXPECT_LE(pool3, 1e-4);
        EXPECT_LE(spatial, 1e-4);
        const auto pr = precision_recall(ours.pool3, f.at("pool3_b").to(ours.pool3.device()), 3);
        EXPECT_DOUBLE_EQ(pr.precision, f.at("prc_ab")[0].item<double>());
        EXPECT_DOUBLE_EQ(pr.recall, f.at("prc_ab")[1].item<double>());
    }
    {
        Tf32Conv tf32(true);
        const auto ours = net.features(images);
        const double pool3 = max_abs_diff(ours.pool3, f.at("pool3_a"));
        std::printf("[gpu tf32] max |cuda - pytorch-fid cpu| pool3 %.3g (|pool3| max %.3g)\n",
                    pool3, f.at("pool3_a").abs().max().item<double>());
        EXPECT_LE(pool3, 2e-2);  // TF32: 10-bit mantissa products
    }
}
