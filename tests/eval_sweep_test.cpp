// core/eval/sweep.h: sweep axes named by the parameter tables, points, the Pareto front, the
// SVG, and a sweep run as an eval job on a small random VAR.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/accel/accel_config.h"
#include "core/eval/sweep.h"
#include "core/eval/sweep_result.h"
#include "tests/error_of.h"
#include "tests/test_util.h"
#include "tests/tiny_models.h"

namespace varscope {
namespace {

using testing::error_of;
using testing::TempDir;

TEST(EvalSweep, AxesAreParsedAndCheckedAgainstTheParameterTables) {
    const auto a = parse_sweep_axis("skip.last_n=1,2");
    EXPECT_EQ(a.method, "skip");
    EXPECT_EQ(a.param, "last_n");
    EXPECT_EQ(a.values, (std::vector<nlohmann::json>{1, 2}));
    const auto l = parse_sweep_axis("fastvar.ratios=[[0.1, 0.2], [0.3]]");
    ASSERT_EQ(l.values.size(), 2u);
    EXPECT_EQ(l.values[1], nlohmann::json::array({0.3}));
    for (const char* bad : {"skip", "skip.last_n", "last_n=1", "skip.last_n=", "skip.last_n=a"})
        EXPECT_NE(error_of<std::invalid_argument>([&] { parse_sweep_axis(bad); }).find("--param"),
                  std::string::npos)
            << bad;
    const auto& methods = accel_methods();
    EXPECT_NO_THROW(check_sweep_axes({a}, methods, true));
    EXPECT_NE(error_of<std::invalid_argument>([&] {
                  check_sweep_axes({parse_sweep_axis("fastvr.ratio=1")}, methods, true);
              }).find("no method 'fastvr'"),
              std::string::npos);
    EXPECT_NE(error_of<std::invalid_argument>([&] {
                  check_sweep_axes({parse_sweep_axis("skip.lastn=1")}, methods, true);
              }).find("skip has no setting 'lastn' (settings: last_n"),
              std::string::npos);
    EXPECT_NE(error_of<std::invalid_argument>([&] {
                  check_sweep_axes({a, a}, methods, true);
              }).find("given twice"),
              std::string::npos);
    EXPECT_NE(error_of<std::invalid_argument>([&] {
                  check_sweep_axes({a, a, a}, methods, true);
              }).find("one or two"),
              std::string::npos);
    // A list sweep pairs values: both settings need as many.
    const SweepAxis three{"skip", "last_n", {1, 2, 3}};
    const SweepAxis two{methods[1].id, methods[1].params[0].key, {0.1, 0.2}};
    EXPECT_NE(error_of<std::invalid_argument>([&] {
                  check_sweep_axes({three, two}, methods, false);
              }).find("--list"),
              std::string::npos);
    EXPECT_NO_THROW(check_sweep_axes({three, two}, methods, true));
}

TEST(EvalSweep, GridAndListPoints) {
    SweepAxis x{"m", "a", {1, 2}}, y{"n", "b", {10, 20}};
    const nlohmann::json base = {{"m", {{"enabled", false}, {"a", 0}, {"c", 5}}}};
    const auto grid = sweep_points(base, {x, y}, true);
    ASSERT_EQ(grid.size(), 4u);
    EXPECT_EQ(grid[1].name, "m.a=1 n.b=20");
    EXPECT_EQ(grid[1].accel["m"], (nlohmann::json{{"enabled", true}, {"a", 1}, {"c", 5}}));
    EXPECT_EQ(grid[1].accel["n"], (nlohmann::json{{"enabled", true}, {"b", 20}}));
    EXPECT_EQ(grid[1].values, (nlohmann::json{{"m.a", 1}, {"n.b", 20}}));
    const auto list = sweep_points(base, {x, y}, false);
    ASSERT_EQ(list.size(), 2u);
    EXPECT_EQ(list[1].name, "m.a=2 n.b=20");
}

TEST(EvalSweep, ParetoFrontKeepsWhatNothingBeats) {
    // (speed, quality): (1, 1) (2, 0.9) (1.5, 0.8) dominated by (2, 0.9), (3, 0.5), (3, 0.4)
    const auto f = pareto_front({1, 2, 1.5, 3, 3}, {1.0, 0.9, 0.8, 0.5, 0.4});
    EXPECT_EQ(f, (std::vector<bool>{true, true, false, true, false}));
    // A null quality (identical images) is the best.
    EXPECT_EQ(pareto_front({1, 1}, {nullptr, 30.0}), (std::vector<bool>{true, false}));
}

TEST(EvalSweep, SummaryAndSvgOfAResult) {
    const nlohmann::json result = {
        {"configs",
         {{{"name", "baseline"}, {"speedup", 1.0}, {"images_per_s", 2.0}},
          {{"name", "s.k=1"}, {"speedup", 1.5}, {"images_per_s", 3.0}, {"ssim", {{"mean", 0.9}}}},
          {{"name", "s.k=2"},
           {"speedup", 1.2},
           {"images_per_s", 2.4},
           {"ssim", {{"mean", 0.8}}}}}}};
    const std::vector<SweepPoint> points = {{"s.k=1", {}, {{"s.k", 1}}},
                                            {"s.k=2", {}, {{"s.k", 2}}}};
    const auto s = sweep_summary(result, points, "ssim");
    EXPECT_EQ(s["pareto_front"], (nlohmann::json{"baseline", "s.k=1"}));
    EXPECT_EQ(s["points"][1]["values"], (nlohmann::json{{"s.k", 1}}));
    EXPECT_EQ(s["points"][2]["pareto"], false);
    EXPECT_THROW(sweep_summary(result, points, "fid"), std::invalid_argument);
    const std::string svg = pareto_svg(s);
    EXPECT_EQ(svg.rfind("<svg", 0), 0u);
    EXPECT_NE(svg.find("</svg>"), std::string::npos);
    size_t circles = 0;
    for (size_t at = svg.find("<circle"); at != std::string::npos; at = svg.find("<circle", at + 1))
        ++circles;
    EXPECT_EQ(circles, 3u);
    EXPECT_NE(svg.find("s.k=1: speedup 1.5"), std::string::npos);
}

TEST(EvalSweep, RunsAsAnEvalJob) {
    TempDir dir;
    EvalManifest m;
    m.classes = {1, 2};
    m.seeds = {5};
    m.batch = 2;
    m.configs = {{"base", nlohmann::json::object()}};
    m.output_dir = (dir.path() / "out").string();
    auto runner = var_runner(testing::small_pipeline(7));
    SweepRequest r;
    r.axes = {parse_sweep_axis("skip.last_n=1,2")};
    const auto s = run_sweep(m, *runner, r, {});
    ASSERT_EQ(s["points"].size(), 3u);
    EXPECT_EQ(s["points"][1]["name"], "skip.last_n=1");
    EXPECT_EQ(s["points"][2]["values"], (nlohmann::json{{"skip.last_n", 2}}));
    // Skipping more scales costs quality.
    EXPECT_GT(s["points"][1]["quality"].get<double>(), s["points"][2]["quality"].get<double>());
    for (const char* f : {"sweep.json", "pareto.svg", "result.json"})
        EXPECT_TRUE(std::filesystem::exists(dir.path() / "out" / f)) << f;
    // The file alone tells the app which config each point ran, on which model.
    const auto read = read_sweep_result((dir.path() / "out" / "sweep.json").string());
    ASSERT_EQ(read.points.size(), 3u);
    EXPECT_EQ(read.model, runner->describe());
    EXPECT_EQ(read.family, "var");
    EXPECT_EQ(read.points[0].accel, nlohmann::json::object());
    EXPECT_EQ(read.points[2].accel["skip"], (nlohmann::json{{"enabled", true}, {"last_n", 2}}));
    EXPECT_EQ(read.points[1].field("ssim"), s["points"][1]["quality"].get<double>());
    EXPECT_TRUE(read.points[1].field("latency_ms_per_image.p50").has_value());
    m.configs.push_back({"second", nlohmann::json::object()});
    EXPECT_NE(error_of<std::invalid_argument>([&] {
                  run_sweep(m, *runner, r, {});
              }).find("names 2 configs"),
              std::string::npos);
}

}  // namespace
}  // namespace varscope
