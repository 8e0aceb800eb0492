// LazyVAR policy for the VAR sampling loop. SKELETON: owned by the LazyVAR work item; replace.
#pragma once

#include <memory>

#include "core/accel/param_spec.h"
#include "core/sampling/hooks.h"
#include "core/sampling/probes.h"

namespace varscope {

struct LazyVarConfig {
    bool enabled = false;

    static const MethodSpec& spec();
    static LazyVarConfig from_json(const nlohmann::json& j);
    nlohmann::json to_json() const;
};

std::shared_ptr<SamplingHooks> make_lazyvar(const LazyVarConfig& cfg, const VarConfig& model,
                                          ProbeSink* probe);

}  // namespace varscope
