#include "ui/scale_summary.h"

#include <stdexcept>

#include "core/io/json_fields.h"
#include "core/sampling/step_cost_json.h"
#include "ui/metrics_model.h"

namespace varscope::gui {

bool ScaleSummary::operator==(const ScaleSummary& o) const {
    return scale == o.scale && patch_num == o.patch_num && millis == o.millis &&
           attention_flops == o.attention_flops && kv_bytes == o.kv_bytes && skipped == o.skipped &&
           pruned == o.pruned && part_flops == o.part_flops && work_counted == o.work_counted &&
           part_ms == o.part_ms && parts_timed == o.parts_timed;
}

double ScaleSummary::overhead_ms() const {
    return parts_timed ? part_ms[size_t(CostPart::Overhead)] : -1;
}

double ScaleSummary::work_flops() const {
    double sum = 0;
    for (const double f : part_flops) sum += f;
    return sum;
}

std::vector<ScaleSummary> summarize_scales(const RunOutput& run) {
    const std::vector<double> kv = kv_bytes_per_scale(run);
    std::vector<ScaleSummary> out;
    out.reserve(run.scales.size());
    for (size_t i = 0; i < run.scales.size(); ++i) {
        const ScaleOutput& s = run.scales[i];
        ScaleSummary r;
        r.scale = s.scale;
        r.patch_num = s.patch_num;
        r.millis = s.millis;
        r.attention_flops = s.attention_flops;
        r.kv_bytes = i < kv.size() ? kv[i] : 0;
        r.skipped = s.skipped;
        r.part_flops = s.part_flops;
        r.work_counted = s.work_counted;
        r.part_ms = s.part_ms;
        r.parts_timed = s.parts_timed;
        if (s.skipped) {
            r.pruned = 1.0;
        } else if (!s.tokens.empty()) {
            size_t pruned = 0;
            for (int64_t t : s.tokens) pruned += t < 0;
            r.pruned = double(pruned) / double(s.tokens.size());
        }
        out.push_back(r);
    }
    return out;
}

namespace {

nlohmann::json rows_json(const std::vector<ScaleSummary>& rows) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& r : rows) {
        nlohmann::json row = {
            {"scale", r.scale},
            {"patch_num", r.patch_num},
            {"ms", r.millis},
            {"attention_flops", r.attention_flops},
            {"kv_bytes", r.kv_bytes},
            {"skipped", r.skipped},
            {"pruned", r.pruned < 0 ? nlohmann::json() : nlohmann::json(r.pruned)}};
        // Optional: entries written before the cost model have none; part times only where timed.
        if (r.work_counted) row["part_flops"] = cost_parts_json(r.part_flops);
        if (r.parts_timed) row["part_ms"] = cost_parts_json(r.part_ms);
        a.push_back(std::move(row));
    }
    return a;
}

}  // namespace

nlohmann::json scales_to_json(const std::vector<ScaleSummary>& baseline,
                              const std::vector<ScaleSummary>& accelerated) {
    nlohmann::json j = {{"varscope_scales", kScaleSummaryVersion}};
    if (!baseline.empty()) j["baseline"] = rows_json(baseline);
    if (!accelerated.empty()) j["accelerated"] = rows_json(accelerated);
    return j;
}

std::vector<ScaleSummary> scales_from_json(const nlohmann::json& j, const std::string& side,
                                           const std::string& what) {
    auto fail = [&](const std::string& why) { throw std::runtime_error(what + ": " + why); };
    // Whole numbers are checked before they are read: the JSON library casts a double (2.5 to
    // 2; 1e40 is undefined behaviour), and a history folder is anyone's to edit.
    if (!j.is_object() || !j.contains("varscope_scales") ||
        !json_value_fits<int>(j["varscope_scales"]))
        fail("not a per-scale summary (no \"varscope_scales\" version)");
    const int version = j["varscope_scales"].get<int>();
    if (version < 1 || version > kScaleSummaryVersion)
        fail("format version " + std::to_string(version) + " (this version reads up to " +
             std::to_string(kScaleSummaryVersion) + ")");
    if (!j.contains(side)) return {};
    const nlohmann::json& rows = j[side];
    if (!rows.is_array()) fail("\"" + side + "\" is not a list");
    std::vector<ScaleSummary> out;
    for (size_t i = 0; i < rows.size(); ++i) {
        const nlohmann::json& r = rows[i];
        const std::string where = "\"" + side + "\"[" + std::to_string(i) + "]";
        auto number = [&](const char* key) {
            if (!r.is_object() || !r.contains(key) || !r[key].is_number())
                fail(where + ": \"" + key + "\" missing or not a number");
            return r[key].get<double>();
        };
        auto whole = [&](const char* key) {
            if (!r.is_object() || !r.contains(key) || !json_value_fits<int64_t>(r[key]))
                fail(where + ": \"" + key + "\" missing or not a whole number");
            return r[key].get<int64_t>();
        };
        ScaleSummary s;
        s.scale = whole("scale");
        s.patch_num = whole("patch_num");
        s.millis = number("ms");
        s.attention_flops = number("attention_flops");
        s.kv_bytes = number("kv_bytes");
        if (r.contains("skipped") && !r["skipped"].is_boolean())
            fail(where + ": \"skipped\" is not true or false");
        s.skipped = r.value("skipped", false);
        s.pruned = r.contains("pruned") && r["pruned"].is_number() ? r["pruned"].get<double>() : -1;
        // Per part, by name: known parts, numbers >= 0 (`key` is "part_flops" or "part_ms").
        auto parts = [&](const char* key, std::array<double, kCostParts>& out) {
            if (!r.contains(key)) return false;
            const nlohmann::json& p = r[key];
            const std::string field = std::string("\"") + key + "\"";
            if (!p.is_object()) fail(where + ": " + field + " is not an object");
            for (const auto& [name, v] : p.items()) {
                const auto part = cost_part_named(name);
                if (!part) fail(where + ": " + field + " names no part \"" + name + "\"");
                if (!v.is_number() || !(v.get<double>() >= 0))
                    fail(where + ": " + field + ".\"" + name + "\" is not a number >= 0");
                out[size_t(*part)] = v.get<double>();
            }
            return true;
        };
        s.work_counted = parts("part_flops", s.part_flops);
        s.parts_timed = parts("part_ms", s.part_ms);
        out.push_back(s);
    }
    return out;
}

}  // namespace varscope::gui
