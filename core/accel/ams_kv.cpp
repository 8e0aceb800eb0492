#include "core/accel/ams_kv.h"

namespace varscope {

const MethodSpec& AmsKvConfig::spec() {
    static const MethodSpec s{"ams_kv", "AMS-KV", "", "(not implemented yet)", {}};
    return s;
}

AmsKvConfig AmsKvConfig::from_json(const nlohmann::json& j) {
    ParamReader r(j, spec());
    AmsKvConfig c;
    c.enabled = r.enabled();
    return c;
}

nlohmann::json AmsKvConfig::to_json() const { return {{"enabled", enabled}}; }

std::shared_ptr<SamplingHooks> make_ams_kv(const AmsKvConfig&, const VarConfig&, ProbeSink*) {
    throw AccelConfigError("ams_kv: not implemented yet");
}

}  // namespace varscope
