// FastVAR policy for the VAR sampling loop. SKELETON: owned by the FastVAR work item; replace.
#pragma once

#include <memory>

#include "core/accel/param_spec.h"
#include "core/sampling/hooks.h"
#include "core/sampling/probes.h"

namespace varscope {

struct FastVarConfig {
    bool enabled = false;

    static const MethodSpec& spec();
    static FastVarConfig from_json(const nlohmann::json& j);
    nlohmann::json to_json() const;
};

std::shared_ptr<SamplingHooks> make_fastvar(const FastVarConfig& cfg, const VarConfig& model,
                                          ProbeSink* probe);

}  // namespace varscope
