// `varscope-cli bench e2e --max-batch` on a tiny random VAR on the CPU: a smoke test of the mode
// (the search, the timing at each method's batch, the report's fields). The CPU has no memory
// limit the search could find at these sizes, so it must stop at the cap and say so.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/cli_run.h"
#include "tests/test_util.h"

namespace {

varscope::testing::CliRun cli(const std::string& args) {
    return varscope::testing::run_cli(args);
}

}  // namespace

TEST(CliBenchMaxBatch, SearchesEachMethodUpToTheCapAndTimesItThere) {
    varscope::testing::TempDir dir;
    const std::string json = dir.file("max_batch.json");
    // Two classes for a batch of up to 4: they repeat in order.
    const auto r =
        cli("bench e2e --random 2 --patch-nums 1,2,3 --class 1,2 --repeat 1 --warmup 0 "
            "--no-cost-model --methods 'baseline;ams_kv' --max-batch 4 --json " +
            json);
    ASSERT_EQ(r.code, 0) << r.out;
    // The cap is not a limit: the report says that the batch fits up to it.
    EXPECT_NE(r.out.find("fits up to the cap"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("out of memory"), std::string::npos) << r.out;
    std::ifstream f(json);
    const auto j = nlohmann::json::parse(f);
    EXPECT_TRUE(j["batch"].is_null());  // per method
    EXPECT_EQ(j["max_batch"]["cap"], 4);
    EXPECT_EQ(j["max_batch"]["start"], 2);  // --class 1,2 is a batch of two
    ASSERT_EQ(j["methods"].size(), 2u);
    for (const auto& m : j["methods"]) {
        SCOPED_TRACE(m["name"].get<std::string>());
        ASSERT_FALSE(m.contains("error")) << m.dump();
        EXPECT_EQ(m["batch"], 4);
        const auto& s = m["max_batch"];
        EXPECT_EQ(s["largest_batch"], 4);
        EXPECT_TRUE(s["fits_up_to_cap"].get<bool>());
        EXPECT_TRUE(s["first_failed_batch"].is_null());
        EXPECT_FALSE(s.contains("error"));
        // Doubling from the start batch reaches the cap in two tries, each measured.
        ASSERT_EQ(s["tries"].size(), 2u);
        EXPECT_EQ(s["tries"][0]["batch"], 2);
        EXPECT_EQ(s["tries"][1]["batch"], 4);
        for (const auto& t : s["tries"]) {
            EXPECT_EQ(t["outcome"], "fits");
            EXPECT_GT(t["memory_estimate_bytes"].get<int64_t>(), 0);
        }
        // Timed at its own batch: images/s from the timed runs, the estimate beside the peak.
        ASSERT_EQ(m["total_ms_each"].size(), 1u);
        const double ms = m["median_total_ms"].get<double>();
        EXPECT_GT(ms, 0.0);
        EXPECT_NEAR(m["images_per_s"].get<double>(), 4 / (ms / 1000.0), 1e-9);
        EXPECT_EQ(m["memory_estimate"]["images"], 4);
        EXPECT_TRUE(m.contains("peak_device_bytes"));
        // Ratios over the baseline's: batch and throughput (not times or tokens: the batches
        // of a real search differ).
        EXPECT_DOUBLE_EQ(m["batch_ratio"].get<double>(), 1.0);
        EXPECT_GT(m["images_per_s_ratio"].get<double>(), 0.0);
        EXPECT_FALSE(m.contains("speedup"));
        EXPECT_FALSE(m.contains("identical_tokens"));
    }
    EXPECT_DOUBLE_EQ(j["methods"][0]["images_per_s_ratio"].get<double>(), 1.0);
}

// Infinity: a text features file sets its own rows; each try repeats them to its batch.
TEST(CliBenchMaxBatch, InfinityTextFeaturesRepeatToEachBatch) {
    varscope::testing::TempDir dir;
    const std::string fixtures = varscope::testing::source_dir() + "/tests/fixtures/infinity_tiny/";
    const std::string json = dir.file("infinity.json");
    const auto r = cli("bench e2e --infinity " + fixtures + "infinity_tiny.pth --text-features " +
                       fixtures + "teacher.safetensors --pixels 0.06M --repeat 1 --warmup 0 " +
                       "--no-cost-model --methods baseline --max-batch 3 --json " + json);
    ASSERT_EQ(r.code, 0) << r.out;
    std::ifstream f(json);
    const auto j = nlohmann::json::parse(f);
    ASSERT_EQ(j["methods"].size(), 1u);
    const auto& m = j["methods"][0];
    ASSERT_FALSE(m.contains("error")) << m.dump();
    EXPECT_EQ(m["batch"], 3);
    EXPECT_TRUE(m["max_batch"]["fits_up_to_cap"].get<bool>());
    ASSERT_EQ(m["max_batch"]["tries"].size(), 3u);  // 1, 2, then the cap 3
    EXPECT_EQ(m["max_batch"]["tries"][2]["batch"], 3);
    EXPECT_EQ(m["memory_estimate"]["images"], 3);
}

TEST(CliBenchMaxBatch, BadCapIsAUsageError) {
    const auto r = cli("bench e2e --random 2 --patch-nums 1,2 --repeat 1 --max-batch 0");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("--max-batch"), std::string::npos) << r.out;
}
