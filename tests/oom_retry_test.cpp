// The retry rule of core/runner/oom_retry.h on fakes: out of memory with graphs releases once
// and runs again; a second failure, another error, or a run without graphs is not retried.
#include "core/runner/oom_retry.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <stdexcept>

using namespace varscope;

namespace {

[[noreturn]] void out_of_memory() {
    TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory. Tried to allocate 320.00 MiB");
}

}  // namespace

TEST(OomRetry, OutOfMemoryWithGraphsReleasesThemAndRunsOnce) {
    int runs = 0, releases = 0;
    bool retried = false;
    const int v = run_releasing_on_oom(
        true,
        [&] {
            if (++runs == 1 && releases == 0) out_of_memory();
            return 7;
        },
        [&] { ++releases; }, &retried);
    EXPECT_EQ(v, 7);
    EXPECT_EQ(runs, 2);
    EXPECT_EQ(releases, 1);
    EXPECT_TRUE(retried);
}

TEST(OomRetry, ASecondFailureStandsAndOtherErrorsPassThrough) {
    int runs = 0, releases = 0;
    EXPECT_THROW(run_releasing_on_oom(
                     true,
                     [&]() -> int {
                         ++runs;
                         out_of_memory();
                     },
                     [&] { ++releases; }),
                 c10::OutOfMemoryError);
    EXPECT_EQ(runs, 2);
    EXPECT_EQ(releases, 1);
    runs = releases = 0;
    EXPECT_THROW(run_releasing_on_oom(
                     true,
                     [&]() -> int {
                         ++runs;
                         throw std::invalid_argument("bad");
                     },
                     [&] { ++releases; }),
                 std::invalid_argument);
    EXPECT_EQ(runs, 1);
    EXPECT_EQ(releases, 0);
}

TEST(OomRetry, WithoutGraphsNothingIsReleased) {
    int runs = 0, releases = 0;
    bool retried = true;
    EXPECT_THROW(run_releasing_on_oom(
                     false,
                     [&]() -> int {
                         ++runs;
                         out_of_memory();
                     },
                     [&] { ++releases; }, &retried),
                 c10::OutOfMemoryError);
    EXPECT_EQ(runs, 1);
    EXPECT_EQ(releases, 0);
    EXPECT_FALSE(retried);
}
