// The separable bilinear upsampling used by AMS-KV and SparVAR equals torch's own.
#include "core/accel/resample.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

TEST(Resample, MatchesTorchBilinearUpsampling) {
    at::manual_seed(3);
    for (auto [in, out] :
         std::vector<std::pair<int64_t, int64_t>>{{1, 2}, {2, 3}, {5, 8}, {13, 16}, {8, 8}}) {
        SCOPED_TRACE(std::to_string(in) + "->" + std::to_string(out));
        const auto x = at::randn({2, 7, in, in});
        const auto want = at::upsample_bilinear2d(x, {out, out}, /*align_corners=*/false);
        const auto got = varscope::upsample_bilinear_planes(x, out);
        ASSERT_EQ(got.sizes(), want.sizes());
        EXPECT_TRUE(at::allclose(got, want, 1e-5, 1e-6)) << (got - want).abs().max().item<float>();
    }
}
