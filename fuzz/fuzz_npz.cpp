// .npz archives and bare .npy arrays (FID reference statistics, core/io/npy.*): the zip
// directory (zip64 fields, offsets, CRC), the .npy header literal, dtypes, shapes, Fortran
// order. An NpyError for every bad input; never a crash or an allocation beyond the input.
// The check itself is in fuzz/reader_contracts.h (shared with tests/fuzz_regressions_test.cpp).
#include "fuzz/fuzz_util.h"
#include "fuzz/reader_contracts.h"

using namespace varscope::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    return checked([&] { check_npz(bytes(data, size)); });
}
