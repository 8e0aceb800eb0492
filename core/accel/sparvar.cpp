#include "core/accel/sparvar.h"

namespace varscope {

const MethodSpec& SparVarConfig::spec() {
    static const MethodSpec s{"sparvar", "SparVAR", "", "(not implemented yet)", {}};
    return s;
}

SparVarConfig SparVarConfig::from_json(const nlohmann::json& j) {
    ParamReader r(j, spec());
    SparVarConfig c;
    c.enabled = r.enabled();
    return c;
}

nlohmann::json SparVarConfig::to_json() const { return {{"enabled", enabled}}; }

std::shared_ptr<SamplingHooks> make_sparvar(const SparVarConfig&, const VarConfig&, ProbeSink*) {
    throw AccelConfigError("sparvar: not implemented yet");
}

}  // namespace varscope
