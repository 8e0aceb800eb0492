#include "core/accel/param_spec.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "core/io/json_read.h"

namespace varscope {
namespace {

std::string range_text(const ParamSpec& p) {
    std::ostringstream os;
    os << "[" << p.min << ", " << p.max << "]";
    return os.str();
}

std::string kind_name(ParamKind k) {
    switch (k) {
        case ParamKind::Bool:
            return "true or false";
        case ParamKind::Int:
            return "an integer";
        case ParamKind::Real:
            return "a number";
        case ParamKind::IntList:
            return "a list of integers";
        case ParamKind::RealList:
            return "a list of numbers";
    }
    return "?";
}

}  // namespace

int64_t ModelCounts::of(ParamCount c) const {
    switch (c) {
        case ParamCount::Scales:
            return scales;
        case ParamCount::Tokens:
            return tokens;
        case ParamCount::Steps:
            return steps;
        case ParamCount::DecoderBlocks:
            return decoder_blocks;
        case ParamCount::None:
            break;
    }
    return 0;
}

ParamSpec counting(ParamSpec p, ParamCount what, int64_t offset) {
    p.counts = what;
    p.count_offset = offset;
    return p;
}

double model_max(const ParamSpec& p, const ModelCounts& m) {
    const int64_t count = m.of(p.counts);
    if (count <= 0) return p.max;
    return std::max(p.min, std::min(p.max, double(count + p.count_offset)));
}

const char* param_count_name(ParamCount c) {
    switch (c) {
        case ParamCount::Scales:
            return "scales";
        case ParamCount::Tokens:
            return "tokens";
        case ParamCount::Steps:
            return "steps";
        case ParamCount::DecoderBlocks:
            return "decoder blocks";
        case ParamCount::None:
            break;
    }
    return "";
}

std::string model_bound_text(const ParamSpec& p) {
    if (p.counts == ParamCount::None) return "";
    std::string t = std::string(" (at most the model's ") + param_count_name(p.counts);
    if (p.count_offset != 0)
        t += (p.count_offset < 0 ? " - " : " + ") + std::to_string(std::abs(p.count_offset));
    return t + ")";
}

nlohmann::json MethodSpec::defaults() const {
    nlohmann::json j = {{"enabled", false}};
    for (const auto& p : params) j[p.key] = p.default_value;
    return j;
}

ParamReader::ParamReader(const nlohmann::json& object, const MethodSpec& spec)
    : obj_(object), spec_(spec) {
    if (!obj_.is_object())
        throw AccelConfigError(spec_.id + ": must be a JSON object, got " + obj_.dump());
    for (const auto& [key, value] : obj_.items()) {
        if (key == "enabled") {
            if (!value.is_boolean()) fail(key, "must be true or false, got " + value.dump());
            continue;
        }
        bool known = false;
        for (const auto& p : spec_.params) known = known || p.key == key;
        if (!known) {
            std::string allowed = "enabled";
            for (const auto& p : spec_.params) allowed += ", " + p.key;
            fail(key, "unknown field (allowed: " + allowed + ")");
        }
    }
}

void ParamReader::fail(const std::string& key, const std::string& message) const {
    throw AccelConfigError(spec_.id + "." + key + ": " + message);
}

const ParamSpec& ParamReader::spec_of(const std::string& key) const {
    for (const auto& p : spec_.params)
        if (p.key == key) return p;
    throw std::logic_error("accelerator '" + spec_.id + "' has no parameter '" + key + "'");
}

const nlohmann::json& ParamReader::value_of(const ParamSpec& p) const {
    auto it = obj_.find(p.key);
    return it == obj_.end() ? p.default_value : *it;
}

bool ParamReader::enabled() const {
    auto it = obj_.find("enabled");
    // An object given without "enabled" means the user wants the method on.
    return it == obj_.end() ? true : it->get<bool>();
}

bool ParamReader::get_bool(const std::string& key) const {
    const auto& p = spec_of(key);
    const auto& v = value_of(p);
    if (!v.is_boolean()) fail(key, "must be " + kind_name(p.kind) + ", got " + v.dump());
    return v.get<bool>();
}

namespace {

// Element checks shared by the scalar and list readers; they return "" or the message.
std::string int_error(const nlohmann::json& e, const ParamSpec& p) {
    if (!e.is_number_integer()) return "must be an integer, got " + e.dump();
    const auto x = e.get<int64_t>();
    if (x < p.min || x > p.max) return "must be in " + range_text(p) + ", got " + std::to_string(x);
    return "";
}

std::string real_error(const nlohmann::json& e, const ParamSpec& p) {
    if (!e.is_number()) return "must be a number, got " + e.dump();
    const auto x = e.get<double>();
    if (!std::isfinite(x) || x < p.min || x > p.max)
        return "must be in " + range_text(p) + ", got " + e.dump();
    return "";
}

}  // namespace

int64_t ParamReader::get_int(const std::string& key) const {
    const auto& v = value_of(spec_of(key));
    if (auto err = int_error(v, spec_of(key)); !err.empty()) fail(key, err);
    return v.get<int64_t>();
}

double ParamReader::get_real(const std::string& key) const {
    const auto& v = value_of(spec_of(key));
    if (auto err = real_error(v, spec_of(key)); !err.empty()) fail(key, err);
    return v.get<double>();
}

const nlohmann::json& ParamReader::list_of(const std::string& key) const {
    const auto& p = spec_of(key);
    const auto& v = value_of(p);
    if (!v.is_array()) fail(key, "must be " + kind_name(p.kind) + ", got " + v.dump());
    const auto n = static_cast<int64_t>(v.size());
    if (n < p.min_items || n > p.max_items)
        fail(key, "must have " + std::to_string(p.min_items) + " to " +
                      std::to_string(p.max_items) + " entries, got " + std::to_string(n));
    return v;
}

std::vector<int64_t> ParamReader::get_int_list(const std::string& key) const {
    const auto& v = list_of(key);
    std::vector<int64_t> out;
    for (size_t i = 0; i < v.size(); ++i) {
        if (auto err = int_error(v[i], spec_of(key)); !err.empty())
            fail(key + "[" + std::to_string(i) + "]", err);
        out.push_back(v[i].get<int64_t>());
    }
    return out;
}

std::vector<double> ParamReader::get_real_list(const std::string& key) const {
    const auto& v = list_of(key);
    std::vector<double> out;
    for (size_t i = 0; i < v.size(); ++i) {
        if (auto err = real_error(v[i], spec_of(key)); !err.empty())
            fail(key + "[" + std::to_string(i) + "]", err);
        out.push_back(v[i].get<double>());
    }
    return out;
}

nlohmann::json accel_file_json(const std::string& path, const std::string& kind) {
    try {
        return read_json_file(path, kind + "accelerator config '" + path + "'");
    } catch (const JsonReadError& e) {
        throw AccelConfigError(e.what());
    }
}

nlohmann::json accel_argument_json(const std::string& arg,
                                   const std::map<std::string, nlohmann::json>& presets,
                                   const std::string& kind, std::string* file) {
    if (auto it = presets.find(arg); it != presets.end()) return it->second;
    const auto first = arg.find_first_not_of(" \t\n");
    if (first != std::string::npos && arg[first] == '{') {
        try {
            return parse_json(arg, "inline " + kind + "accelerator config");
        } catch (const JsonReadError& e) {
            throw AccelConfigError(e.what());
        }
    }
    // Whether a file is there, without opening it (opening a FIFO would block).
    std::error_code ec;
    if (!std::filesystem::exists(arg, ec)) {
        // "FastVAR" for "fastvar": a preset in any case, once no file has that name.
        for (const auto& [name, config] : presets)
            if (std::equal(name.begin(), name.end(), arg.begin(), arg.end(), [](char a, char b) {
                    return std::tolower(static_cast<unsigned char>(a)) ==
                           std::tolower(static_cast<unsigned char>(b));
                }))
                return config;
        std::string names;
        for (const auto& [name, _] : presets) names += (names.empty() ? "" : ", ") + name;
        throw AccelConfigError("'" + arg + "' is neither a config file, inline JSON, nor a " +
                               kind + "preset (" + names + ")");
    }
    if (file) *file = arg;
    return accel_file_json(arg, kind);
}

}  // namespace varscope
