// `varscope-cli analyze` on the embedded emoji VAR (CPU, a few layers and heads): well-formed
// measures.json and measures.csv, the grid figure, and clear errors for bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
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

TEST(CliAnalyze, EmbeddedModelWritesMeasures) {
    varscope::testing::TempDir dir;
    const std::string out = dir.file("analysis");
    const auto r =
        cli("analyze --class 3 --seed 1 --accel fastvar --max-heads 2 --layers 0,5 -o " + out);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("capture overhead"), std::string::npos) << r.out;
    std::ifstream jf(out + "/measures.json");
    ASSERT_TRUE(jf.good()) << r.out;
    const auto j = nlohmann::json::parse(jf);
    const auto scales = j["schedule"].size();
    ASSERT_GT(scales, 2u);
    EXPECT_EQ(j["method"], "FastVAR");
    EXPECT_EQ(j["heads"].size(), 2u);
    ASSERT_EQ(j["records"].size(), scales * 2 * 2);  // scales x layers {0, 5} x 2 heads
    bool dropped = false;
    for (const auto& rec : j["records"]) {
        const double recall = rec["recall"];
        EXPECT_GE(recall, 0.0);
        EXPECT_LE(recall, 1.0 + 1e-9);
        EXPECT_EQ(rec["mass_by_scale"].size(), rec["scale"].get<size_t>() + 1);
        dropped = dropped || recall < 1.0;
    }
    EXPECT_TRUE(dropped) << "FastVAR prunes the last scales";
    EXPECT_TRUE(j["timing"].contains("capture_ms"));
    EXPECT_FALSE(j["layer_types"].empty());
    // The CSV: a header and one line per record, every line as wide as the header.
    std::ifstream cf(out + "/measures.csv");
    std::string line;
    ASSERT_TRUE(std::getline(cf, line));
    EXPECT_EQ(line.rfind("scale,layer,head,", 0), 0u);
    const auto width = std::count(line.begin(), line.end(), ',');
    size_t rows = 0;
    while (std::getline(cf, line)) {
        EXPECT_EQ(std::count(line.begin(), line.end(), ','), width) << line;
        ++rows;
    }
    EXPECT_EQ(rows, j["records"].size());
    const bool png = std::filesystem::exists(out + "/grid_recall.png");
    EXPECT_TRUE(png || std::filesystem::exists(out + "/grid_recall.ppm"));
    // Existing files refuse without --force.
    const auto again = cli("analyze --class 3 --accel fastvar --max-heads 1 --layers 0 -o " + out);
    EXPECT_EQ(again.code, 2) << again.out;
    EXPECT_NE(again.out.find("--force"), std::string::npos) << again.out;
}

TEST(CliAnalyze, BadInputIsAClearError) {
    varscope::testing::TempDir dir;
    const auto no_accel = cli("analyze -o " + dir.file("a"));
    EXPECT_EQ(no_accel.code, 2);
    EXPECT_NE(no_accel.out.find("--accel"), std::string::npos) << no_accel.out;
    const auto bad_measure = cli("analyze --accel fastvar --grid-measure nope -o " + dir.file("b"));
    EXPECT_EQ(bad_measure.code, 2);
    EXPECT_NE(bad_measure.out.find("--grid-measure"), std::string::npos) << bad_measure.out;
    const auto bad_layer = cli("analyze --class 3 --accel fastvar --layers 99 -o " + dir.file("c"));
    EXPECT_EQ(bad_layer.code, 2);
    EXPECT_NE(bad_layer.out.find("layer 99"), std::string::npos) << bad_layer.out;
    const auto mar = cli("analyze --family mar --accel lazymar -o " + dir.file("d"));
    EXPECT_EQ(mar.code, 2);
    EXPECT_NE(mar.out.find("next-scale"), std::string::npos) << mar.out;
}
