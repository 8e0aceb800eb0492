// `varscope-cli analyze`: what an accelerator's mask keeps of the dense attention, per scale x
// layer x head (core/analysis/attention_analysis.h): measures.json, measures.csv, a scale x layer
// grid figure of one measure, and optionally the per-query maps. Model and sampling flags are
// generate's (run_args.h).
#include <ATen/ATen.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "app/cli/image_io.h"
#include "app/cli/mar_cli_common.h"
#include "app/cli/run_args.h"
#include "app/cli/run_report.h"
#include "core/analysis/attention_analysis.h"
#include "core/analysis/measure_grid.h"
#include "core/io/checkpoint.h"

namespace varscope::cli {
namespace {

namespace fs = std::filesystem;

struct AnalyzeArgs {
    ModelArgs model;
    SampleArgs sampling;
    std::string accel, out_dir, grid_measure = "recall";
    bool force = false, query_maps = false;
    int64_t max_heads = 0, query_chunk = 256, sink_scales = 2, dense_runs = 1;
    std::vector<int64_t> scales, layers;
};

// Viridis-like ramp through five anchors, t in [0, 1].
std::array<float, 3> ramp(double t) {
    static const float anchors[5][3] = {{0.267f, 0.005f, 0.329f},
                                        {0.229f, 0.322f, 0.546f},
                                        {0.128f, 0.567f, 0.551f},
                                        {0.369f, 0.789f, 0.383f},
                                        {0.993f, 0.906f, 0.144f}};
    t = std::clamp(t, 0.0, 1.0) * 4.0;
    const int i = std::min(3, static_cast<int>(t));
    const float f = static_cast<float>(t - i);
    std::array<float, 3> c{};
    for (int k = 0; k < 3; ++k) c[k] = anchors[i][k] * (1 - f) + anchors[i + 1][k] * f;
    return c;
}

// Scales down, layers across, each cell the mean over the measured heads (the app's grid,
// core/analysis/measure_grid.h); min..max of the grid mapped onto the ramp (the JSON holds the
// numbers). Unmeasured cells stay grey.
at::Tensor grid_image(const analysis::AttentionAnalysis& a, analysis::GridMeasure measure) {
    const auto g = analysis::scale_layer_grid(
        a.records, measure, static_cast<int64_t>(a.layout.sides.size()), a.layout.layers, a.typing);
    const auto [lo, hi] = g.range();
    const int64_t cell = 24;
    auto img = at::full({3, g.rows * cell, g.cols * cell}, 0.5f);
    for (int64_t s = 0; s < g.rows; ++s)
        for (int64_t l = 0; l < g.cols; ++l) {
            const double v = g.at(s, l);
            if (!std::isfinite(v)) continue;
            const auto c = ramp(hi > lo ? (v - lo) / (hi - lo) : 1.0);
            for (int k = 0; k < 3; ++k)
                img[k].narrow(0, s * cell, cell - 1).narrow(1, l * cell, cell - 1).fill_(c[k]);
        }
    return img;
}

int run(AnalyzeArgs& a) {
    if (a.accel.empty())
        throw std::invalid_argument("--accel is required: the method whose mask is measured");
    if (a.out_dir.empty()) throw std::invalid_argument("--out DIR is required");
    analysis::GridMeasure grid_measure;
    try {
        grid_measure = analysis::grid_measure_from_name(a.grid_measure);
    } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(std::string("--grid-measure: ") + e.what());
    }
    if (a.model.likely_family() == Family::Mar)
        throw std::invalid_argument(
            "analyze needs a next-scale model (VAR or Infinity); MAR's attention has no scales");
    try {
        accel_plan(a.model.likely_family(), a.accel);
    } catch (const AccelConfigError& e) {
        throw std::invalid_argument(std::string("--accel: ") + e.what());
    }
    prepare_output_dir(a.out_dir, "--out");
    const auto path = [&](const std::string& name) {
        return (fs::path(a.out_dir) / name).string();
    };
    const std::string json_path = path("measures.json"), csv_path = path("measures.csv"),
                      grid_path = path("grid_" + a.grid_measure + default_image_extension()),
                      maps_path = path("query_maps.safetensors");
    for (const auto& f : {json_path, csv_path, grid_path}) check_output_file(f, a.force, "--out");
    if (a.query_maps) check_output_file(maps_path, a.force, "--out");

    const auto runner = a.model.build();
    SampleSettings s = a.sampling.resolve(*runner);
    if (s.images() > 1) std::cerr << "note: the measures read the first image of the batch\n";
    a.sampling.check_memory(*runner, s);
    const auto accel = a.sampling.accel(*runner, a.accel);
    std::cerr << runner->describe() << "\nmethod: " << accel->describe() << "\n";

    analysis::AnalysisOptions opt;
    opt.max_heads = a.max_heads;
    opt.dense_runs = a.dense_runs;
    opt.scales = a.scales;
    opt.layers = a.layers;
    opt.measure.query_chunk = a.query_chunk;
    opt.measure.sink_scales = a.sink_scales;
    opt.measure.query_maps = a.query_maps;
    const auto res = report_out_of_memory(*runner, s, accel.get(), [&] {
        return analysis::analyze_attention(*runner, s, *accel, opt);
    });

    nlohmann::json j = environment_json(runner->device().str());
    j.update({{"date", now_utc()}, {"seed", a.sampling.seed}, {"precision", a.model.precision}});
    j.update(analysis::to_json(res));
    write_json(j, json_path, a.force);
    write_text(analysis::to_csv(res), csv_path);
    write_image(grid_image(res, grid_measure), grid_path, a.force);
    if (a.query_maps) {
        StateDict maps;
        for (const auto& m : res.maps) {
            const auto key = std::to_string(m.scale) + "." + std::to_string(m.layer);
            maps["entropy." + key] = m.entropy;
            maps["recall." + key] = m.recall;
        }
        save_safetensors(maps, maps_path, {{"heads", nlohmann::json(res.heads).dump()}});
    }
    std::cerr << "measured " << res.records.size() << " (scale, layer, head) records; "
              << res.masked_blocks << " (scale, layer) blocks where the method drops something\n"
              << "capture overhead: " << res.capture_ms << " ms measuring; dense run "
              << res.dense_ms << " ms (fastest of " << res.dense_runs << "; first "
              << res.dense_first_ms << " ms), with capture " << res.capture_run_ms << " ms\n";
    if (res.dense_peak_bytes > 0)
        std::cerr << "peak GPU memory: dense run " << res.dense_peak_bytes / (1 << 20)
                  << " MiB, with capture " << res.capture_peak_bytes / (1 << 20) << " MiB\n";
    std::cerr << "wrote " << json_path << ", " << csv_path << ", " << grid_path
              << (a.query_maps ? ", " + maps_path : "") << "\n";
    return 0;
}

}  // namespace

Command add_analyze(CLI::App& app) {
    auto a = std::make_shared<AnalyzeArgs>();
    auto* cmd = app.add_subcommand(
        "analyze",
        "measure what an accelerator's mask keeps of the dense attention (recall, output error, "
        "mass per key scale, entropy, head types) per scale x layer x head (docs/analysis.md)");
    a->model.add_to(*cmd, Family::Var);
    a->sampling.add_to(*cmd);
    cmd->add_option(
        "--accel", a->accel,
        "the method: a JSON config file, inline JSON, or a preset (" + all_preset_names() + ")");
    cmd->add_option("-o,--out", a->out_dir,
                    "folder for measures.json, measures.csv and the grid figure");
    cmd->add_flag("--force", a->force, "overwrite existing files in --out");
    cmd->add_option("--max-heads", a->max_heads,
                    "measure this many heads, evenly spaced (0 = all; for big models)")
        ->check(CLI::Range(int64_t{0}, int64_t{4096}));
    cmd->add_option("--scales", a->scales, "only these scales (default: all)")->delimiter(',');
    cmd->add_option("--layers", a->layers, "only these layers (default: all)")->delimiter(',');
    cmd->add_option("--query-chunk", a->query_chunk,
                    "queries per pass (memory: heads x chunk x keys floats)")
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
    cmd->add_option("--sink-scales", a->sink_scales,
                    "scales counted as sinks in mass_sink (default 2: the 1x1 and 2x2 maps)")
        ->check(CLI::Range(int64_t{0}, int64_t{64}));
    cmd->add_option("--dense-runs", a->dense_runs,
                    "time the dense run this many times, the fastest is the overhead's reference "
                    "(on CUDA the first includes capturing its graphs; default 1)")
        ->check(CLI::Range(int64_t{1}, int64_t{100}));
    cmd->add_flag("--query-maps", a->query_maps,
                  "also write per-query entropy and recall maps (query_maps.safetensors)");
    cmd->add_option(
        "--grid-measure", a->grid_measure,
        "the measure of the grid figure (default recall): " + [] {
            std::string names;
            for (const auto& n : analysis::grid_measure_names())
                names += (names.empty() ? "" : ", ") + n;
            return names;
        }());
    return [a]() { return run(*a); };
}

}  // namespace varscope::cli
