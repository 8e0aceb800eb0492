// safetensors files through load_checkpoint (header JSON, layout, dtypes, int8 metadata) and
// the metadata reader: a CheckpointError for every bad file.
// The check itself is in fuzz/reader_contracts.h (shared with tests/fuzz_regressions_test.cpp).
#include "fuzz/fuzz_util.h"
#include "fuzz/reader_contracts.h"

using namespace varscope::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    return checked([&] { check_safetensors(input_file(data, size)); });
}
