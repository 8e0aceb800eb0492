// Infinity's dynamic-resolution schedules against the official module's tables (written into
// tests/fixtures/infinity_tiny/schedules.json by tools/parity/infinity_parity.py).
#include "core/models/infinity_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/test_util.h"

using namespace varscope;

namespace {

nlohmann::json official() {
    std::ifstream f(varscope::testing::source_dir() +
                    "/tests/fixtures/infinity_tiny/schedules.json");
    return nlohmann::json::parse(f);
}

}  // namespace

TEST(InfinitySchedule, TemplatesAreTheOfficialOnesInOrder) {
    const auto j = official();
    EXPECT_EQ(infinity_h_div_w_templates(), j["h_div_w_templates"].get<std::vector<double>>());
}

TEST(InfinitySchedule, EveryTemplateAndBudgetMatchesTheOfficialTable) {
    const auto j = official()["dynamic_resolution_h_w"];
    ASSERT_EQ(j.size(), 15u);
    int checked = 0;
    for (const auto& [key, budgets] : j.items()) {
        const double ratio = std::stod(key);
        const auto full = budgets["1M"];
        for (const auto& [pixels, scales] : budgets.items()) {
            const auto s = infinity_schedule(ratio, pixels);
            ASSERT_EQ(s.num_scales(), static_cast<int64_t>(scales.size())) << key << " " << pixels;
            for (size_t i = 0; i < scales.size(); ++i) {
                EXPECT_EQ(s.scales[i][0], scales[i][1].get<int64_t>())
                    << key << " " << pixels << " " << i;
                EXPECT_EQ(s.scales[i][1], scales[i][2].get<int64_t>())
                    << key << " " << pixels << " " << i;
            }
            EXPECT_EQ(s.rope_h, full.back()[1].get<int64_t>());
            EXPECT_EQ(s.rope_w, full.back()[2].get<int64_t>());
            EXPECT_EQ(s.h_div_w, ratio);
            ++checked;
        }
    }
    EXPECT_EQ(checked, 60);
    // 1024 x 1024: 13 scales up to 64 x 64 (the released default).
    const auto s = infinity_schedule(1.0, "1M");
    EXPECT_EQ(s.num_scales(), 13);
    EXPECT_EQ(s.scales.back(), (std::array<int64_t, 2>{64, 64}));
    EXPECT_EQ(s.total_tokens(), 10521);
}

TEST(InfinitySchedule, NearestTemplateIsTheOfficialArgmin) {
    const auto t = official()["h_div_w_templates"].get<std::vector<double>>();
    for (double r = 0.2; r < 3.6; r += 0.0137) {
        size_t best = 0;
        for (size_t i = 1; i < t.size(); ++i)
            if (std::abs(r - t[i]) < std::abs(r - t[best])) best = i;
        EXPECT_EQ(nearest_h_div_w_template(r), t[best]) << r;
    }
    EXPECT_EQ(infinity_schedule(16.0 / 9.0).h_div_w, 1.75);
    EXPECT_EQ(infinity_schedule(9.0 / 16.0).h_div_w, 0.571);
}

TEST(InfinitySchedule, RejectsUnknownBudgetsAndRatios) {
    EXPECT_THROW(infinity_schedule(1.0, "2M"), std::invalid_argument);
    EXPECT_THROW(infinity_schedule(0.0), std::invalid_argument);
    EXPECT_THROW(infinity_schedule(NAN), std::invalid_argument);
    EXPECT_THROW(infinity_schedule(1.0).first(14), std::invalid_argument);
    EXPECT_EQ(infinity_schedule(1.0).first(3).total_tokens(), 1 + 4 + 16);
}
