#include "core/eval/emoji_quality.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cctype>
#include <optional>
#include <set>

#include "core/eval/quality.h"  // encode_floats, decode_floats, read_shard_sections
#include "core/eval/shards.h"
#include "core/io/json_fields.h"
#include "core/io/state_dict.h"
#include "core/metrics/feature_stats.h"

namespace varscope {
namespace {

std::vector<std::string> words_of(const std::string& text) {
    std::vector<std::string> out;
    std::string w;
    for (const char c : text) {
        if (std::isalnum(static_cast<unsigned char>(c)) && static_cast<unsigned char>(c) < 128) {
            w += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        } else if (!w.empty()) {
            out.push_back(std::move(w));
            w.clear();
        }
    }
    if (!w.empty()) out.push_back(std::move(w));
    return out;
}

bool occurs_in(const std::vector<std::string>& phrase, const std::vector<std::string>& words) {
    if (phrase.empty() || phrase.size() > words.size()) return false;
    for (size_t i = 0; i + phrase.size() <= words.size(); ++i)
        if (std::equal(phrase.begin(), phrase.end(), words.begin() + static_cast<long>(i)))
            return true;
    return false;
}

nlohmann::json fid_or_null(const at::Tensor& features, const FeatureStats* ref) {
    if (!ref || features.size(0) < 2) return nullptr;
    return frechet_distance(feature_stats(features.to(at::kDouble)), *ref);
}

}  // namespace

int64_t class_named_by_prompt(const std::string& prompt, const std::vector<ClassInfo>& classes) {
    const auto words = words_of(prompt);
    if (words.empty()) return -1;
    std::set<int64_t> exact, longest;
    size_t longest_len = 1;  // phrases inside a longer prompt need two words or more
    for (size_t c = 0; c < classes.size(); ++c) {
        std::vector<std::string> phrases = {classes[c].name, classes[c].short_name};
        phrases.insert(phrases.end(), classes[c].aliases.begin(), classes[c].aliases.end());
        for (const auto& p : phrases) {
            const auto pw = words_of(p);
            if (pw.empty()) continue;
            if (pw == words) exact.insert(static_cast<int64_t>(c));
            if (pw.size() < longest_len || !occurs_in(pw, words)) continue;
            if (pw.size() > longest_len) {
                longest.clear();
                longest_len = pw.size();
            }
            longest.insert(static_cast<int64_t>(c));
        }
    }
    if (exact.size() == 1) return *exact.begin();
    if (!exact.empty()) return -1;
    return longest.size() == 1 ? *longest.begin() : -1;
}

std::vector<int64_t> emoji_targets(const EvalManifest& m, const std::vector<ClassInfo>& classes) {
    std::vector<int64_t> out;
    if (m.prompts.empty()) return m.classes;  // -1 (unconditional) is not counted
    for (const auto& p : m.prompts) out.push_back(class_named_by_prompt(p, classes));
    return out;
}

void ShardEmojiScores::add(const std::string& config, const EmojiFeatures& f,
                           const std::vector<int64_t>& targets) {
    if (static_cast<int64_t>(targets.size()) != f.features.size(0))
        throw std::logic_error("emoji scores: one target per image");
    Part& p = parts_[config];
    const auto features = f.features.to(at::kCPU, at::kFloat);
    p.features = p.features.defined() ? at::cat({p.features, features}, 0) : features;
    const auto pred = f.logits.argmax(1).to(at::kCPU).contiguous();
    for (int64_t i = 0; i < pred.numel(); ++i) p.predicted.push_back(pred[i].item<int64_t>());
    p.target.insert(p.target.end(), targets.begin(), targets.end());
}

nlohmann::json ShardEmojiScores::to_json() const {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [config, p] : parts_)
        out[config] = {{"images", p.features.size(0)},
                       {"dim", p.features.size(1)},
                       {"features", encode_floats(p.features)},
                       {"predicted", p.predicted},
                       {"target", p.target}};
    return out;
}

std::map<std::string, EmojiScores> gather_emoji_scores(const std::vector<nlohmann::json>& shards) {
    std::map<std::string, std::vector<at::Tensor>> features;
    std::map<std::string, EmojiScores> out;
    read_shard_sections(
        shards, "emoji_features", "no emoji features (made without metrics.emoji?)",
        "emoji features of", [&](const std::string& config, const nlohmann::json& f) {
            const int64_t n = json_as<int64_t>(f.at("images"), "images");
            const int64_t dim = json_as<int64_t>(f.at("dim"), "dim");
            const auto predicted = f.at("predicted").get<std::vector<int64_t>>();
            const auto target = f.at("target").get<std::vector<int64_t>>();
            if (static_cast<int64_t>(predicted.size()) != n ||
                static_cast<int64_t>(target.size()) != n)
                throw std::invalid_argument(
                    "predicted / target lists of another length than "
                    "the images");
            features[config].push_back(decode_floats(f.at("features").get<std::string>(), n, dim));
            auto& s = out[config];
            s.predicted.insert(s.predicted.end(), predicted.begin(), predicted.end());
            s.target.insert(s.target.end(), target.begin(), target.end());
        });
    for (auto& [config, parts] : features) {
        try {
            out[config].features = at::cat(parts, 0);
        } catch (const std::exception&) {
            throw ShardFileError("emoji features of '" + config +
                                 "': shards disagree on the feature size (delete the shard files "
                                 "to compute them again)");
        }
    }
    return out;
}

nlohmann::json emoji_quality_metrics(const std::map<std::string, EmojiScores>& scores,
                                     const at::Tensor& reference_mu,
                                     const at::Tensor& reference_sigma) {
    std::optional<FeatureStats> dataset, base;
    if (reference_mu.defined()) dataset = FeatureStats{reference_mu, reference_sigma, 0, {}};
    const auto b = scores.find(kBaselineConfig);
    if (b != scores.end() && b->second.features.size(0) >= 2)
        base = feature_stats(b->second.features.to(at::kDouble));
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [config, s] : scores) {
        const bool is_base = config == kBaselineConfig;
        nlohmann::json q;
        q["images"] = s.features.size(0);
        q["fid"] = {{"dataset", fid_or_null(s.features, dataset ? &*dataset : nullptr)},
                    {"baseline", fid_or_null(s.features, !is_base && base ? &*base : nullptr)}};
        int64_t counted = 0, correct = 0;
        for (size_t i = 0; i < s.target.size(); ++i) {
            if (s.target[i] < 0) continue;
            ++counted;
            correct += s.predicted[i] == s.target[i];
        }
        q["accuracy"] = counted == 0 ? nlohmann::json()
                                     : nlohmann::json{{"correct", correct},
                                                      {"counted", counted},
                                                      {"rate", static_cast<double>(correct) /
                                                                   static_cast<double>(counted)}};
        q["baseline_agreement"] = nullptr;
        if (!is_base && b != scores.end() && b->second.predicted.size() == s.predicted.size() &&
            !s.predicted.empty()) {
            int64_t same = 0;
            for (size_t i = 0; i < s.predicted.size(); ++i)
                same += s.predicted[i] == b->second.predicted[i];
            q["baseline_agreement"] =
                static_cast<double>(same) / static_cast<double>(s.predicted.size());
        }
        out[config] = std::move(q);
    }
    return out;
}

EmojiFeatureNetwork load_emoji_network(const EvalMetricsSpec& spec) {
    try {
        return EmojiFeatureNetwork::load(spec.emoji);
    } catch (const CheckpointError& e) {
        throw ManifestError("manifest: metrics.emoji '" + spec.emoji + "': " + e.what());
    }
}

}  // namespace varscope
