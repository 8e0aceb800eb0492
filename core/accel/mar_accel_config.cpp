#include "core/accel/mar_accel_config.h"

#include <fstream>

namespace varscope {

bool MarAccelConfig::any_enabled() const {
    const auto& l = lazymar;
    return l.enabled &&
           (l.token_cache || l.condition_cache || l.head_cfg_period > 0 || l.head_mlp_period > 0);
}

std::string MarAccelConfig::summary() const {
    if (!any_enabled()) return "baseline";
    const auto& l = lazymar;
    std::string parts;
    auto add = [&](const char* p) { parts += (parts.empty() ? "" : " + ") + std::string(p); };
    if (l.token_cache) add("token");
    if (l.condition_cache) add("condition");
    if (!parts.empty()) parts += " cache";
    if (l.head_cfg_period > 0 || l.head_mlp_period > 0) add("head caches");
    return "LazyMAR (" + parts + ")";
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
    const nlohmann::json j = accel_file_json(path, "MAR ");
    return with_config_path(path, [&] { return from_json(j); });
}

MarAccelConfig MarAccelConfig::from_argument(const std::string& arg) {
    std::string file;
    const nlohmann::json j = accel_argument_json(arg, mar_accel_presets(), "MAR ", &file);
    return with_config_path(file, [&] { return from_json(j); });
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
        auto token = on, condition = on, released = on;
        token["condition_cache"] = false;
        condition["token_cache"] = false;
        // The released code's settings: the paper's two caches plus its DiffLoss-head caches
        // (cache_threshold 7 for both).
        released["head_cfg_period"] = 7;
        released["head_mlp_period"] = 7;
        return std::map<std::string, nlohmann::json>{
            {"baseline", nlohmann::json::object()},
            {"lazymar", {{"lazymar", on}}},
            {"lazymar-token", {{"lazymar", token}}},
            {"lazymar-condition", {{"lazymar", condition}}},
            {"lazymar-released", {{"lazymar", released}}}};
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
