// The pickle interpreter alone (core/io/pickle_reader.h): any byte string must end in a value
// or a PickleError, never a crash, a hang or unbounded memory.
// The check itself is in fuzz/reader_contracts.h (shared with tests/fuzz_regressions_test.cpp).
#include "fuzz/fuzz_util.h"
#include "fuzz/reader_contracts.h"

using namespace varscope::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    return checked([&] { check_pickle(bytes(data, size)); });
}
