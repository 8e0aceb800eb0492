// The largest-batch search on fake devices (a callable with a known limit): where it stops, what
// it reports, how many tries it needs; and the one out-of-memory classifier on the errors
// LibTorch, CUDA and the host raise.
#include "core/runner/batch_search.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <cmath>
#include <new>
#include <set>
#include <stdexcept>

#include "core/runner/runner.h"
#include "tests/error_of.h"
#include "tests/tiny_models.h"

namespace varscope {
namespace {

// A device on which batches up to `limit` fit; records what was tried.
struct FakeDevice {
    int64_t limit;
    std::vector<int64_t> tried;
    BatchTry operator()(int64_t b) {
        tried.push_back(b);
        return try_batch_with(b, [&] {
            if (b > limit)
                TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory. Tried to allocate ",
                                 b, " GiB\nmore detail");
        });
    }
};

// Tries a search of [1, cap] may take: doubling to the limit, then bisecting one gap.
int64_t try_bound(int64_t cap) {
    return 2 * static_cast<int64_t>(std::ceil(std::log2(static_cast<double>(cap)))) + 2;
}

TEST(BatchSearch, FindsEveryMonotoneLimitInLogarithmicTries) {
    const int64_t cap = 256;
    for (int64_t limit = 1; limit < cap; ++limit) {
        FakeDevice dev{limit, {}};
        const BatchSearch s = search_largest_batch(std::ref(dev), cap);
        ASSERT_EQ(s.largest, limit);
        ASSERT_TRUE(s.first_failed.has_value());
        EXPECT_EQ(*s.first_failed, limit + 1);
        EXPECT_FALSE(s.fits_up_to_cap);
        EXPECT_FALSE(s.error.has_value());
        EXPECT_LE(static_cast<int64_t>(s.tries.size()), try_bound(cap)) << "limit " << limit;
        // No batch is tried twice, none outside [1, cap], and the record is what ran.
        EXPECT_EQ(std::set<int64_t>(dev.tried.begin(), dev.tried.end()).size(), dev.tried.size());
        ASSERT_EQ(s.tries.size(), dev.tried.size());
        for (size_t i = 0; i < dev.tried.size(); ++i) {
            EXPECT_GE(dev.tried[i], 1);
            EXPECT_LE(dev.tried[i], cap);
            EXPECT_EQ(s.tries[i].batch, dev.tried[i]);
            EXPECT_EQ(s.tries[i].outcome,
                      dev.tried[i] <= limit ? BatchOutcome::Fits : BatchOutcome::OutOfMemory);
        }
    }
}

TEST(BatchSearch, LimitOneAndNothingFits) {
    FakeDevice one{1, {}};
    const BatchSearch s1 = search_largest_batch(std::ref(one), 64);
    EXPECT_EQ(s1.largest, 1);
    EXPECT_EQ(s1.first_failed, 2);
    EXPECT_EQ(one.tried, (std::vector<int64_t>{1, 2}));

    FakeDevice none{0, {}};
    const BatchSearch s0 = search_largest_batch(std::ref(none), 64);
    EXPECT_EQ(s0.largest, 0);
    EXPECT_EQ(s0.first_failed, 1);
    EXPECT_EQ(none.tried, (std::vector<int64_t>{1}));
    EXPECT_EQ(s0.describe(), "0 (1 out of memory)");
}

TEST(BatchSearch, LimitAboveTheCapIsNotALimit) {
    for (int64_t cap : {1, 4, 100}) {  // 100: not a power of two, so the cap itself is tried
        FakeDevice dev{1000, {}};
        const BatchSearch s = search_largest_batch(std::ref(dev), cap);
        EXPECT_EQ(s.largest, cap);
        EXPECT_TRUE(s.fits_up_to_cap);
        EXPECT_FALSE(s.first_failed.has_value());
        EXPECT_EQ(dev.tried.back(), cap);
        EXPECT_NE(s.describe().find("fits up to the cap " + std::to_string(cap)),
                  std::string::npos);
        const auto j = s.to_json();
        EXPECT_TRUE(j["fits_up_to_cap"].get<bool>());
        EXPECT_TRUE(j["first_failed_batch"].is_null());
        EXPECT_EQ(j["largest_batch"], cap);
        EXPECT_EQ(j["tries"].back()["outcome"], "fits");
    }
    // The limit exactly at the cap: it fits, and nothing above it is tried.
    FakeDevice at{64, {}};
    const BatchSearch s = search_largest_batch(std::ref(at), 64);
    EXPECT_TRUE(s.fits_up_to_cap);
    EXPECT_EQ(at.tried, (std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64}));
}

TEST(BatchSearch, AnotherErrorStopsTheSearchWithIt) {
    std::vector<int64_t> tried;
    auto broken = [&](int64_t b) {
        tried.push_back(b);
        return try_batch_with(b, [&] {
            if (b >= 8) throw std::runtime_error("tensor shapes do not match\nat line 3");
        });
    };
    const BatchSearch s = search_largest_batch(broken, 256);
    EXPECT_EQ(tried, (std::vector<int64_t>{1, 2, 4, 8}));
    EXPECT_EQ(s.largest, 4);  // what fit before the error stands
    EXPECT_FALSE(s.first_failed.has_value());
    ASSERT_TRUE(s.error.has_value());
    EXPECT_EQ(s.error->batch, 8);
    EXPECT_EQ(s.error->outcome, BatchOutcome::Error);
    EXPECT_EQ(s.error->error, "tensor shapes do not match");
    EXPECT_EQ(s.to_json()["error"]["batch"], 8);

    // During the bisection too: the search ends at the error, not at a guess.
    tried.clear();
    auto late = [&](int64_t b) {
        tried.push_back(b);
        return try_batch_with(b, [&] {
            if (b == 48) throw std::logic_error("a bug");
            if (b > 40) TORCH_CHECK_WITH(OutOfMemoryError, false, "out of memory");
        });
    };
    const BatchSearch s2 = search_largest_batch(late, 256);
    EXPECT_EQ(tried, (std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 48}));
    EXPECT_EQ(s2.largest, 32);
    EXPECT_EQ(s2.first_failed, 64);
    ASSERT_TRUE(s2.error.has_value());
    EXPECT_EQ(s2.error->batch, 48);
}

TEST(BatchSearch, StartsAtTheGivenBatch) {
    FakeDevice above{40, {}};
    EXPECT_EQ(search_largest_batch(std::ref(above), 256, 16).largest, 40);
    EXPECT_EQ(above.tried.front(), 16);
    FakeDevice below{5, {}};
    const BatchSearch s = search_largest_batch(std::ref(below), 256, 16);
    EXPECT_EQ(s.largest, 5);
    EXPECT_EQ(s.first_failed, 6);
    FakeDevice clamped{1000, {}};
    EXPECT_EQ(search_largest_batch(std::ref(clamped), 8, 50).largest, 8);
    EXPECT_EQ(clamped.tried, (std::vector<int64_t>{8}));
}

TEST(BatchSearch, RefusesACapBelowOne) {
    FakeDevice dev{4, {}};
    const auto msg =
        testing::error_of<std::invalid_argument>([&] { search_largest_batch(std::ref(dev), 0); });
    EXPECT_NE(msg.find("cap must be at least 1"), std::string::npos) << msg;
    EXPECT_TRUE(dev.tried.empty());
}

TEST(OutOfMemory, ClassifiesTheErrorsOfLibTorchCudaAndTheHost) {
    auto classify = [](const std::function<void()>& f) {
        try {
            f();
        } catch (const std::exception& e) {
            return is_out_of_memory(e);
        }
        ADD_FAILURE() << "nothing thrown";
        return false;
    };
    EXPECT_TRUE(classify([] { TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory"); }));
    EXPECT_TRUE(classify([] { throw std::bad_alloc(); }));
    // A CUDA runtime call's error: cudaErrorMemoryAllocation (2) is memory, others are not.
    EXPECT_TRUE(classify([] { throw c10::AcceleratorError({}, 2, "CUDA error: out of memory"); }));
    EXPECT_FALSE(classify(
        [] { throw c10::AcceleratorError({}, 700, "CUDA error: an illegal memory access"); }));
    EXPECT_TRUE(classify(
        [] { TORCH_CHECK(false, "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling"); }));
    EXPECT_FALSE(classify([] { TORCH_CHECK(false, "shape mismatch"); }));
    EXPECT_FALSE(classify([] { throw std::runtime_error("out of memory"); }));  // not LibTorch's
    // LibTorch's CPU allocator refused by the host, as it words it (not triggered for real here:
    // where libsentencepiece's flags are linked after libc10's, c10's enforce failures abort).
    EXPECT_TRUE(classify([] {
        TORCH_CHECK(false,
                    "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: "
                    "can't allocate memory: you tried to allocate 4503599627370496 bytes.");
    }));
}

TEST(OutOfMemory, TryKeepsTheFirstLineOfTheMessage) {
    const BatchTry oom = try_batch_with(
        3, [] { TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory.\nDetails"); });
    EXPECT_EQ(oom.outcome, BatchOutcome::OutOfMemory);
    EXPECT_EQ(oom.batch, 3);
    EXPECT_EQ(oom.error, "CUDA out of memory.");
    const BatchTry ok = try_batch_with(2, [] {});
    EXPECT_EQ(ok.outcome, BatchOutcome::Fits);
    EXPECT_TRUE(ok.error.empty());
    // What the caller measured of a try goes into the search's JSON beside the outcome.
    const BatchSearch s = search_largest_batch(
        [](int64_t b) {
            BatchTry t = try_batch_with(b, [] {});
            t.details["peak_device_bytes"] = 100 * b;
            return t;
        },
        2);
    const auto tries = s.to_json()["tries"];
    ASSERT_EQ(tries.size(), 2u);
    EXPECT_EQ(tries[1]["peak_device_bytes"], 200);
    EXPECT_EQ(tries[1]["batch"], 2);
    EXPECT_STREQ(batch_outcome_name(BatchOutcome::OutOfMemory), "out_of_memory");
}

TEST(BatchSearch, SettingsForABatchRepeatTheClassesAndPrompts) {
    SampleSettings s;
    s.class_ids = {4, 7};
    const SampleSettings five = with_images(s, 5);
    EXPECT_EQ(five.class_ids, (std::vector<int64_t>{4, 7, 4, 7, 4}));
    EXPECT_EQ(five.images(), 5);
    SampleSettings random_labels;
    EXPECT_EQ(with_images(random_labels, 3).images(), 3);
    SampleSettings text;
    text.prompts = {"a cat"};
    EXPECT_EQ(with_images(text, 2).prompts, (std::vector<std::string>{"a cat", "a cat"}));
}

// A try on a real (tiny, CPU) runner: the run at that batch, its estimate, and a settings error
// reported as an error that stops a search, not as out of memory.
TEST(BatchSearch, RunnerTriesRunTheBatchAndReportItsEstimate) {
    auto runner = var_runner(testing::tiny_pipeline());
    SampleSettings s = runner->defaults();
    s.class_ids = {1};
    s.decode = false;
    const BatchTry t = try_runner_batch(*runner, s, nullptr, 3);
    EXPECT_EQ(t.outcome, BatchOutcome::Fits) << t.error;
    EXPECT_EQ(t.details["memory_estimate_bytes"].get<int64_t>(),
              runner->estimate_memory(with_images(s, 3)).bytes());
    EXPECT_FALSE(t.details.contains("peak_device_bytes"));  // measured on CUDA only

    const BatchSearch search = search_largest_batch(
        [&](int64_t b) { return try_runner_batch(*runner, s, nullptr, b); }, 3);
    EXPECT_EQ(search.largest, 3);
    EXPECT_TRUE(search.fits_up_to_cap);

    SampleSettings bad = s;
    bad.class_ids = {runner->shape().num_classes + 5};
    const BatchSearch stopped = search_largest_batch(
        [&](int64_t b) { return try_runner_batch(*runner, bad, nullptr, b); }, 8);
    ASSERT_TRUE(stopped.error.has_value());
    EXPECT_EQ(stopped.error->batch, 1);
    EXPECT_EQ(stopped.largest, 0);
    EXPECT_EQ(stopped.tries.size(), 1u);
}

}  // namespace
}  // namespace varscope
