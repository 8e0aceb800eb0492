// SparVAR policy for the VAR sampling loop. SKELETON: owned by the SparVAR work item; replace.
#pragma once

#include <memory>

#include "core/accel/param_spec.h"
#include "core/sampling/hooks.h"
#include "core/sampling/probes.h"

namespace varscope {

struct SparVarConfig {
    bool enabled = false;

    static const MethodSpec& spec();
    static SparVarConfig from_json(const nlohmann::json& j);
    nlohmann::json to_json() const;
};

std::shared_ptr<SamplingHooks> make_sparvar(const SparVarConfig& cfg, const VarConfig& model,
                                          ProbeSink* probe);

}  // namespace varscope
