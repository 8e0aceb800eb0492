#include "core/eval/aggregate.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <sstream>

#include "core/eval/emoji_quality.h"
#include "core/eval/quality.h"

namespace varscope {
namespace {

struct ConfigSums {
    std::vector<double> psnr, ssim, agreement;
    int64_t identical = 0, images = 0;
    std::vector<double> latency_ms;  // per image, one value per generate call
    double millis = 0;
    int64_t timed_images = 0;
    std::optional<int64_t> peak_bytes;
};

std::string csv_number(const nlohmann::json& v) {
    if (v.is_null()) return "";
    if (v.is_number_float()) {
        std::ostringstream s;
        s.precision(10);
        s << v.get<double>();
        return s.str();
    }
    return v.dump();
}

std::string csv_text(const std::string& s) {  // quoted, with quotes doubled
    std::string out = "\"";
    for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
    return out + "\"";
}

}  // namespace

nlohmann::json mean_ci(const std::vector<double>& values) {
    const size_t n = values.size();
    if (n == 0) return {{"mean", nullptr}, {"ci95", nullptr}, {"n", 0}};
    double sum = 0;
    for (double v : values) sum += v;
    const double mean = sum / n;
    nlohmann::json ci = nullptr;
    if (n >= 2) {
        double ss = 0;
        for (double v : values) ss += (v - mean) * (v - mean);
        ci = 1.96 * std::sqrt(ss / (n - 1)) / std::sqrt(static_cast<double>(n));
    }
    return {{"mean", mean}, {"ci95", ci}, {"n", n}};
}

double percentile(std::vector<double> values, double p) {
    if (values.empty()) return 0.0;
    std::sort(values.begin(), values.end());
    const double rank = std::ceil(p / 100.0 * values.size());
    const size_t i = static_cast<size_t>(std::clamp(rank, 1.0, double(values.size()))) - 1;
    return values[i];
}

nlohmann::json aggregate_shards(const EvalManifest& m, const std::vector<nlohmann::json>& shards) {
    std::vector<std::string> names{kBaselineConfig};
    std::map<std::string, nlohmann::json> accel{{kBaselineConfig, nullptr}};
    for (const auto& c : m.configs) {
        names.push_back(c.name);
        accel[c.name] = c.accel;
    }
    std::map<std::string, ConfigSums> sums;
    for (const auto& shard : shards) {
        for (const auto& img : shard.at("images")) {
            ConfigSums& s = sums[img.at("config").get<std::string>()];
            ++s.images;
            const auto& p = img.at("psnr_db");
            if (p.is_null())
                ++s.identical;
            else
                s.psnr.push_back(p.get<double>());
            s.ssim.push_back(img.at("ssim").get<double>());
            if (!img.at("token_agreement").is_null())
                s.agreement.push_back(img.at("token_agreement").get<double>());
        }
        for (const auto& [name, t] : shard.at("timing").items()) {
            ConfigSums& s = sums[name];
            for (const auto& call : t.at("calls")) {
                const double ms = call.at("millis").get<double>();
                const int64_t n = call.at("images").get<int64_t>();
                s.millis += ms;
                s.timed_images += n;
                s.latency_ms.push_back(ms / std::max<int64_t>(n, 1));
            }
            if (!t.at("peak_memory_bytes").is_null())
                s.peak_bytes =
                    std::max(s.peak_bytes.value_or(0), t.at("peak_memory_bytes").get<int64_t>());
        }
    }
    const double base_rate =
        sums[kBaselineConfig].millis > 0
            ? sums[kBaselineConfig].timed_images / (sums[kBaselineConfig].millis / 1000.0)
            : 0.0;
    const nlohmann::json quality = m.metrics.inception_enabled()
                                       ? quality_metrics(m.metrics, gather_features(shards))
                                       : nlohmann::json();
    nlohmann::json emoji = nlohmann::json();
    if (m.metrics.emoji_enabled()) {  // the data set's reference statistics ship in its file
        const auto net = load_emoji_network(m.metrics);
        emoji = emoji_quality_metrics(gather_emoji_scores(shards), net.reference_mu(),
                                      net.reference_sigma());
    }
    nlohmann::json configs = nlohmann::json::array();
    for (const auto& name : names) {
        const ConfigSums& s = sums[name];
        const double rate = s.millis > 0 ? s.timed_images / (s.millis / 1000.0) : 0.0;
        nlohmann::json c = {
            {"name", name},
            {"accel", accel[name]},
            {"images", s.timed_images},
            {"images_per_s", rate},
            {"speedup", base_rate > 0 ? rate / base_rate : 0.0},
            {"latency_ms_per_image",
             {{"p50", percentile(s.latency_ms, 50)},
              {"p90", percentile(s.latency_ms, 90)},
              {"p99", percentile(s.latency_ms, 99)}}},
            {"peak_memory_bytes", s.peak_bytes ? nlohmann::json(*s.peak_bytes) : nlohmann::json()}};
        if (name != kBaselineConfig) {
            c["psnr_db"] = mean_ci(s.psnr);
            c["psnr_db"]["identical"] = s.identical;
            c["ssim"] = mean_ci(s.ssim);
            c["token_agreement"] = s.agreement.empty() ? nlohmann::json() : mean_ci(s.agreement);
        }
        if (m.metrics.inception_enabled()) c["quality"] = quality.value(name, nlohmann::json());
        if (m.metrics.emoji_enabled()) {
            if (!c["quality"].is_object()) c["quality"] = nlohmann::json::object();
            c["quality"]["emoji"] = emoji.value(name, nlohmann::json());
        }
        configs.push_back(std::move(c));
    }
    return {{"shards", shards.size()}, {"configs", configs}};
}

nlohmann::json job_throughput(const std::vector<nlohmann::json>& shards,
                              const std::vector<int64_t>& computed, int processes, double wall_s) {
    int64_t images = 0;
    for (int64_t index : computed)
        for (const auto& [name, t] : shards.at(static_cast<size_t>(index)).at("timing").items())
            for (const auto& call : t.at("calls")) images += call.at("images").get<int64_t>();
    return {{"processes", processes},
            {"wall_s", wall_s},
            {"shards_computed", computed.size()},
            {"shards_resumed", shards.size() - computed.size()},
            {"images_generated", images},
            {"images_per_s", wall_s > 0 ? images / wall_s : 0.0}};
}

std::string summary_csv(const nlohmann::json& result) {
    std::string out =
        "config,images,images_per_s,speedup,latency_p50_ms,latency_p90_ms,latency_p99_ms,"
        "peak_memory_bytes,psnr_db_mean,psnr_db_ci95,identical_images,ssim_mean,ssim_ci95,"
        "token_agreement_mean,token_agreement_ci95";
    // The distribution metrics' columns only where the job computed them ("metrics").
    const auto& first = result.at("configs").empty() ? nlohmann::json() : result["configs"][0];
    const bool quality = first.contains("quality") && first["quality"].is_object() &&
                         first["quality"].contains("fid");
    const bool emoji = first.contains("quality") && first["quality"].is_object() &&
                       first["quality"].contains("emoji");
    if (quality)
        out +=
            ",fid_reference,fid_baseline,sfid_reference,sfid_baseline,inception_score_mean,"
            "inception_score_std,precision,recall";
    if (emoji)
        out +=
            ",emoji_fid_dataset,emoji_fid_baseline,emoji_accuracy,emoji_accuracy_counted,"
            "emoji_baseline_agreement";
    out += "\n";
    for (const auto& c : result.at("configs")) {
        const auto& l = c.at("latency_ms_per_image");
        auto stat = [&](const char* metric, const char* field) -> std::string {
            if (!c.contains(metric) || c[metric].is_null()) return "";
            return csv_number(c[metric].value(field, nlohmann::json()));
        };
        out += csv_text(c.at("name").get<std::string>()) + "," + csv_number(c.at("images")) + "," +
               csv_number(c.at("images_per_s")) + "," + csv_number(c.at("speedup")) + "," +
               csv_number(l.at("p50")) + "," + csv_number(l.at("p90")) + "," +
               csv_number(l.at("p99")) + "," + csv_number(c.at("peak_memory_bytes")) + "," +
               stat("psnr_db", "mean") + "," + stat("psnr_db", "ci95") + "," +
               stat("psnr_db", "identical") + "," + stat("ssim", "mean") + "," +
               stat("ssim", "ci95") + "," + stat("token_agreement", "mean") + "," +
               stat("token_agreement", "ci95");
        if (quality) {
            const auto& q = c.at("quality");
            auto value = [&](const char* metric, const char* field) -> std::string {
                if (q.is_null() || !q.contains(metric) || q[metric].is_null()) return "";
                return csv_number(q[metric].value(field, nlohmann::json()));
            };
            out += "," + value("fid", "reference") + "," + value("fid", "baseline") + "," +
                   value("sfid", "reference") + "," + value("sfid", "baseline") + "," +
                   value("inception_score", "mean") + "," + value("inception_score", "std") + "," +
                   value("precision_recall", "precision") + "," +
                   value("precision_recall", "recall");
        }
        if (emoji) {
            const auto& q = c.at("quality").at("emoji");
            auto value = [&](const char* metric, const char* field) -> std::string {
                if (q.is_null() || !q.contains(metric) || q[metric].is_null()) return "";
                return csv_number(field ? q[metric].value(field, nlohmann::json()) : q[metric]);
            };
            out += "," + value("fid", "dataset") + "," + value("fid", "baseline") + "," +
                   value("accuracy", "rate") + "," + value("accuracy", "counted") + "," +
                   value("baseline_agreement", nullptr);
        }
        out += "\n";
    }
    return out;
}

std::string images_csv(const std::vector<nlohmann::json>& shards) {
    std::string out = "shard,config,seed,condition,psnr_db,ssim,token_agreement\n";
    for (const auto& shard : shards)
        for (const auto& img : shard.at("images"))
            out += csv_number(shard.at("shard")) + "," +
                   csv_text(img.at("config").get<std::string>()) + "," +
                   csv_number(img.at("seed")) + "," + csv_number(img.at("condition")) + "," +
                   csv_number(img.at("psnr_db")) + "," + csv_number(img.at("ssim")) + "," +
                   csv_number(img.at("token_agreement")) + "\n";
    return out;
}

}  // namespace varscope
