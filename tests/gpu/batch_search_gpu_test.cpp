// The largest-batch search on a real device limit (issue #30): the caching allocator capped to a
// small share of the GPU (kernels::set_cuda_memory_fraction), a tiny VAR with CUDA graphs, tries
// through try_runner_batch. The search must find a limit (not the cap), and the process must stay
// usable after its out-of-memory tries: the largest batch runs again, the first failed one fails
// again. Skips without CUDA.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "core/runner/batch_search.h"
#include "core/runner/runner.h"
#include "kernels/cuda_graph.h"
#include "kernels/memory_stats.h"
#include "tests/gpu/device_pipelines.h"
#include "tests/tiny_models.h"

using namespace varscope;

namespace {

// Restores the allocator's full share when the test ends, also on a failed assertion.
struct FractionGuard {
    ~FractionGuard() { kernels::set_cuda_memory_fraction(0, 1.0); }
};

}  // namespace

TEST(BatchSearchGpu, FindsTheLimitUnderAMemoryCapAndLeavesTheProcessUsable) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    if (!kernels::cuda_graphs_built()) GTEST_SKIP() << "built without CUDA kernels";
    auto cpu = varscope::testing::small_pipeline();
    auto runner =
        var_runner(varscope::testing::with_weights_of(cpu, {"cuda", Precision::Fp32, false}));
    SampleSettings s = runner->defaults();
    s.class_ids = {3};
    s.decode = true;  // the decode's full-resolution maps make the images count

    // What one image needs, measured: a try at batch 8.
    const BatchTry probe = try_runner_batch(*runner, s, nullptr, 8);
    ASSERT_EQ(probe.outcome, BatchOutcome::Fits) << probe.error;
    const int64_t per_image = probe.details["peak_device_bytes"].get<int64_t>() / 8;
    ASSERT_GT(per_image, 0);

    // Room for some dozens of images above what is allocated now (the weights), and no less
    // than the allocator's segments need (a tiny model's image is under a MiB).
    FractionGuard restore;
    const int64_t total = kernels::cuda_total_memory(0);
    ASSERT_GT(total, 0);
    const int64_t budget =
        kernels::cuda_memory(0).allocated + std::max<int64_t>(40 * per_image, int64_t(256) << 20);
    kernels::set_cuda_memory_fraction(0, static_cast<double>(budget) / static_cast<double>(total));

    const int64_t cap = 4096;
    auto attempt = [&](int64_t b) { return try_runner_batch(*runner, s, nullptr, b); };
    const BatchSearch search = search_largest_batch(attempt, cap);
    ASSERT_FALSE(search.error.has_value()) << search.error->error;
    EXPECT_FALSE(search.fits_up_to_cap) << search.describe();
    ASSERT_GE(search.largest, 1) << search.describe();
    ASSERT_TRUE(search.first_failed.has_value());
    EXPECT_EQ(*search.first_failed, search.largest + 1) << search.describe();
    EXPECT_LT(search.largest, cap);

    // Usable after the failures: the same answers again, and no graph set left behind.
    EXPECT_EQ(attempt(search.largest).outcome, BatchOutcome::Fits);
    EXPECT_EQ(attempt(*search.first_failed).outcome, BatchOutcome::OutOfMemory);
    EXPECT_EQ(attempt(1).outcome, BatchOutcome::Fits);
}
