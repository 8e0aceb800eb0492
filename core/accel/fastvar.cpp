#include "core/accel/fastvar.h"

namespace varscope {

const MethodSpec& FastVarConfig::spec() {
    static const MethodSpec s{"fastvar", "FastVAR", "", "(not implemented yet)", {}};
    return s;
}

FastVarConfig FastVarConfig::from_json(const nlohmann::json& j) {
    ParamReader r(j, spec());
    FastVarConfig c;
    c.enabled = r.enabled();
    return c;
}

nlohmann::json FastVarConfig::to_json() const { return {{"enabled", enabled}}; }

std::shared_ptr<SamplingHooks> make_fastvar(const FastVarConfig&, const VarConfig&, ProbeSink*) {
    throw AccelConfigError("fastvar: not implemented yet");
}

}  // namespace varscope
