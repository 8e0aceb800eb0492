// `varscope-cli sweep` (issue #34): a grid or list over one or two accelerator settings (named
// as in the methods' parameter tables, core/accel/param_spec.h), each point an eval-job config,
// and the speed/quality Pareto front of the result as JSON and an SVG plot (written as text).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/accel/param_spec.h"
#include "core/eval/eval_job.h"

namespace varscope {

struct SweepAxis {
    std::string method;  // e.g. "fastvar"
    std::string param;   // e.g. "ratio"
    std::vector<nlohmann::json> values;
    std::string key() const { return method + "." + param; }
};

// "fastvar.ratio=0.2,0.4,0.6", or a JSON list after '=' for list-valued settings
// ("fastvar.ratios=[[0,0.2],[0,0.4]]"). std::invalid_argument naming the argument.
SweepAxis parse_sweep_axis(const std::string& arg);

// Each axis names a method of `methods` and one of its parameters (not "enabled"); at most two
// axes, different settings; in a list sweep (grid = false) every axis has as many values.
// std::invalid_argument listing what exists.
void check_sweep_axes(const std::vector<SweepAxis>& axes, const std::vector<MethodSpec>& methods,
                      bool grid);

struct SweepPoint {
    std::string name;       // "fastvar.ratio=0.2 sparvar.k=3"
    nlohmann::json accel;   // the base config with the point's settings, their methods enabled
    nlohmann::json values;  // {"fastvar.ratio": 0.2, ...}
};
// Grid: every combination (first axis slowest); list: the i-th value of every axis.
std::vector<SweepPoint> sweep_points(const nlohmann::json& base, const std::vector<SweepAxis>& axes,
                                     bool grid);

// Which points no other point beats in both speed and quality (higher is better in both; a
// null quality, e.g. the PSNR of identical images, counts as the best).
std::vector<bool> pareto_front(const std::vector<double>& speed,
                               const std::vector<nlohmann::json>& quality);

// From an eval result whose configs are the baseline and the points: per point its settings,
// speedup, images/s and quality (`metric`: "ssim", "psnr_db" or "token_agreement", the mean;
// "emoji_accuracy" or "emoji_agreement", from the emoji network's scores, manifest
// metrics.emoji), and whether it is on the front; the baseline is a point (speedup 1) too. Each
// point also carries its config (`accel`) and its whole result entry (`metrics`), and the summary
// the result's `model` and `family`: the app (core/eval/sweep_result.h) reads them.
nlohmann::json sweep_summary(const nlohmann::json& eval_result,
                             const std::vector<SweepPoint>& points, const std::string& metric);

// The summary's points (grey) and front (blue line) on speedup vs quality axes.
std::string pareto_svg(const nlohmann::json& summary);

struct SweepRequest {
    std::vector<SweepAxis> axes;
    bool grid = true;
    std::string metric = "ssim";
};
// The sweep as an eval job: the manifest's one config is the base of every point (a preset or
// file is resolved by the runner's family), the points replace it, the job runs (resuming like
// any eval job), and rank 0 writes sweep.json and pareto.svg beside result.json. Returns the
// summary (null on the other ranks). std::invalid_argument for a manifest with other than one
// config or axes the model's methods do not have.
nlohmann::json run_sweep(EvalManifest m, Runner& runner, const SweepRequest& request,
                         const EvalJobOptions& options);

}  // namespace varscope
