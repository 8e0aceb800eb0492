// The accelerator configuration as a whole: which methods are on and their settings, read from
// JSON (file or GUI), validated against the methods' ParamSpec tables, and turned into one
// HookChain for the sampling loop. A method that is off adds no hook, so the loop is the
// baseline.
//
// JSON: {"skip": {...}, "fastvar": {...}, "sparvar": {...}, "lazyvar": {...}, "ams_kv": {...}}
// Each object takes "enabled" (default true when the object is given) and the method's keys.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/accel/ams_kv.h"
#include "core/accel/fastvar.h"
#include "core/accel/lazyvar.h"
#include "core/accel/param_spec.h"
#include "core/accel/scale_skip.h"
#include "core/accel/sparvar.h"
#include "core/sampling/hooks.h"

namespace varscope {

struct AccelConfig {
    ScaleSkipConfig skip;
    FastVarConfig fastvar;
    SparVarConfig sparvar;
    LazyVarConfig lazyvar;
    AmsKvConfig ams_kv;

    bool any_enabled() const;
    std::string summary() const;  // e.g. "FastVAR + AMS-KV", or "baseline"

    static AccelConfig from_json(const nlohmann::json& j);  // AccelConfigError on bad input
    static AccelConfig from_file(const std::string& path);  // ... naming the file
    // Accepts a file path, an inline JSON object, or a preset name (any of
    // infinity_accel_presets(), which holds accel_presets() too).
    static AccelConfig from_argument(const std::string& arg);
    nlohmann::json to_json() const;
};

// All methods' tables, in panel order.
const std::vector<MethodSpec>& accel_methods();

// Named settings: each method at its paper's defaults, and the papers' combinations.
const std::map<std::string, nlohmann::json>& accel_presets();

// Infinity's presets: accel_presets() and the papers' Infinity-2B settings for its 13-scale
// 1024^2 schedule, "infinity-fastvar", "infinity-lazyvar", "infinity-sparvar",
// "infinity-sparvar+skip". Settings counted from the end of the schedule (FastVAR's ratios,
// SparVAR's sparse scales, skipping) apply to shorter schedules too; LazyVAR's start scale is
// an index (si 9), so on a schedule of fewer than 13 scales that preset is refused with the
// field's message when its hooks are built (build_accelerators), not clipped.
const std::map<std::string, nlohmann::json>& infinity_accel_presets();

// `cfg` moved onto a schedule of `scales` scales where a setting counted from the start of the
// schedule does not fit it (LazyVAR's start_scale and ratios: fit_to_schedule in lazyvar.h);
// everything else as it is. One note per change. The app applies it to presets and settings
// written for another model and shows the notes.
AccelConfig fit_to_schedule(const AccelConfig& cfg, int64_t scales,
                            std::vector<std::string>* notes);

// The hooks for `cfg` on this model (nullptr when nothing is enabled). Checks what depends on
// the model (scale counts, layer counts) and which combinations are allowed.
std::shared_ptr<SamplingHooks> build_accelerators(const AccelConfig& cfg, const VarConfig& model,
                                                  ProbeSink* probe = nullptr);

}  // namespace varscope
