// parse_json (core/io/json_read.h), which every JSON read goes through: any bytes give a value
// or a JsonReadError; an accepted value prints and parses back to itself.
// The check itself is in fuzz/reader_contracts.h (shared with tests/fuzz_regressions_test.cpp).
#include "fuzz/fuzz_util.h"
#include "fuzz/reader_contracts.h"

using namespace varscope::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    return checked([&] { check_json(bytes(data, size)); });
}
