// kernels/scale_similarity.h on the CPU: the Gram-matrix reference against a float64
// upsample-and-subtract, the dispatch's choices, and AMS-KV's path switch. The CUDA kernel is
// tested in tests/gpu/ams_kv_similarity_gpu_test.cpp.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "core/accel/ams_kv.h"
#include "kernels/scale_similarity.h"

using namespace varscope;
namespace vk = varscope::kernels;

namespace {

double truth(const at::Tensor& kp, int64_t pp, const at::Tensor& kc, int64_t pc, bool normalize) {
    auto maps = [&](const at::Tensor& k, int64_t pn) {
        auto x = k.to(at::kDouble);
        if (normalize) x = x / x.norm(2, {-1}, true).clamp_min(1e-12);
        return x.permute({0, 1, 3, 2}).reshape({k.size(0), k.size(1) * k.size(3), pn, pn});
    };
    auto up = at::upsample_bilinear2d(maps(kp, pp), {pc, pc}, false);
    return (maps(kc, pc) - up).pow(2).sum().item<double>();
}

}  // namespace

TEST(ScaleSimilarity, ReferenceMatchesUpsampleAndSubtract) {
    at::manual_seed(21);
    struct Case {
        int64_t R, H, c, pp, pc;
    };
    for (const auto& s : std::vector<Case>{{2, 3, 8, 2, 3},
                                           {3, 2, 7, 5, 9},
                                           {1, 4, 16, 6, 6},
                                           {2, 2, 6, 9, 4},
                                           {1, 1, 4, 1, 2}}) {
        auto kp = at::randn({s.R, s.H, s.pp * s.pp, s.c}),
             kc = at::randn({s.R, s.H, s.pc * s.pc, s.c});
        for (const bool normalize : {true, false}) {
            const double want = truth(kp, s.pp, kc, s.pc, normalize);
            EXPECT_NEAR(vk::scale_sq_distance(kp, s.pp, kc, s.pc, normalize), want, 1e-5 * want)
                << s.pp << "->" << s.pc << " normalize " << normalize;
            EXPECT_NEAR(vk::reference::scale_sq_distance(kp, s.pp, kc, s.pc, normalize), want,
                        1e-5 * want);
        }
    }
}

TEST(ScaleSimilarity, DispatchOnTheCpu) {
    auto kp = at::randn({1, 2, 4, 8}), kc = at::randn({1, 2, 9, 8});
    std::string why;
    EXPECT_FALSE(vk::cuda_scale_similarity_supported(kp, 2, kc, 3, true, {}, &why));
    EXPECT_FALSE(why.empty());
    EXPECT_THROW(vk::scale_sq_distance(kp, 2, kc, 3, true, vk::KernelPath::Cuda), c10::Error);
    EXPECT_EQ(vk::scale_sq_distance(kp, 2, kc, 3, true, vk::KernelPath::Reference),
              vk::reference::scale_sq_distance(kp, 2, kc, 3, true));
    // Shapes that do not match their scales are refused on every path.
    EXPECT_THROW(vk::scale_sq_distance(kp, 3, kc, 3, true), c10::Error);
    EXPECT_THROW(vk::scale_sq_distance(kp, 2, kc.narrow(1, 0, 1), 3, true), c10::Error);
}

TEST(ScaleSimilarity, AmsKvPathSwitch) {
    auto kp = at::randn({2, 2, 4, 8}), kc = at::randn({2, 2, 9, 8});
    const double r = ams_kv::similarity(kp, 2, kc, 3, true, vk::KernelPath::Reference);
    EXPECT_DOUBLE_EQ(ams_kv::similarity(kp, 2, kc, 3), r);  // the CPU always uses the reference
    vk::KernelPolicy forced;
    forced.reference = true;
    EXPECT_DOUBLE_EQ(ams_kv::similarity(kp, 2, kc, 3, true, vk::KernelPath::Auto, forced), r);
    EXPECT_NEAR(r, -truth(kp, 2, kc, 3, true) / kc.numel(), 1e-7);
}

TEST(ScaleSimilarity, PreviousKeysInPiecesAreOneMap) {
    auto kp = at::randn({2, 3, 25, 8}), kc = at::randn({2, 3, 36, 8});
    const double whole = vk::scale_sq_distance(kp, 5, kc, 6, true);
    const std::vector<at::Tensor> two = {kp.narrow(2, 0, 11), kp.narrow(2, 11, 14)};
    EXPECT_DOUBLE_EQ(vk::scale_sq_distance(two, 5, kc, 6, true), whole);
    const std::vector<at::Tensor> three = {kp.narrow(2, 0, 1), kp.narrow(2, 1, 20),
                                           kp.narrow(2, 21, 4)};
    EXPECT_DOUBLE_EQ(vk::scale_sq_distance(three, 5, kc, 6, true), whole);
    EXPECT_DOUBLE_EQ(ams_kv::similarity(two, 5, kc, 6), ams_kv::similarity(kp, 5, kc, 6));
    // Pieces that do not add up to the map, or do not join, are refused.
    EXPECT_THROW(
        vk::scale_sq_distance(std::vector<at::Tensor>{kp.narrow(2, 0, 24)}, 5, kc, 6, true),
        c10::Error);
    EXPECT_THROW(
        vk::scale_sq_distance(
            std::vector<at::Tensor>{kp.narrow(2, 0, 11), kp.narrow(2, 11, 14).narrow(3, 0, 4)}, 5,
            kc, 6, true),
        c10::Error);
    EXPECT_THROW(vk::scale_sq_distance(std::vector<at::Tensor>{}, 5, kc, 6, true), c10::Error);
}
