// Accelerator configs (--accel, the app's method panel): any text is a config or an
// AccelConfigError / JsonReadError (both std::invalid_argument). A config that was accepted
// must survive its own to_json() unchanged.
#include "core/accel/accel_config.h"
#include "core/accel/mar_accel_config.h"
#include "core/io/json_read.h"
#include "fuzz/fuzz_util.h"

namespace {

template <class Config>
void check(const nlohmann::json& j) {
    try {
        const Config c = Config::from_json(j);
        const nlohmann::json once = c.to_json();
        if (Config::from_json(once).to_json() != once) varscope::fuzz::unexpected("round trip");
    } catch (const std::invalid_argument&) {
    } catch (const std::exception& e) {
        varscope::fuzz::unexpected(e.what());
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    nlohmann::json j;
    try {
        j = varscope::parse_json({reinterpret_cast<const char*>(data), size}, "fuzz");
    } catch (const varscope::JsonReadError&) {
        return 0;
    } catch (const std::exception& e) {
        varscope::fuzz::unexpected(e.what());
    }
    check<varscope::AccelConfig>(j);
    check<varscope::MarAccelConfig>(j);
    return 0;
}
