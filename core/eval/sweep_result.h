// A sweep result as the app reads it (issue #34): `sweep.json` of `varscope-cli sweep` (and,
// for files written before the points carried their configs and metrics, the `result.json`
// beside it), as points with the accelerator config each ran and every numeric field of its
// eval result, and the Pareto front over any two of those fields. No Torch, no Qt.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace varscope {

struct SweepResultPoint {
    std::string name;       // "skip.last_n=2", "baseline"
    nlohmann::json accel;   // the accelerator config it ran ({} for the baseline); null: unknown
    nlohmann::json values;  // the swept settings ({"skip.last_n": 2}); null for the baseline
    // Numeric fields ("speedup", "ssim", "quality.fid.baseline", ...). +infinity: a PSNR of
    // images identical to the baseline's (the best); absent: not measured for this point.
    std::map<std::string, double> fields;
    bool pareto_in_file = false;  // on the front the CLI wrote (speedup vs its quality metric)

    std::optional<double> field(const std::string& key) const;
};

struct SweepResult {
    std::string path;            // the file read
    std::string quality_metric;  // the CLI's quality axis: "ssim", "psnr_db" or "token_agreement"
    std::string model;           // Runner::describe() of the model it ran ("" if not recorded)
    std::string family;          // "var", "mar", "infinity" ("" if not recorded)
    std::vector<SweepResultPoint> points;
    // Every field some point has, speed fields first (speedup, images/s, latency, memory), then
    // the quality fields in the order met.
    std::vector<std::string> fields;
};

// The numeric fields of one config of an eval result (result.json's "configs" entries): numbers
// by their path ("latency_ms_per_image.p50", "quality.fid.reference"); a {"mean": ...} object
// counts as its mean ("ssim"), the rest of it (ci95, n) is left out, and a PSNR whose images
// were all identical (mean null, identical > 0) is +infinity. Nulls are left out.
std::map<std::string, double> eval_config_fields(const nlohmann::json& config);

// Parses a sweep.json (`text`, read from `path`). `result_json`: the eval result beside it, used
// for the configs and metrics of points that lack them (older files); null if none. Throws
// std::invalid_argument naming the file and the key for anything malformed (not an object,
// a missing or mistyped key, a point named twice, no points).
SweepResult parse_sweep_result(const nlohmann::json& sweep, const std::string& path,
                               const nlohmann::json& result_json = nullptr);

// Reads `path` (sweep.json); its points' configs come from the file, or from result.json in the
// same folder when the file predates them. Errors (std::invalid_argument) name the file.
SweepResult read_sweep_result(const std::string& path);

enum class Better { Higher, Lower };

// Which fields are better lower: latency, memory, FID and sFID; all others higher.
Better default_better(const std::string& field);
// Speed fields (speedup, images/s, latency, memory) as opposed to quality fields.
bool is_speed_field(const std::string& field);
// "speedup (×)", "PSNR vs baseline (dB)", "FID vs reference", ...; unknown fields as they are.
std::string sweep_field_label(const std::string& field);

struct ParetoAxis {
    std::string field;
    Better better = Better::Higher;
};

// Per point: on the front over (x, y), i.e. no other point is at least as good in both and
// better in one. Points equal in both are all on it. A point without a value for x or y (absent
// or NaN) is not on it and beats nothing.
std::vector<bool> sweep_pareto_front(const std::vector<SweepResultPoint>& points,
                                     const ParetoAxis& x, const ParetoAxis& y);

// The front as a staircase for drawing: the front's points sorted by x, joined by a horizontal
// and a vertical segment each, the corner on the side that the next-better point dominates (the
// boundary of what the front reaches). Values as the points have them (+infinity included).
std::vector<std::pair<double, double>> pareto_staircase(const std::vector<SweepResultPoint>& points,
                                                        const std::vector<bool>& front,
                                                        const ParetoAxis& x, const ParetoAxis& y);

}  // namespace varscope
