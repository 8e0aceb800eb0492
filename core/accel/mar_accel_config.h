// The MAR accelerators as a whole (VAR's counterpart: accel_config.h): which methods are on and
// their settings, read from JSON (file, inline or preset), validated against the methods'
// ParamSpec tables, and turned into one MarHookChain. A method that is off adds no hook, so the
// loop is the baseline.
//
// JSON: {"lazymar": {...}}; the object takes "enabled" (default true when given) and the keys
// of LazyMarConfig::spec().
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/accel/lazymar.h"
#include "core/accel/param_spec.h"
#include "core/sampling/mar_hooks.h"

namespace varscope {

struct MarAccelConfig {
    LazyMarConfig lazymar;

    bool any_enabled() const;  // LazyMAR on with any of its four caches
    // e.g. "LazyMAR (token + condition cache)", "LazyMAR (token cache + head caches)", "baseline"
    std::string summary() const;

    static MarAccelConfig from_json(const nlohmann::json& j);  // AccelConfigError on bad input
    static MarAccelConfig from_file(const std::string& path);
    // A file path, an inline JSON object, or a preset name (see mar_accel_presets()).
    static MarAccelConfig from_argument(const std::string& arg);
    nlohmann::json to_json() const;
};

const std::vector<MethodSpec>& mar_accel_methods();

// baseline, lazymar (both caches), lazymar-token, lazymar-condition: the paper's defaults.
const std::map<std::string, nlohmann::json>& mar_accel_presets();
std::string mar_preset_names();  // "baseline, lazymar, ..."

// The hooks for `cfg` on this model (nullptr when nothing is enabled).
std::shared_ptr<MarSamplingHooks> build_mar_accelerators(const MarAccelConfig& cfg,
                                                         const MarConfig& model,
                                                         ProbeSink* probe = nullptr);

}  // namespace varscope
