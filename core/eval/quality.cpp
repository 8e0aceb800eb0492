#include "core/eval/quality.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "core/eval/shards.h"
#include "core/io/json_fields.h"
#include "core/io/npy.h"
#include "core/metrics/feature_stats.h"

namespace varscope {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int decode_char(char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

InceptionFeatures concat(const std::vector<InceptionFeatures>& parts) {
    std::vector<at::Tensor> pool3, logits, spatial;
    bool all_logits = true;
    for (const auto& p : parts) {
        pool3.push_back(p.pool3);
        spatial.push_back(p.spatial);
        all_logits = all_logits && p.logits.defined();
        if (p.logits.defined()) logits.push_back(p.logits);
    }
    InceptionFeatures f;
    f.pool3 = at::cat(pool3, 0);
    f.spatial = at::cat(spatial, 0);
    if (all_logits) f.logits = at::cat(logits, 0);
    return f;
}

nlohmann::json fid_or_null(const at::Tensor& a, const FeatureStats* ref) {
    if (!ref || a.size(0) < 2) return nullptr;
    return frechet_distance(feature_stats(a), *ref);
}

}  // namespace

std::string encode_floats(const at::Tensor& t) {
    const auto c = t.detach().to(at::kCPU, at::kFloat).contiguous();
    const auto* b = static_cast<const unsigned char*>(c.data_ptr());
    const size_t n = static_cast<size_t>(c.numel()) * 4;
    std::string out;
    out.reserve((n + 2) / 3 * 4);
    for (size_t i = 0; i < n; i += 3) {
        const uint32_t v = uint32_t(b[i]) << 16 | (i + 1 < n ? uint32_t(b[i + 1]) << 8 : 0) |
                           (i + 2 < n ? uint32_t(b[i + 2]) : 0);
        out += kAlphabet[(v >> 18) & 63];
        out += kAlphabet[(v >> 12) & 63];
        out += i + 1 < n ? kAlphabet[(v >> 6) & 63] : '=';
        out += i + 2 < n ? kAlphabet[v & 63] : '=';
    }
    return out;
}

at::Tensor decode_floats(const std::string& text, int64_t rows, int64_t cols) {
    if (rows < 0 || cols < 0 || text.size() % 4 != 0)
        throw std::invalid_argument("features: not base64 text of the expected length");
    std::string bytes;
    bytes.reserve(text.size() / 4 * 3);
    for (size_t i = 0; i < text.size(); i += 4) {
        int v[4];
        for (int k = 0; k < 4; ++k) {
            const char c = text[i + k];
            const bool pad_ok = c == '=' && k >= 2 && i + 4 == text.size();
            v[k] = c == '=' && pad_ok ? 0 : decode_char(c);
            if (v[k] < 0) throw std::invalid_argument("features: invalid base64 character");
        }
        const uint32_t w = uint32_t(v[0]) << 18 | uint32_t(v[1]) << 12 | uint32_t(v[2]) << 6 | v[3];
        bytes += static_cast<char>(w >> 16);
        if (text[i + 2] != '=') bytes += static_cast<char>((w >> 8) & 0xff);
        if (text[i + 3] != '=') bytes += static_cast<char>(w & 0xff);
    }
    if (bytes.size() != static_cast<size_t>(rows * cols) * 4)
        throw std::invalid_argument("features: " + std::to_string(bytes.size()) +
                                    " bytes, expected " + std::to_string(rows) + " x " +
                                    std::to_string(cols) + " float32");
    auto t = at::empty({rows, cols}, at::kFloat);
    if (!bytes.empty()) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
    return t;
}

void ShardFeatures::add(const std::string& config, const InceptionFeatures& f) {
    parts_[config].push_back({f.pool3.to(at::kCPU),
                              f.logits.defined() ? f.logits.to(at::kCPU) : at::Tensor(),
                              f.spatial.to(at::kCPU)});
}

nlohmann::json ShardFeatures::to_json() const {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [config, parts] : parts_) {
        const auto f = concat(parts);
        out[config] = {{"images", f.pool3.size(0)},
                       {"pool3", encode_floats(f.pool3)},
                       {"logits", f.logits.defined() ? nlohmann::json(encode_floats(f.logits))
                                                     : nlohmann::json()},
                       {"spatial", encode_floats(f.spatial)}};
    }
    return out;
}

void read_shard_sections(
    const std::vector<nlohmann::json>& shards, const std::string& section,
    const std::string& missing, const std::string& entry,
    const std::function<void(const std::string&, const nlohmann::json&)>& read) {
    for (const auto& shard : shards) {
        const std::string source = "shard " + shard.value("shard", nlohmann::json()).dump();
        const std::string redo = " (delete its file to compute it again)";
        if (!shard.contains(section) || !shard[section].is_object())
            throw ShardFileError(source + ": " + missing + redo);
        for (const auto& [config, f] : shard[section].items()) {
            try {
                read(config, f);
            } catch (const std::exception& e) {
                throw ShardFileError(source + ": " + entry + " '" + config + "': " + e.what() +
                                     redo);
            }
        }
    }
}

std::map<std::string, InceptionFeatures> gather_features(
    const std::vector<nlohmann::json>& shards) {
    std::map<std::string, std::vector<InceptionFeatures>> parts;
    read_shard_sections(
        shards, "features", "no Inception features (made without \"metrics\"?)", "features of",
        [&](const std::string& config, const nlohmann::json& f) {
            const int64_t n = json_as<int64_t>(f.at("images"), "images");
            InceptionFeatures part;
            part.pool3 = decode_floats(f.at("pool3").get<std::string>(), n, kInceptionPool3Dim);
            part.spatial =
                decode_floats(f.at("spatial").get<std::string>(), n, kInceptionSpatialDim);
            if (!f.at("logits").is_null())
                part.logits =
                    decode_floats(f.at("logits").get<std::string>(), n, kInceptionLogitsDim);
            parts[config].push_back(std::move(part));
        });
    std::map<std::string, InceptionFeatures> out;
    for (const auto& [config, p] : parts) out[config] = concat(p);
    return out;
}

void check_reference_stats(const EvalMetricsSpec& spec) {
    if (spec.reference.empty()) return;
    const std::string field = "manifest: metrics.reference '" + spec.reference + "': ";
    try {
        const auto s = read_reference_stats(spec.reference);
        if (s.mu.size(0) != kInceptionPool3Dim)
            throw ManifestError(field + "mu has " + std::to_string(s.mu.size(0)) +
                                " values, the Inception's pool3 features " +
                                std::to_string(kInceptionPool3Dim));
        const auto names = list_npz(spec.reference);
        if (std::find(names.begin(), names.end(), "mu_s") != names.end()) {
            const auto sp = read_reference_stats(spec.reference, true);
            if (sp.mu.size(0) != kInceptionSpatialDim)
                throw ManifestError(field + "mu_s has " + std::to_string(sp.mu.size(0)) +
                                    " values, sFID's spatial features " +
                                    std::to_string(kInceptionSpatialDim));
        }
    } catch (const NpyError& e) {
        throw ManifestError(field + e.what());
    }
}

nlohmann::json quality_metrics(const EvalMetricsSpec& spec,
                               const std::map<std::string, InceptionFeatures>& features) {
    std::optional<FeatureStats> ref, ref_s, base, base_s;
    if (!spec.reference.empty()) {
        ref = read_reference_stats(spec.reference);
        const auto names = list_npz(spec.reference);
        if (std::find(names.begin(), names.end(), "mu_s") != names.end())
            ref_s = read_reference_stats(spec.reference, true);
    }
    const auto b = features.find(kBaselineConfig);
    if (b != features.end() && b->second.pool3.size(0) >= 2) {
        base = feature_stats(b->second.pool3);
        base_s = feature_stats(b->second.spatial);
    }
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [config, f] : features) {
        const bool is_base = config == kBaselineConfig;
        nlohmann::json q;
        const int64_t n = f.pool3.size(0);
        q["feature_images"] = n;
        q["fid"] = {{"reference", fid_or_null(f.pool3, ref ? &*ref : nullptr)},
                    {"baseline", fid_or_null(f.pool3, !is_base && base ? &*base : nullptr)}};
        q["sfid"] = {{"reference", fid_or_null(f.spatial, ref_s ? &*ref_s : nullptr)},
                     {"baseline", fid_or_null(f.spatial, !is_base && base_s ? &*base_s : nullptr)}};
        if (f.logits.defined() && n >= spec.is_splits) {
            const auto is = inception_score(f.logits, spec.is_splits);
            q["inception_score"] = {{"mean", is.mean}, {"std", is.std}, {"splits", is.splits}};
        } else {
            q["inception_score"] = nullptr;
        }
        q["precision_recall"] = nullptr;
        if (!is_base && b != features.end() && n > spec.pr_k &&
            b->second.pool3.size(0) > spec.pr_k) {
            const auto pr = precision_recall(f.pool3, b->second.pool3, spec.pr_k);
            q["precision_recall"] = {{"precision", pr.precision},
                                     {"recall", pr.recall},
                                     {"k", pr.k},
                                     {"real", kBaselineConfig}};
        }
        out[config] = std::move(q);
    }
    return out;
}

}  // namespace varscope
