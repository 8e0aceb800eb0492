#include "core/accel/lazyvar.h"

namespace varscope {

const MethodSpec& LazyVarConfig::spec() {
    static const MethodSpec s{"lazyvar", "LazyVAR", "", "(not implemented yet)", {}};
    return s;
}

LazyVarConfig LazyVarConfig::from_json(const nlohmann::json& j) {
    ParamReader r(j, spec());
    LazyVarConfig c;
    c.enabled = r.enabled();
    return c;
}

nlohmann::json LazyVarConfig::to_json() const { return {{"enabled", enabled}}; }

std::shared_ptr<SamplingHooks> make_lazyvar(const LazyVarConfig&, const VarConfig&, ProbeSink*) {
    throw AccelConfigError("lazyvar: not implemented yet");
}

}  // namespace varscope
