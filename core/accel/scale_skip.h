// Scale skipping: the last N scales are not run and the image is decoded from f_hat as it stands
// after scale S-N-1 (f_hat already lives at the final resolution, so this is FastVAR's "100 %
// pruning ratio": the cached map interpolated to the target size).
#pragma once

#include <memory>

#include "core/accel/param_spec.h"
#include "core/sampling/hooks.h"
#include "core/sampling/probes.h"

namespace varscope {

struct ScaleSkipConfig {
    bool enabled = false;
    int64_t last_n = 1;  // scales skipped at the end; 0 = off

    static const MethodSpec& spec();
    static ScaleSkipConfig from_json(const nlohmann::json& j);
    nlohmann::json to_json() const;
};

// Throws AccelConfigError when the model has too few scales for the setting.
std::shared_ptr<SamplingHooks> make_scale_skip(const ScaleSkipConfig& cfg, const VarConfig& model,
                                               ProbeSink* probe);

}  // namespace varscope
