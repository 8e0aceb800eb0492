// kernels/part_timer.h on the host (PartTimer::kHost, the CPU's steady clock): the time between
// marks goes to the earlier mark's label, a repeated label is one part, a mark < 0 ends the part
// without starting one, and the sums add to what `out` held.
#include "kernels/part_timer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace varscope::kernels {
namespace {

TEST(PartTimer, HostMarksTimeEachPartByTheSteadyClock) {
    PartTimer t(PartTimer::kHost);
    t.mark(2);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    t.mark(2);  // the part already running: dropped
    EXPECT_EQ(t.marks(), 1u);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    t.mark(0);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    t.mark(-1);  // ends part 0; nothing until the next mark counts
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    t.mark(0);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    t.mark(-1);
    std::vector<double> out = {1.0};
    ASSERT_TRUE(t.accumulate(out));
    ASSERT_EQ(out.size(), 3u);
    // Sleeps last at least as asked; the upper bounds leave a loaded machine 250 ms of slack,
    // less than the 300 ms gap after the end mark that no part may count.
    EXPECT_GE(out[2], 30.0);  // both sleeps of part 2
    EXPECT_LT(out[2], 30.0 + 250.0);
    EXPECT_GE(out[0], 1.0 + 15.0);  // what out held plus both stretches of part 0
    EXPECT_LT(out[0], 1.0 + 15.0 + 250.0);
    EXPECT_EQ(out[1], 0.0);
}

TEST(PartTimer, NoMarksAddNothing) {
    PartTimer t(PartTimer::kHost);
    std::vector<double> out;
    EXPECT_TRUE(t.accumulate(out));
    EXPECT_TRUE(out.empty());
}

}  // namespace
}  // namespace varscope::kernels
