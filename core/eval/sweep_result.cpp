#include "core/eval/sweep_result.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>
#include <stdexcept>

#include "core/io/json_read.h"

namespace varscope {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Parts of a {"mean": ...} statistic or a metric object that are not a quality of their own.
bool is_detail_key(const std::string& key) {
    static const std::set<std::string> detail = {"ci95", "n", "identical", "splits", "k", "std"};
    return detail.count(key) > 0;
}

void flatten(const nlohmann::json& j, const std::string& path, std::map<std::string, double>& out) {
    if (j.is_number()) {
        const double v = j.get<double>();
        if (!std::isnan(v)) out[path] = v;
        return;
    }
    if (!j.is_object()) return;  // null, strings, booleans, lists: no field
    if (j.contains("mean")) {
        const auto& mean = j["mean"];
        if (mean.is_number())
            out[path] = mean.get<double>();
        else if (mean.is_null() && j.value("identical", 0.0) > 0 && j.value("n", 0.0) == 0)
            out[path] = kInf;  // every image identical to the baseline's: no finite PSNR
        return;
    }
    for (const auto& [key, value] : j.items()) {
        if (is_detail_key(key)) continue;
        flatten(value, path.empty() ? key : path + "." + key, out);
    }
}

// Comparisons against the baseline are perfect for the baseline itself; the files leave them
// out (or null). Filled in where other points have the field, so that it can be plotted.
void fill_baseline(SweepResult& r) {
    const std::map<std::string, double> perfect = {{"psnr_db", kInf},
                                                   {"ssim", 1.0},
                                                   {"token_agreement", 1.0},
                                                   {"quality.fid.baseline", 0.0},
                                                   {"quality.sfid.baseline", 0.0},
                                                   {"quality.precision_recall.precision", 1.0},
                                                   {"quality.precision_recall.recall", 1.0}};
    for (auto& p : r.points) {
        if (p.name != "baseline") continue;
        for (const auto& entry : perfect) {
            // Not a structured binding: C++17 lambdas cannot capture one (clang refuses).
            const std::string& field = entry.first;
            if (p.fields.count(field)) continue;
            const bool others = std::any_of(r.points.begin(), r.points.end(), [&](const auto& q) {
                return q.fields.count(field) > 0;
            });
            if (others) p.fields[field] = entry.second;
        }
    }
}

const nlohmann::json& require(const nlohmann::json& obj, const char* key,
                              const std::string& where) {
    const auto it = obj.find(key);
    if (it == obj.end())
        throw std::invalid_argument(where + ": missing key '" + std::string(key) + "'");
    return *it;
}

double require_number(const nlohmann::json& obj, const char* key, const std::string& where) {
    const auto& v = require(obj, key, where);
    if (!v.is_number()) throw std::invalid_argument(where + ": '" + key + "' is not a number");
    return v.get<double>();
}

}  // namespace

std::optional<double> SweepResultPoint::field(const std::string& key) const {
    const auto it = fields.find(key);
    if (it == fields.end() || std::isnan(it->second)) return std::nullopt;
    return it->second;
}

std::map<std::string, double> eval_config_fields(const nlohmann::json& config) {
    std::map<std::string, double> out;
    if (!config.is_object()) return out;
    for (const auto& [key, value] : config.items()) {
        if (key == "name" || key == "accel" || key == "images") continue;
        flatten(value, key, out);
    }
    return out;
}

SweepResult parse_sweep_result(const nlohmann::json& sweep, const std::string& path,
                               const nlohmann::json& result_json) {
    const std::string file = "sweep result '" + path + "'";
    if (!sweep.is_object()) throw std::invalid_argument(file + ": expected a JSON object");
    SweepResult r;
    r.path = path;
    if (!sweep.contains("quality_metric") && !sweep.contains("points"))
        throw std::invalid_argument(file +
                                    ": missing key 'quality_metric' and 'points' (not a "
                                    "sweep.json of varscope-cli sweep?)");
    const auto& metric = require(sweep, "quality_metric", file);
    if (!metric.is_string())
        throw std::invalid_argument(file + ": 'quality_metric' is not a string");
    r.quality_metric = metric.get<std::string>();
    if (r.quality_metric.empty()) throw std::invalid_argument(file + ": 'quality_metric' is empty");
    const auto& points = require(sweep, "points", file);
    if (!points.is_array()) throw std::invalid_argument(file + ": 'points' is not a list");
    if (points.empty()) throw std::invalid_argument(file + ": 'points' is empty");

    // Configs of the eval result by name: older sweep.json files name the points only.
    std::map<std::string, const nlohmann::json*> configs;
    if (result_json.is_object() && result_json.contains("configs") &&
        result_json["configs"].is_array())
        for (const auto& c : result_json["configs"])
            if (c.is_object() && c.contains("name") && c["name"].is_string())
                configs[c["name"].get<std::string>()] = &c;
    auto text_of = [&](const char* key) {
        if (sweep.contains(key) && sweep[key].is_string()) return sweep[key].get<std::string>();
        if (result_json.is_object() && result_json.contains(key) && result_json[key].is_string())
            return result_json[key].get<std::string>();
        return std::string();
    };
    r.model = text_of("model");
    r.family = text_of("family");

    std::set<std::string> names;
    for (size_t i = 0; i < points.size(); ++i) {
        const auto& j = points[i];
        const std::string where = file + ": points[" + std::to_string(i) + "]";
        if (!j.is_object()) throw std::invalid_argument(where + ": expected an object");
        SweepResultPoint p;
        const auto& name = require(j, "name", where);
        if (!name.is_string() || name.get<std::string>().empty())
            throw std::invalid_argument(where + ": 'name' is not a non-empty string");
        p.name = name.get<std::string>();
        const std::string at = file + ": point '" + p.name + "'";
        if (!names.insert(p.name).second) throw std::invalid_argument(at + " is listed twice");
        const double speedup = require_number(j, "speedup", at);
        const double rate = require_number(j, "images_per_s", at);
        const auto& quality = require(j, "quality", at);
        if (!quality.is_number() && !quality.is_null())
            throw std::invalid_argument(at + ": 'quality' is neither a number nor null");
        const auto& pareto = require(j, "pareto", at);
        if (!pareto.is_boolean()) throw std::invalid_argument(at + ": 'pareto' is not true/false");
        p.pareto_in_file = pareto.get<bool>();
        p.values = j.value("values", nlohmann::json());
        if (!p.values.is_null() && !p.values.is_object())
            throw std::invalid_argument(at + ": 'values' is neither an object nor null");

        const auto config = configs.find(p.name);
        const nlohmann::json* from_result = config == configs.end() ? nullptr : config->second;
        if (j.contains("accel"))
            p.accel = j["accel"];
        else if (from_result)
            p.accel = from_result->value("accel", nlohmann::json());
        else
            p.accel = nullptr;  // unknown: the point cannot be loaded
        if (p.name == "baseline" && p.accel.is_null() && (j.contains("accel") || from_result))
            p.accel = nlohmann::json::object();  // accelerators off
        if (!p.accel.is_null() && !p.accel.is_object())
            throw std::invalid_argument(at + ": 'accel' is not an object");

        if (j.contains("metrics")) {
            if (!j["metrics"].is_object())
                throw std::invalid_argument(at + ": 'metrics' is not an object");
            p.fields = eval_config_fields(j["metrics"]);
        } else if (from_result) {
            p.fields = eval_config_fields(*from_result);
        }
        // The file's own numbers win: they are what its front was computed from.
        p.fields["speedup"] = speedup;
        p.fields["images_per_s"] = rate;
        // A null PSNR is that of identical images (the best, as the CLI counts it); another
        // null quality was not measured.
        if (quality.is_number())
            p.fields[r.quality_metric] = quality.get<double>();
        else if (r.quality_metric == "psnr_db")
            p.fields[r.quality_metric] = kInf;
        else
            p.fields.erase(r.quality_metric);
        r.points.push_back(std::move(p));
    }
    fill_baseline(r);

    std::vector<std::string> quality_fields;
    for (const auto& p : r.points)
        for (const auto& [field, _] : p.fields) {
            auto& list = is_speed_field(field) ? r.fields : quality_fields;
            if (std::find(list.begin(), list.end(), field) == list.end()) list.push_back(field);
        }
    // Speed fields in a fixed order: speedup first (the CLI's x axis).
    auto rank = [](const std::string& f) {
        return f == "speedup" ? 0 : f == "images_per_s" ? 1 : f.rfind("latency", 0) == 0 ? 2 : 3;
    };
    std::stable_sort(r.fields.begin(), r.fields.end(),
                     [&](const auto& a, const auto& b) { return rank(a) < rank(b); });
    // The CLI's quality metric first among the quality fields (its y axis).
    std::stable_partition(quality_fields.begin(), quality_fields.end(),
                          [&](const auto& f) { return f == r.quality_metric; });
    r.fields.insert(r.fields.end(), quality_fields.begin(), quality_fields.end());
    return r;
}

SweepResult read_sweep_result(const std::string& path) {
    const std::string what = "sweep result '" + path + "'";
    const nlohmann::json sweep = read_json_file(path, what);
    // result.json beside it, only where some point lacks its config or metrics (older files).
    bool complete = sweep.is_object() && sweep.contains("points") && sweep["points"].is_array();
    if (complete)
        for (const auto& p : sweep["points"])
            if (!p.is_object() || !p.contains("accel") || !p.contains("metrics")) complete = false;
    nlohmann::json result = nullptr;
    if (!complete && sweep.is_object()) {
        const auto beside = std::filesystem::path(path).parent_path() / "result.json";
        std::error_code ec;
        if (std::filesystem::is_regular_file(beside, ec))
            result = read_json_file(beside.string(), "eval result '" + beside.string() + "'");
    }
    return parse_sweep_result(sweep, path, result);
}

bool is_speed_field(const std::string& field) {
    return field == "speedup" || field == "images_per_s" || field.rfind("latency", 0) == 0 ||
           field.rfind("peak_memory", 0) == 0;
}

Better default_better(const std::string& field) {
    if (field.rfind("latency", 0) == 0 || field.rfind("peak_memory", 0) == 0 ||
        field.rfind("quality.fid", 0) == 0 || field.rfind("quality.sfid", 0) == 0)
        return Better::Lower;
    return Better::Higher;
}

std::string sweep_field_label(const std::string& field) {
    static const std::map<std::string, std::string> labels = {
        {"speedup", "speedup (×)"},
        {"images_per_s", "images/s"},
        {"latency_ms_per_image.p50", "latency p50 (ms/image)"},
        {"latency_ms_per_image.p90", "latency p90 (ms/image)"},
        {"latency_ms_per_image.p99", "latency p99 (ms/image)"},
        {"peak_memory_bytes", "peak memory (bytes)"},
        {"psnr_db", "PSNR vs baseline (dB)"},
        {"ssim", "SSIM vs baseline"},
        {"token_agreement", "token agreement"},
        {"quality.fid.reference", "FID vs reference"},
        {"quality.fid.baseline", "FID vs baseline"},
        {"quality.sfid.reference", "sFID vs reference"},
        {"quality.sfid.baseline", "sFID vs baseline"},
        {"quality.inception_score", "Inception Score"},
        {"quality.precision_recall.precision", "precision"},
        {"quality.precision_recall.recall", "recall"}};
    const auto it = labels.find(field);
    return it == labels.end() ? field : it->second;
}

std::vector<bool> sweep_pareto_front(const std::vector<SweepResultPoint>& points,
                                     const ParetoAxis& x, const ParetoAxis& y) {
    // Values turned so that larger is better on both axes.
    auto score = [](const SweepResultPoint& p, const ParetoAxis& a) -> std::optional<double> {
        const auto v = p.field(a.field);
        if (!v) return std::nullopt;
        return a.better == Better::Higher ? *v : -*v;
    };
    const size_t n = points.size();
    std::vector<bool> front(n, false);
    for (size_t i = 0; i < n; ++i) {
        const auto xi = score(points[i], x), yi = score(points[i], y);
        if (!xi || !yi) continue;
        front[i] = true;
        for (size_t j = 0; j < n && front[i]; ++j) {
            if (j == i) continue;
            const auto xj = score(points[j], x), yj = score(points[j], y);
            if (xj && yj && *xj >= *xi && *yj >= *yi && (*xj > *xi || *yj > *yi)) front[i] = false;
        }
    }
    return front;
}

std::vector<std::pair<double, double>> pareto_staircase(const std::vector<SweepResultPoint>& points,
                                                        const std::vector<bool>& front,
                                                        const ParetoAxis& x, const ParetoAxis& y) {
    std::vector<std::pair<double, double>> on;
    for (size_t i = 0; i < points.size() && i < front.size(); ++i) {
        if (!front[i]) continue;
        const auto xv = points[i].field(x.field), yv = points[i].field(y.field);
        if (xv && yv) on.push_back({*xv, *yv});
    }
    std::sort(on.begin(), on.end());
    on.erase(std::unique(on.begin(), on.end()), on.end());
    std::vector<std::pair<double, double>> steps;
    for (size_t i = 0; i < on.size(); ++i) {
        if (i > 0) {
            // Higher x better: what lies right of a point is reached only by the next one, so
            // the step drops (or rises) at the point; lower x better: at the next one.
            if (x.better == Better::Higher)
                steps.push_back({on[i - 1].first, on[i].second});
            else
                steps.push_back({on[i].first, on[i - 1].second});
        }
        steps.push_back(on[i]);
    }
    return steps;
}

}  // namespace varscope
