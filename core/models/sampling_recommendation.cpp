#include "core/models/sampling_recommendation.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "core/io/checkpoint.h"
#include "core/io/json_read.h"
#include "core/io/state_dict.h"  // CheckpointError

namespace varscope {

namespace {

using nlohmann::json;

std::string field(const std::string& key, const char* entry = kSamplingMetadataKey) {
    return std::string(entry) + "." + key;
}

std::optional<double> read_number(const json& j, const std::string& key, double lo, double hi,
                                  const char* entry = kSamplingMetadataKey) {
    if (!j.contains(key)) return std::nullopt;
    const json& v = j.at(key);
    if (!v.is_number() || v.get<double>() < lo || v.get<double>() > hi) {
        std::ostringstream os;
        os << field(key, entry) << ": must be a number in [" << lo << ", " << hi << "], got "
           << v.dump();
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
    const json j = parse_json(json_text, kSamplingMetadataKey);
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
            throw std::invalid_argument(field("top_k") + ": must be a whole number >= 0, got " +
                                        v.dump());
        r.top_k = v.get<int64_t>();
    }
    return r;
}

namespace {

// The entry's JSON text, or "" for files without it (and torch.save files, which have none).
std::string metadata_entry(const std::string& model_path, const char* key) {
    if (is_zip(model_path)) return {};
    const auto metadata = read_safetensors_metadata(model_path);
    const auto it = metadata.find(key);
    return it == metadata.end() ? std::string() : it->second;
}

}  // namespace

SamplingRecommendation read_sampling_recommendation(const std::string& model_path) {
    const std::string text = metadata_entry(model_path, kSamplingMetadataKey);
    if (text.empty()) return {};
    try {
        return parse_sampling_recommendation(text);
    } catch (const std::invalid_argument& e) {
        throw CheckpointError(model_path + ": " + e.what());
    }
}

std::string MarSamplingRecommendation::describe() const {
    std::ostringstream os;
    const char* sep = "";
    if (num_iter) os << sep << *num_iter << " decoding steps", sep = ", ";
    if (cfg) os << sep << "cfg " << *cfg, sep = ", ";
    if (cfg_schedule) os << sep << *cfg_schedule << " cfg schedule", sep = ", ";
    if (temperature) os << sep << "temperature " << *temperature, sep = ", ";
    if (num_sampling_steps) os << sep << *num_sampling_steps << " diffusion steps";
    return os.str();
}

MarSamplingRecommendation parse_mar_sampling_recommendation(const std::string& json_text) {
    const char* entry = kMarSamplingMetadataKey;
    const json j = parse_json(json_text, entry);
    if (!j.is_object()) throw std::invalid_argument(std::string(entry) + ": must be a JSON object");
    for (const auto& [key, value] : j.items()) {
        (void)value;
        if (key != "num_iter" && key != "cfg" && key != "cfg_schedule" && key != "temperature" &&
            key != "num_sampling_steps")
            throw std::invalid_argument(field(key, entry) +
                                        ": unknown key (allowed: num_iter, cfg, cfg_schedule, "
                                        "temperature, num_sampling_steps)");
    }
    MarSamplingRecommendation r;
    r.cfg = read_number(j, "cfg", 0, 100, entry);
    r.temperature = read_number(j, "temperature", 0, 10, entry);
    if (j.contains("num_iter")) {
        const json& v = j.at("num_iter");
        if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 4096)
            throw std::invalid_argument(field("num_iter", entry) +
                                        ": must be a whole number in [1, 4096], got " + v.dump());
        r.num_iter = v.get<int64_t>();
    }
    if (j.contains("cfg_schedule")) {
        const json& v = j.at("cfg_schedule");
        if (!v.is_string() ||
            (v.get<std::string>() != "linear" && v.get<std::string>() != "constant"))
            throw std::invalid_argument(field("cfg_schedule", entry) +
                                        ": must be \"linear\" or \"constant\", got " + v.dump());
        r.cfg_schedule = v.get<std::string>();
    }
    if (j.contains("num_sampling_steps")) {
        // A respacing spec ("250", "ddim50", "10,20"); the diffusion code checks it fully.
        const json& v = j.at("num_sampling_steps");
        if (!v.is_string() || v.get<std::string>().empty())
            throw std::invalid_argument(
                field("num_sampling_steps", entry) +
                ": must be a non-empty respacing string such as \"250\", got " + v.dump());
        r.num_sampling_steps = v.get<std::string>();
    }
    return r;
}

MarSamplingRecommendation read_mar_sampling_recommendation(const std::string& model_path) {
    const std::string text = metadata_entry(model_path, kMarSamplingMetadataKey);
    if (text.empty()) return {};
    try {
        return parse_mar_sampling_recommendation(text);
    } catch (const std::invalid_argument& e) {
        throw CheckpointError(model_path + ": " + e.what());
    }
}

}  // namespace varscope
