#include "core/accel/mar_accel_config.h"

#include <fstream>

namespace varscope {

bool MarAccelConfig::any_enabled() const {
    return lazymar.enabled && (lazymar.token_cache || lazymar.condition_cache);
}

std::string MarAccelConfig::summary() const {
    if (!any_enabled()) return "baseline";
    if (lazymar.token_cache && lazymar.condition_cache) return "LazyMAR (token + condition cache)";
    return lazymar.token_cache ? "LazyMAR (token cache)" : "LazyMAR (condition cache)";
}

MarAccelConfig MarAccelConfig::from_json(const nlohmann::json& j) {
    if (!j.is_object()) throw AccelConfigError("MAR accelerator config must be a JSON object");
    for (const auto& [key, value] : j.items())
        if (key != "lazymar")
            throw AccelConfigError(key + ": unknown MAR accelerator (allowed: lazymar)");
    MarAccelConfig c;
    auto it = j.find("lazymar");
    c.lazymar = LazyMarConfig::from_json(it == j.end() ? nlohmann::json{{"enabled", false}} : *it);
    return c;
}

MarAccelConfig MarAccelConfig::from_file(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw AccelConfigError("cannot open MAR accelerator config '" + path + "'");
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::parse_error& e) {
        throw AccelConfigError("'" + path + "' is not valid JSON: " + e.what());
    }
    try {
        return from_json(j);
    } catch (const AccelConfigError& e) {
        throw AccelConfigError("'" + path + "': " + e.what());
    }
}

MarAccelConfig MarAccelConfig::from_argument(const std::string& arg) {
    const auto& presets = mar_accel_presets();
    if (auto it = presets.find(arg); it != presets.end()) return from_json(it->second);
    const auto first = arg.find_first_not_of(" \t\n");
    if (first != std::string::npos && arg[first] == '{') {
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(arg);
        } catch (const nlohmann::json::parse_error& e) {
            throw AccelConfigError(
                std::string("inline MAR accelerator config is not valid JSON: ") + e.what());
        }
        return from_json(j);
    }
    if (!std::ifstream(arg))
        throw AccelConfigError("'" + arg +
                               "' is neither a config file, inline JSON, nor a MAR preset (" +
                               mar_preset_names() + ")");
    return from_file(arg);
}

nlohmann::json MarAccelConfig::to_json() const {
    return {{"lazymar", lazymar.to_json()}};
}

const std::vector<MethodSpec>& mar_accel_methods() {
    static const std::vector<MethodSpec> all = {LazyMarConfig::spec()};
    return all;
}

const std::map<std::string, nlohmann::json>& mar_accel_presets() {
    static const std::map<std::string, nlohmann::json> presets = [] {
        auto on = LazyMarConfig::spec().defaults();
        on["enabled"] = true;
        auto token = on, condition = on;
        token["condition_cache"] = false;
        condition["token_cache"] = false;
        return std::map<std::string, nlohmann::json>{
            {"baseline", nlohmann::json::object()},
            {"lazymar", {{"lazymar", on}}},
            {"lazymar-token", {{"lazymar", token}}},
            {"lazymar-condition", {{"lazymar", condition}}}};
    }();
    return presets;
}

std::string mar_preset_names() {
    std::string s;
    for (const auto& [name, _] : mar_accel_presets()) s += (s.empty() ? "" : ", ") + name;
    return s;
}

std::shared_ptr<MarSamplingHooks> build_mar_accelerators(const MarAccelConfig& cfg,
                                                         const MarConfig& model, ProbeSink* probe) {
    if (!cfg.any_enabled()) return nullptr;
    return make_lazymar(cfg.lazymar, model, probe);
}

}  // namespace varscope
