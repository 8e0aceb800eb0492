// parse_json (core/io/json_read.h), which every JSON read goes through: any bytes give a value
// or a JsonReadError; an accepted value prints and parses back to itself.
#include "core/io/json_read.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    nlohmann::json j;
    try {
        j = varscope::parse_json({reinterpret_cast<const char*>(data), size}, "fuzz");
    } catch (const varscope::JsonReadError&) {
        return 0;
    } catch (const std::exception& e) {
        varscope::fuzz::unexpected(e.what());
    }
    // Invalid UTF-8 in strings parses but does not print (nlohmann throws type_error 316).
    std::string text;
    try {
        text = j.dump();
    } catch (const nlohmann::json::type_error&) {
        return 0;
    }
    try {
        if (varscope::parse_json(text, "fuzz round trip") != j)
            varscope::fuzz::unexpected("round trip changed the value");
    } catch (const varscope::JsonReadError& e) {
        varscope::fuzz::unexpected(e.what());
    }
    return 0;
}
