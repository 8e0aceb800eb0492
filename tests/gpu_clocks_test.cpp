// The clock and power sampler behind `bench attention --clocks` (kernels/gpu_clocks.h).
#include "kernels/gpu_clocks.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "tests/cli_run.h"

namespace vk = varscope::kernels;

TEST(GpuClocks, SummaryKeepsTheWindowAndTakesMedians) {
    const std::vector<vk::ClockSample> samples = {{0.0, 1980, 120},  // before the window
                                                  {1.0, 1500, 690}, {2.0, 1400, 700},
                                                  {3.0, 1650, 680}, {4.0, 1300, 705},
                                                  {9.0, 1980, 130}};  // after it
    const auto s = vk::summarize_clock_samples(samples, 1.0, 4.0);
    ASSERT_TRUE(s.has_value());
    EXPECT_EQ(s->samples, 4);
    EXPECT_DOUBLE_EQ(s->sm_mhz_median, 1450.0);  // (1400 + 1500) / 2
    EXPECT_DOUBLE_EQ(s->sm_mhz_min, 1300.0);
    EXPECT_DOUBLE_EQ(s->power_w_median, 695.0);
}

TEST(GpuClocks, EmptyWindowGivesNothing) {
    EXPECT_FALSE(vk::summarize_clock_samples({}, 0.0, 1.0).has_value());
    EXPECT_FALSE(vk::summarize_clock_samples({{5.0, 1500, 600}}, 0.0, 1.0).has_value());
}

// Without a driver (CI) the sampler must say why; with one it must read plausible values.
TEST(GpuClocks, SamplerReadsTheGpuOrSaysWhyNot) {
    try {
        vk::GpuClockSampler sampler("", 0, 0.001);
        const auto s = sampler.read();
        ASSERT_TRUE(s.has_value());
        EXPECT_GT(s->sm_mhz, 0.0);
        EXPECT_LT(s->sm_mhz, 5000.0);
        EXPECT_GE(s->power_w, 0.0);
        sampler.start();
        const double t0 = vk::clock_seconds_now();
        while (vk::clock_seconds_now() - t0 < 0.05) {
        }
        EXPECT_FALSE(sampler.stop().empty());
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("NVML"), std::string::npos) << e.what();
    }
}

TEST(GpuClocks, CliRejectsAHoldOutOfRange) {
    const auto r = varscope::testing::run_cli("bench attention --clocks -1");
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("--clocks"), std::string::npos) << r.out;
}
