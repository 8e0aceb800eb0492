// core/eval/scoring_queue.h: the eval job's scoring worker on the CPU: tasks in push order on
// another thread, a bounded queue, and a failing task surfacing at the producer (no hang).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/eval/scoring_queue.h"
#include "tests/error_of.h"

namespace varscope {
namespace {

using testing::error_of;

TEST(ScoringQueue, InlineRunsEachTaskAtPushAndThrowsThere) {
    ScoringQueue q(false, at::kCPU);
    EXPECT_FALSE(q.overlapped());
    std::vector<int> ran;
    const auto caller = std::this_thread::get_id();
    q.push([&] {
        EXPECT_EQ(std::this_thread::get_id(), caller);
        ran.push_back(1);
    });
    EXPECT_EQ(ran, std::vector<int>{1});
    EXPECT_EQ(error_of<std::runtime_error>(
                  [&] { q.push([] { throw std::runtime_error("scorer broke"); }); }),
              "scorer broke");
    q.finish();
}

TEST(ScoringQueue, OverlappedRunsEveryTaskInPushOrderOnItsWorker) {
    ScoringQueue q(true, at::kCPU, 2);
    EXPECT_TRUE(q.overlapped());
    std::vector<int> ran;  // the worker's only; read after finish()
    std::atomic<bool> other_thread{true};
    const auto caller = std::this_thread::get_id();
    for (int i = 0; i < 20; ++i)
        q.push([&, i] {
            if (std::this_thread::get_id() == caller) other_thread = false;
            ran.push_back(i);
        });
    q.finish();
    ASSERT_EQ(ran.size(), 20u);
    for (int i = 0; i < 20; ++i) EXPECT_EQ(ran[i], i);
    EXPECT_TRUE(other_thread);
}

TEST(ScoringQueue, TheProducerWaitsWhileTheQueueIsFull) {
    constexpr size_t kCapacity = 2;
    ScoringQueue q(true, at::kCPU, kCapacity);
    std::atomic<int> returned{0};  // push() calls that have returned
    std::atomic<int> over{-1};
    for (int i = 0; i < 8; ++i) {
        q.push([&, i] {
            // While task i runs, at most `capacity` later tasks can be queued, and the push of
            // the one after them has not returned.
            if (i == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
            if (returned.load() > i + 1 + static_cast<int>(kCapacity)) over = i;
        });
        ++returned;
    }
    q.finish();
    EXPECT_EQ(over.load(), -1) << "task " << over.load() << " saw too many pushes return";
}

TEST(ScoringQueue, AFailingTaskIsThrownAtTheNextPushOrAtFinish) {
    {
        ScoringQueue q(true, at::kCPU);
        q.push([] { throw std::runtime_error("scorer broke"); });
        // The error reaches a later push (the worker may still be running it: then finish).
        std::string e;
        try {
            for (int i = 0; i < 100; ++i) {
                q.push([] {});
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            }
            q.finish();
        } catch (const std::runtime_error& x) {
            e = x.what();
        }
        EXPECT_EQ(e, "scorer broke");
        // Spent: finish keeps reporting it.
        EXPECT_EQ(error_of<std::runtime_error>([&] { q.finish(); }), "scorer broke");
    }
    {
        ScoringQueue q(true, at::kCPU);
        q.push([] {});
        q.push([] { throw std::invalid_argument("last one broke"); });
        EXPECT_EQ(error_of<std::invalid_argument>([&] { q.finish(); }), "last one broke");
    }
}

TEST(ScoringQueue, DestroyingItWithTasksPendingDoesNotHang) {
    std::atomic<int> ran{0};
    {
        ScoringQueue q(true, at::kCPU, 4);
        for (int i = 0; i < 4; ++i)
            q.push([&] {
                std::this_thread::sleep_for(std::chrono::milliseconds(20));
                ++ran;
            });
        // As when generation throws: no finish(), the destructor stops the worker.
    }
    // The worker was joined: nothing runs after the destructor returned.
    const int after = ran.load();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(ran.load(), after);
}

TEST(ScoringQueue, WaitingForTheCurrentStreamIsANoOpOnTheCpu) {
    wait_for_current_stream(at::kCPU);
}

}  // namespace
}  // namespace varscope
