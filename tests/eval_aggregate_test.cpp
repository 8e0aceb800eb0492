// core/eval/aggregate.h: per-config summaries of shard results, JSON and CSV.
#include <gtest/gtest.h>

#include <cmath>

#include "core/eval/aggregate.h"

namespace varscope {
namespace {

nlohmann::json image(const std::string& config, nlohmann::json psnr, double ssim,
                     nlohmann::json agreement) {
    return {{"config", config}, {"seed", 0},    {"condition", 0},
            {"psnr_db", psnr},  {"ssim", ssim}, {"token_agreement", agreement}};
}

nlohmann::json timing(std::vector<std::pair<int64_t, double>> calls, nlohmann::json peak) {
    nlohmann::json c = nlohmann::json::array();
    for (auto [n, ms] : calls) c.push_back({{"images", n}, {"millis", ms}});
    return {{"calls", c}, {"peak_memory_bytes", peak}};
}

TEST(EvalAggregate, MeanAndInterval) {
    const auto s = mean_ci({1.0, 2.0, 3.0, 4.0});
    EXPECT_DOUBLE_EQ(s["mean"].get<double>(), 2.5);
    // sd = sqrt(5/3); 1.96 sd / 2
    EXPECT_NEAR(s["ci95"].get<double>(), 1.96 * std::sqrt(5.0 / 3.0) / 2.0, 1e-12);
    EXPECT_EQ(s["n"], 4);
    EXPECT_TRUE(mean_ci({7.0})["ci95"].is_null());
    EXPECT_TRUE(mean_ci({})["mean"].is_null());
}

TEST(EvalAggregate, NearestRankPercentiles) {
    std::vector<double> v;
    for (int i = 100; i >= 1; --i) v.push_back(i);
    EXPECT_EQ(percentile(v, 50), 50);
    EXPECT_EQ(percentile(v, 90), 90);
    EXPECT_EQ(percentile(v, 99), 99);
    EXPECT_EQ(percentile({5.0, 1.0}, 50), 1.0);
    EXPECT_EQ(percentile({}, 50), 0.0);
}

TEST(EvalAggregate, SummarisesPerConfigAcrossShards) {
    EvalManifest m;
    m.configs = {{"fast", {{"x", 1}}}};
    const std::vector<nlohmann::json> shards = {
        {{"shard", 0},
         {"images", {image("fast", 30.0, 0.9, 0.5), image("fast", nullptr, 1.0, 1.0)}},
         {"timing",
          {{"baseline", timing({{2, 400.0}}, 1000)}, {"fast", timing({{2, 100.0}}, 3000)}}}},
        {{"shard", 1},
         {"images", {image("fast", 20.0, 0.8, 0.0)}},
         {"timing",
          {{"baseline", timing({{1, 200.0}}, 2000)}, {"fast", timing({{1, 50.0}}, 500)}}}}};
    const auto r = aggregate_shards(m, shards);
    EXPECT_EQ(r["shards"], 2);
    ASSERT_EQ(r["configs"].size(), 2u);
    const auto& base = r["configs"][0];
    const auto& fast = r["configs"][1];
    EXPECT_EQ(base["name"], "baseline");
    EXPECT_FALSE(base.contains("psnr_db"));  // not compared with itself
    EXPECT_EQ(base["images"], 3);
    EXPECT_DOUBLE_EQ(base["images_per_s"].get<double>(), 3 / 0.6);
    EXPECT_EQ(base["peak_memory_bytes"], 2000);
    EXPECT_EQ(fast["name"], "fast");
    EXPECT_EQ(fast["accel"], (nlohmann::json{{"x", 1}}));
    EXPECT_DOUBLE_EQ(fast["images_per_s"].get<double>(), 3 / 0.15);
    EXPECT_DOUBLE_EQ(fast["speedup"].get<double>(), 4.0);
    EXPECT_EQ(fast["peak_memory_bytes"], 3000);
    // Latency per image per call: 50 and 50 ms.
    EXPECT_DOUBLE_EQ(fast["latency_ms_per_image"]["p50"].get<double>(), 50.0);
    EXPECT_DOUBLE_EQ(base["latency_ms_per_image"]["p99"].get<double>(), 200.0);
    // Identical images (PSNR null) are counted apart, not averaged as infinity.
    EXPECT_DOUBLE_EQ(fast["psnr_db"]["mean"].get<double>(), 25.0);
    EXPECT_EQ(fast["psnr_db"]["identical"], 1);
    EXPECT_NEAR(fast["ssim"]["mean"].get<double>(), 0.9, 1e-12);
    EXPECT_DOUBLE_EQ(fast["token_agreement"]["mean"].get<double>(), 0.5);

    const std::string csv = summary_csv(r);
    EXPECT_EQ(csv.substr(0, csv.find('\n')),
              "config,images,images_per_s,speedup,latency_p50_ms,latency_p90_ms,latency_p99_ms,"
              "peak_memory_bytes,psnr_db_mean,psnr_db_ci95,identical_images,ssim_mean,ssim_ci95,"
              "token_agreement_mean,token_agreement_ci95");
    EXPECT_NE(csv.find("\n\"fast\",3,20,4,50,50,50,3000,25,"), std::string::npos) << csv;
    const std::string rows = images_csv(shards);
    EXPECT_EQ(std::count(rows.begin(), rows.end(), '\n'), 4);
    EXPECT_NE(rows.find("1,\"fast\",0,0,20,0.8,0\n"), std::string::npos) << rows;
}

}  // namespace
}  // namespace varscope
