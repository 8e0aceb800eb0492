// core/eval/sweep_result.h: reading sweep.json (with result.json beside older files), the
// fields of an eval result, and the Pareto front over any two fields.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/eval/sweep.h"
#include "core/eval/sweep_result.h"
#include "tests/error_of.h"
#include "tests/test_util.h"

namespace varscope {
namespace {

using testing::error_of;
using testing::TempDir;

constexpr double kInf = std::numeric_limits<double>::infinity();

SweepResultPoint point(const std::string& name, std::map<std::string, double> fields) {
    SweepResultPoint p;
    p.name = name;
    p.fields = std::move(fields);
    return p;
}

void write(const std::filesystem::path& path, const std::string& text) {
    std::ofstream(path) << text;
}

// An eval result as run_eval_job writes it: the baseline and two configs.
nlohmann::json eval_result() {
    return {{"model", "VAR d4 (test)"},
            {"family", "var"},
            {"configs",
             {{{"name", "baseline"},
               {"accel", nullptr},
               {"images", 2},
               {"speedup", 1.0},
               {"images_per_s", 2.0},
               {"latency_ms_per_image", {{"p50", 500.0}, {"p90", 510.0}, {"p99", 520.0}}},
               {"peak_memory_bytes", nullptr},
               {"quality", {{"fid", {{"reference", 30.0}, {"baseline", nullptr}}}}}},
              {{"name", "skip.last_n=1"},
               {"accel", {{"skip", {{"enabled", true}, {"last_n", 1}}}}},
               {"images", 2},
               {"speedup", 1.5},
               {"images_per_s", 3.0},
               {"latency_ms_per_image", {{"p50", 330.0}, {"p90", 340.0}, {"p99", 350.0}}},
               {"peak_memory_bytes", nullptr},
               {"psnr_db", {{"mean", 25.0}, {"ci95", 1.0}, {"n", 2}, {"identical", 0}}},
               {"ssim", {{"mean", 0.9}, {"ci95", 0.01}, {"n", 2}}},
               {"token_agreement", {{"mean", 0.7}, {"ci95", 0.1}, {"n", 2}}},
               {"quality",
                {{"fid", {{"reference", 31.0}, {"baseline", 2.5}}},
                 {"inception_score", {{"mean", 4.0}, {"std", 0.2}, {"splits", 2}}},
                 {"precision_recall",
                  {{"precision", 0.8}, {"recall", 0.6}, {"k", 3}, {"real", "baseline"}}}}}},
              {{"name", "skip.last_n=2"},
               {"accel", {{"skip", {{"enabled", true}, {"last_n", 2}}}}},
               {"images", 2},
               {"speedup", 2.5},
               {"images_per_s", 5.0},
               {"latency_ms_per_image", {{"p50", 200.0}, {"p90", 210.0}, {"p99", 220.0}}},
               {"peak_memory_bytes", nullptr},
               {"psnr_db", {{"mean", nullptr}, {"ci95", nullptr}, {"n", 0}, {"identical", 2}}},
               {"ssim", {{"mean", 0.8}, {"ci95", 0.02}, {"n", 2}}},
               {"token_agreement", {{"mean", 0.5}, {"ci95", 0.1}, {"n", 2}}},
               {"quality",
                {{"fid", {{"reference", 33.0}, {"baseline", 6.0}}},
                 {"inception_score", {{"mean", 3.5}, {"std", 0.2}, {"splits", 2}}},
                 {"precision_recall", {{"precision", 0.7}, {"recall", 0.5}, {"k", 3}}}}}}}}};
}

std::vector<SweepPoint> sweep_points_of_result() {
    return {{"skip.last_n=1", {}, {{"skip.last_n", 1}}},
            {"skip.last_n=2", {}, {{"skip.last_n", 2}}}};
}

TEST(EvalSweepResult, FieldsOfAnEvalConfig) {
    const auto f = eval_config_fields(eval_result()["configs"][1]);
    EXPECT_EQ(f.at("speedup"), 1.5);
    EXPECT_EQ(f.at("latency_ms_per_image.p90"), 340.0);
    EXPECT_EQ(f.at("psnr_db"), 25.0);
    EXPECT_EQ(f.at("ssim"), 0.9);
    EXPECT_EQ(f.at("quality.fid.baseline"), 2.5);
    EXPECT_EQ(f.at("quality.inception_score"), 4.0);
    EXPECT_EQ(f.at("quality.precision_recall.recall"), 0.6);
    // Details of a statistic, counts and nulls are no fields.
    for (const char* none : {"images", "psnr_db.ci95", "ssim.n", "peak_memory_bytes",
                             "quality.precision_recall.k", "quality.inception_score.std"})
        EXPECT_EQ(f.count(none), 0u) << none;
    // All images identical: no finite PSNR, the best.
    EXPECT_EQ(eval_config_fields(eval_result()["configs"][2]).at("psnr_db"), kInf);
}

TEST(EvalSweepResult, ReadsTheCliSummaryWithConfigsAndMetrics) {
    const auto summary = sweep_summary(eval_result(), sweep_points_of_result(), "ssim");
    const auto r = parse_sweep_result(summary, "s/sweep.json");
    EXPECT_EQ(r.quality_metric, "ssim");
    EXPECT_EQ(r.model, "VAR d4 (test)");
    EXPECT_EQ(r.family, "var");
    ASSERT_EQ(r.points.size(), 3u);
    EXPECT_EQ(r.points[0].name, "baseline");
    EXPECT_EQ(r.points[0].accel, nlohmann::json::object());  // accelerators off
    EXPECT_EQ(r.points[2].accel, (nlohmann::json{{"skip", {{"enabled", true}, {"last_n", 2}}}}));
    EXPECT_EQ(r.points[2].values, (nlohmann::json{{"skip.last_n", 2}}));
    EXPECT_EQ(r.points[1].field("quality.fid.reference"), 31.0);
    // The baseline against itself: perfect where the others were compared with it.
    EXPECT_EQ(r.points[0].field("ssim"), 1.0);
    EXPECT_EQ(r.points[0].field("psnr_db"), kInf);
    EXPECT_EQ(r.points[0].field("quality.fid.baseline"), 0.0);
    EXPECT_EQ(r.points[0].field("quality.fid.reference"), 30.0);
    EXPECT_EQ(r.points[0].field("quality.inception_score"), std::nullopt);
    // Speed fields first, then the CLI's quality metric.
    ASSERT_GE(r.fields.size(), 6u);
    EXPECT_EQ(r.fields[0], "speedup");
    EXPECT_EQ(r.fields[1], "images_per_s");
    EXPECT_EQ(r.fields[2].rfind("latency", 0), 0u);
    const auto ssim = std::find(r.fields.begin(), r.fields.end(), "ssim");
    const auto first_quality = std::find_if(r.fields.begin(), r.fields.end(),
                                            [](const auto& f) { return !is_speed_field(f); });
    EXPECT_EQ(ssim, first_quality);
    for (const char* f : {"psnr_db", "token_agreement", "quality.fid.baseline"})
        EXPECT_NE(std::find(r.fields.begin(), r.fields.end(), f), r.fields.end()) << f;
    // The file's front is kept as written; the CLI's front equals the one over its own axes.
    const auto front =
        sweep_pareto_front(r.points, {"speedup", Better::Higher}, {"ssim", Better::Higher});
    for (size_t i = 0; i < r.points.size(); ++i)
        EXPECT_EQ(front[i], r.points[i].pareto_in_file) << r.points[i].name;
}

TEST(EvalSweepResult, OlderFilesTakeConfigsFromTheResultBesideThem) {
    TempDir dir;
    auto summary = sweep_summary(eval_result(), sweep_points_of_result(), "psnr_db");
    for (auto& p : summary["points"]) {
        p.erase("accel");
        p.erase("metrics");
    }
    summary.erase("model");
    summary.erase("family");
    const auto path = (dir.path() / "sweep.json").string();
    write(path, summary.dump());
    // Without result.json: the points are there, their configs unknown.
    auto r = read_sweep_result(path);
    ASSERT_EQ(r.points.size(), 3u);
    EXPECT_TRUE(r.points[1].accel.is_null());
    EXPECT_EQ(r.points[1].field("psnr_db"), 25.0);
    EXPECT_EQ(r.points[2].field("psnr_db"), kInf);  // null quality: identical images
    EXPECT_EQ(r.points[1].field("ssim"), std::nullopt);
    EXPECT_EQ(r.model, "");
    write((dir.path() / "result.json").string(), eval_result().dump());
    r = read_sweep_result(path);
    EXPECT_EQ(r.model, "VAR d4 (test)");
    EXPECT_EQ(r.points[1].accel["skip"]["last_n"], 1);
    EXPECT_EQ(r.points[0].accel, nlohmann::json::object());
    EXPECT_EQ(r.points[1].field("ssim"), 0.9);
}

// The committed CLI output (tests/fixtures/sweep: the embedded VAR, 7 points, sweep.json as
// written before the points carried their configs, result.json beside it).
TEST(EvalSweepResult, ReadsARealCliResult) {
    const auto r =
        read_sweep_result(std::string(VARSCOPE_SOURCE_DIR) + "/tests/fixtures/sweep/sweep.json");
    ASSERT_EQ(r.points.size(), 7u);
    EXPECT_EQ(r.family, "var");
    EXPECT_EQ(r.model.rfind("VAR d16", 0), 0u);
    const auto front =
        sweep_pareto_front(r.points, {"speedup", Better::Higher}, {"ssim", Better::Higher});
    for (size_t i = 0; i < r.points.size(); ++i) {
        EXPECT_EQ(front[i], r.points[i].pareto_in_file) << r.points[i].name;
        ASSERT_TRUE(r.points[i].accel.is_object()) << r.points[i].name;
        EXPECT_TRUE(r.points[i].field("latency_ms_per_image.p50").has_value());
    }
    const auto& p = r.points[3];
    EXPECT_EQ(p.values["skip.last_n"], 2);
    EXPECT_EQ(p.accel["skip"]["last_n"], 2);
    EXPECT_EQ(p.accel["sparvar"]["top_k"], p.values["sparvar.top_k"]);
    EXPECT_TRUE(p.field("token_agreement").has_value());
}

TEST(EvalSweepResult, ParetoFrontOverChosenFieldsAndDirections) {
    // (speed, error): lower error is better.
    const std::vector<SweepResultPoint> pts = {
        point("a", {{"s", 1}, {"e", 1}}),    // the most accurate
        point("b", {{"s", 2}, {"e", 2}}),    // front
        point("c", {{"s", 1.5}, {"e", 3}}),  // beaten by b
        point("d", {{"s", 3}, {"e", 5}}),    // the fastest
        point("e", {{"s", 3}, {"e", 6}}),    // beaten by d (tie in speed)
    };
    const ParetoAxis speed{"s", Better::Higher}, error{"e", Better::Lower};
    EXPECT_EQ(sweep_pareto_front(pts, speed, error),
              (std::vector<bool>{true, true, false, true, false}));
    // Turning the quality direction turns the front: now the largest e is best.
    EXPECT_EQ(sweep_pareto_front(pts, speed, {"e", Better::Higher}),
              (std::vector<bool>{false, false, false, false, true}));
    // Points equal in both fields: neither beats the other.
    const std::vector<SweepResultPoint> twins = {point("x", {{"s", 2}, {"e", 1}}),
                                                 point("y", {{"s", 2}, {"e", 1}}),
                                                 point("z", {{"s", 1}, {"e", 1}})};
    EXPECT_EQ(sweep_pareto_front(twins, speed, error), (std::vector<bool>{true, true, false}));
    // +infinity (identical images) is the best PSNR.
    EXPECT_EQ(sweep_pareto_front(
                  {point("id", {{"s", 1}, {"p", kInf}}), point("q", {{"s", 1}, {"p", 40}})}, speed,
                  {"p", Better::Higher}),
              (std::vector<bool>{true, false}));
}

TEST(EvalSweepResult, PointsWithoutAFieldAreLeftOffTheFront) {
    const ParetoAxis speed{"s", Better::Higher}, q{"q", Better::Higher};
    const std::vector<SweepResultPoint> pts = {
        point("missing", {{"s", 9}}),                   // no q: not placed
        point("nan", {{"s", 9}, {"q", std::nan("")}}),  // NaN: as missing
        point("slow", {{"s", 1}, {"q", 0.9}}),
        point("fast", {{"s", 2}, {"q", 0.5}}),
    };
    EXPECT_EQ(pts[1].field("q"), std::nullopt);
    EXPECT_EQ(sweep_pareto_front(pts, speed, q), (std::vector<bool>{false, false, true, true}));
    EXPECT_EQ(sweep_pareto_front(pts, speed, {"absent", Better::Higher}),
              (std::vector<bool>(4, false)));
}

TEST(EvalSweepResult, StaircaseFollowsTheDirectionOfX) {
    const std::vector<SweepResultPoint> pts = {
        point("a", {{"s", 1}, {"q", 3}}), point("b", {{"s", 2}, {"q", 2}}),
        point("c", {{"s", 3}, {"q", 1}}), point("off", {{"s", 1}, {"q", 1}})};
    const ParetoAxis s{"s", Better::Higher}, q{"q", Better::Higher};
    const auto front = sweep_pareto_front(pts, s, q);
    ASSERT_EQ(front, (std::vector<bool>{true, true, true, false}));
    using P = std::vector<std::pair<double, double>>;
    // Higher s better: right of a the best reachable q is b's, so the step is at a.
    EXPECT_EQ(pareto_staircase(pts, front, s, q), (P{{1, 3}, {1, 2}, {2, 2}, {2, 1}, {3, 1}}));
    // Lower s better (a, b, c then are not a front, but the drawing rule is what is tested).
    EXPECT_EQ(pareto_staircase(pts, front, {"s", Better::Lower}, q),
              (P{{1, 3}, {2, 3}, {2, 2}, {3, 2}, {3, 1}}));
    EXPECT_TRUE(pareto_staircase(pts, std::vector<bool>(4, false), s, q).empty());
}

TEST(EvalSweepResult, DirectionsAndLabels) {
    EXPECT_EQ(default_better("speedup"), Better::Higher);
    EXPECT_EQ(default_better("psnr_db"), Better::Higher);
    EXPECT_EQ(default_better("latency_ms_per_image.p50"), Better::Lower);
    EXPECT_EQ(default_better("peak_memory_bytes"), Better::Lower);
    EXPECT_EQ(default_better("quality.fid.reference"), Better::Lower);
    EXPECT_EQ(default_better("quality.sfid.baseline"), Better::Lower);
    EXPECT_EQ(default_better("quality.inception_score"), Better::Higher);
    EXPECT_TRUE(is_speed_field("images_per_s"));
    EXPECT_FALSE(is_speed_field("ssim"));
    EXPECT_EQ(sweep_field_label("quality.fid.baseline"), "FID vs baseline");
    EXPECT_EQ(sweep_field_label("something.new"), "something.new");
}

TEST(EvalSweepResult, MalformedFilesAreNamedWithTheKey) {
    const auto good = sweep_summary(eval_result(), sweep_points_of_result(), "ssim");
    auto error = [&](const std::function<void(nlohmann::json&)>& spoil) {
        nlohmann::json j = good;
        spoil(j);
        return error_of<std::invalid_argument>([&] { parse_sweep_result(j, "x/sweep.json"); });
    };
    auto has = [](const std::string& message, const std::string& part) {
        return message.find(part) != std::string::npos;
    };
    EXPECT_TRUE(has(error([](auto& j) { j = nlohmann::json::array(); }), "expected a JSON object"));
    EXPECT_TRUE(has(error([](auto& j) { j.erase("quality_metric"); }),
                    "sweep result 'x/sweep.json': missing key 'quality_metric'"));
    EXPECT_TRUE(has(error([](auto& j) { j["quality_metric"] = 3; }), "'quality_metric' is not"));
    EXPECT_TRUE(has(error([](auto& j) { j.erase("points"); }), "missing key 'points'"));
    EXPECT_TRUE(has(error([](auto& j) { j["points"] = {{"a", 1}}; }), "'points' is not a list"));
    EXPECT_TRUE(has(error([](auto& j) { j["points"] = nlohmann::json::array(); }), "is empty"));
    EXPECT_TRUE(has(error([](auto& j) { j["points"][1] = 5; }), "points[1]: expected an object"));
    EXPECT_TRUE(
        has(error([](auto& j) { j["points"][1].erase("name"); }), "points[1]: missing key 'name'"));
    EXPECT_TRUE(has(error([](auto& j) { j["points"][2]["speedup"] = "fast"; }),
                    "point 'skip.last_n=2': 'speedup' is not a number"));
    EXPECT_TRUE(has(error([](auto& j) { j["points"][2].erase("images_per_s"); }),
                    "point 'skip.last_n=2': missing key 'images_per_s'"));
    EXPECT_TRUE(has(error([](auto& j) { j["points"][2]["quality"] = "good"; }),
                    "'quality' is neither a number nor null"));
    EXPECT_TRUE(has(error([](auto& j) { j["points"][2]["pareto"] = 1; }), "'pareto' is not"));
    EXPECT_TRUE(has(error([](auto& j) { j["points"][2]["accel"] = "fastvar"; }),
                    "'accel' is not an object"));
    EXPECT_TRUE(
        has(error([](auto& j) { j["points"][2]["metrics"] = 1; }), "'metrics' is not an object"));
    EXPECT_TRUE(has(error([](auto& j) { j["points"][2]["name"] = "skip.last_n=1"; }),
                    "point 'skip.last_n=1' is listed twice"));
    EXPECT_NO_THROW(parse_sweep_result(good, "x/sweep.json"));

    TempDir dir;
    const auto path = (dir.path() / "sweep.json").string();
    write(path, "{\"points\": [");
    EXPECT_TRUE(has(error_of<std::invalid_argument>([&] { read_sweep_result(path); }),
                    "sweep result '" + path + "'"));
    EXPECT_TRUE(has(error_of<std::invalid_argument>(
                        [&] { read_sweep_result((dir.path() / "none.json").string()); }),
                    "none.json"));
}

}  // namespace
}  // namespace varscope
