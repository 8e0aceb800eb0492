// The CUDA upsample-and-add kernel (kernels/upsample_add.h) equals the LibTorch reference bit for
// bit in float32, float16 and bfloat16, on SparVAR's grids (the decision scale's onto the later
// ones), with o a strided view as the gathered kernel leaves it; and both are o + upsample_cache
// within float32 rounding. Skips without CUDA or without kernels for the device.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/accel/resample.h"
#include "core/accel/sparvar_cs4a.h"
#include "kernels/upsample_add.h"

namespace vk = varscope::kernels;

// Skips without a CUDA device or where the kernel does not run (a build without CUDA kernels).
#define REQUIRE_UPSAMPLE_KERNEL()                                                             \
    do {                                                                                      \
        if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";                   \
        const auto on_cuda = at::TensorOptions().device(at::kCUDA);                           \
        std::string why_not;                                                                  \
        if (!vk::cuda_upsample_add_supported(at::zeros({1, 1, 4, 8}, on_cuda),                \
                                             at::zeros({1, 1, 1, 8}, on_cuda), {}, &why_not)) \
            GTEST_SKIP() << why_not;                                                          \
    } while (0)

TEST(KernelsUpsampleAddGpu, BitwiseTheReference) {
    REQUIRE_UPSAMPLE_KERNEL();
    const auto cuda = at::TensorOptions().device(at::kCUDA);
    std::string why;
    c10::InferenceMode guard;
    at::manual_seed(13);
    const std::vector<std::pair<int64_t, int64_t>> grids{{32, 40}, {40, 48}, {48, 64}, {4, 6},
                                                         {5, 5},   {3, 13},  {1, 2}};
    for (const auto type : {at::kFloat, at::kHalf, at::kBFloat16})
        for (const auto& [g, t] : grids) {
            SCOPED_TRACE(std::string(c10::toString(type)) + " " + std::to_string(g) + "->" +
                         std::to_string(t));
            const int64_t B = 2, H = 3, d = g > 8 ? 128 : 6;  // 4 channels per thread, or 1
            const auto cache = at::randn({B, H, g * g, d}, cuda);
            // o as the gathered kernel returns it: a narrowed view of whole query blocks.
            const auto padded = at::randn({B, H, t * t + 7, d}, cuda).to(type);
            const auto o = padded.narrow(2, 0, t * t);
            const auto taps = varscope::bilinear_taps(g, t);
            const auto ids = taps.ids.to(at::kCUDA), w = taps.weights.to(at::kCUDA);
            {
                auto junk =
                    at::full({B * H * t * t * d}, std::numeric_limits<float>::quiet_NaN(), cuda);
            }
            const auto got = vk::upsample_add(o, cache, ids, w, vk::KernelPath::Cuda);
            const auto want = vk::reference::upsample_add(o, cache, ids, w);
            ASSERT_EQ(got.sizes(), want.sizes());
            EXPECT_EQ(got.scalar_type(), type);
            EXPECT_TRUE(got.is_contiguous());
            EXPECT_TRUE(got.equal(want)) << (got.to(at::kFloat) - want.to(at::kFloat)).abs().max();
            if (type == at::kFloat) {
                const auto gemm = o + varscope::sparvar::upsample_cache(cache, g, t);
                EXPECT_TRUE(at::allclose(got, gemm, 1e-5, 1e-5)) << (got - gemm).abs().max();
            }
        }
    vk::KernelPolicy forced;
    forced.reference = true;
    EXPECT_FALSE(vk::cuda_upsample_add_supported(at::zeros({1, 1, 4, 8}, cuda),
                                                 at::zeros({1, 1, 1, 8}, cuda), forced, &why));
}

// The residual given as the decision scale's two outputs (SparVAR's kernel path): the same bits
// as the float32 cache their subtraction writes, with the outputs' own layouts (SDPA's transposed
// one, the gathered kernel's narrowed one).
TEST(KernelsUpsampleAddGpu, DifferenceFormIsTheFloatCache) {
    REQUIRE_UPSAMPLE_KERNEL();
    const auto cuda = at::TensorOptions().device(at::kCUDA);
    c10::InferenceMode guard;
    at::manual_seed(17);
    for (const auto type : {at::kBFloat16, at::kHalf})
        for (const auto& [g, t] : std::vector<std::pair<int64_t, int64_t>>{{32, 40}, {5, 7}}) {
            SCOPED_TRACE(std::string(c10::toString(type)) + " " + std::to_string(g) + "->" +
                         std::to_string(t));
            const int64_t B = 2, H = 3, d = g > 8 ? 128 : 6;
            // dense as SDPA returns it: (B, H, N, d) viewed from (B, N, H, d) memory.
            const auto dense = at::randn({B, g * g, H, d}, cuda).to(type).transpose(1, 2);
            // sparse as the gathered kernel leaves it: a narrowed view of padded blocks.
            const auto sparse = at::randn({B, H, g * g + 5, d}, cuda).to(type).narrow(2, 0, g * g);
            const auto o = at::randn({B, H, t * t, d}, cuda).to(type);
            const auto taps = varscope::bilinear_taps(g, t);
            const auto ids = taps.ids.to(at::kCUDA), w = taps.weights.to(at::kCUDA);
            const auto got =
                vk::upsample_add_difference(o, dense, sparse, ids, w, vk::KernelPath::Cuda);
            const auto cache = at::sub(dense.to(at::kFloat), sparse);
            EXPECT_TRUE(got.equal(vk::upsample_add(o, cache, ids, w, vk::KernelPath::Cuda)));
            EXPECT_TRUE(
                got.equal(vk::reference::upsample_add_difference(o, dense, sparse, ids, w)));
        }
}
