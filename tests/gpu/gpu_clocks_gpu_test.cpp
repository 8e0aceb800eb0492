// `bench attention --clocks` on a real GPU: NVML finds the CUDA device by its PCI bus id, and a
// hold of work reads a clock and a power inside the GPU's range. Skips without CUDA.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include "kernels/cuda_timing.h"
#include "kernels/gpu_clocks.h"

namespace vk = varscope::kernels;

TEST(GpuClocksOnDevice, AHoldReadsTheDevicesClockAndPower) {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    const auto info = vk::cuda_device_info(0);
    ASSERT_FALSE(info.pci_bus_id.empty());
    vk::GpuClockSampler sampler(info.pci_bus_id, 0);
    const auto limit = sampler.power_limit_w();
    ASSERT_TRUE(limit.has_value());
    EXPECT_GT(*limit, 10.0);
    const auto a = at::randn({2048, 2048}, at::TensorOptions().device(at::kCUDA));
    const auto h = vk::hold_on_gpu([&] { (void)at::matmul(a, a); }, 0, 0.3, true, sampler);
    EXPECT_GT(h.calls, 0);
    EXPECT_GE(h.seconds, 0.3);
    ASSERT_TRUE(h.clocks.has_value()) << "no sample in the hold's last 60 %";
    EXPECT_GT(h.clocks->sm_mhz_median, 100.0);
    EXPECT_LT(h.clocks->sm_mhz_median, 5000.0);
    EXPECT_LE(h.clocks->sm_mhz_min, h.clocks->sm_mhz_median);
    EXPECT_GT(h.clocks->power_w_median, 10.0);
    EXPECT_LT(h.clocks->power_w_median, 2.0 * *limit);
}
