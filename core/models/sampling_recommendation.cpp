#include "core/models/sampling_recommendation.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "core/io/checkpoint.h"

namespace varscope {

namespace {

using nlohmann::json;

std::string field(const std::string& key) { return std::string(kSamplingMetadataKey) + "." + key; }

std::optional<double> read_number(const json& j, const std::string& key, double lo, double hi) {
    if (!j.contains(key)) return std::nullopt;
    const json& v = j.at(key);
    if (!v.is_number() || v.get<double>() < lo || v.get<double>() > hi) {
        std::ostringstream os;
        os << field(key) << ": must be a number in [" << lo << ", " << hi << "], got " << v.dump();
        throw std::invalid_argument(os.str());
    }
    return v.get<double>();
}

bool is_zip(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    char magic[2] = {};
    return in.read(magic, 2) && magic[0] == 'P' && magic[1] == 'K';
}

}  // namespace

std::string SamplingRecommendation::describe() const {
    std::ostringstream os;
    const char* sep = "";
    if (cfg) os << sep << "cfg " << *cfg, sep = ", ";
    if (top_k) os << sep << "top-k " << *top_k, sep = ", ";
    if (top_p) os << sep << "top-p " << *top_p;
    return os.str();
}

SamplingRecommendation parse_sampling_recommendation(const std::string& json_text) {
    const json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object())
        throw std::invalid_argument(std::string(kSamplingMetadataKey) + ": must be a JSON object");
    for (const auto& [key, value] : j.items()) {
        (void)value;
        if (key != "cfg" && key != "top_k" && key != "top_p")
            throw std::invalid_argument(field(key) + ": unknown key (allowed: cfg, top_k, top_p)");
    }
    SamplingRecommendation r;
    r.cfg = read_number(j, "cfg", 0, 100);
    r.top_p = read_number(j, "top_p", 0, 1);
    if (j.contains("top_k")) {
        const json& v = j.at("top_k");
        if (!v.is_number_integer() || v.get<int64_t>() < 0)
            throw std::invalid_argument(field("top_k") + ": must be a whole number >= 0, got " + v.dump());
        r.top_k = v.get<int64_t>();
    }
    return r;
}

SamplingRecommendation read_sampling_recommendation(const std::string& model_path) {
    if (is_zip(model_path)) return {};  // torch.save files have no metadata
    const auto metadata = read_safetensors_metadata(model_path);
    const auto it = metadata.find(kSamplingMetadataKey);
    if (it == metadata.end()) return {};
    try {
        return parse_sampling_recommendation(it->second);
    } catch (const std::invalid_argument& e) {
        throw std::runtime_error(model_path + ": " + e.what());
    }
}

}  // namespace varscope
