// .npz archives and bare .npy arrays (FID reference statistics, core/io/npy.*): the zip
// directory (zip64 fields, offsets, CRC), the .npy header literal, dtypes, shapes, Fortran
// order. An NpyError for every bad input; never a crash or an allocation beyond the input.
#include "core/io/npy.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string bytes(reinterpret_cast<const char*>(data), size);
    try {
        (void)varscope::parse_npz(bytes, "fuzz.npz");
    } catch (const varscope::NpyError&) {
    } catch (const std::exception& e) {
        varscope::fuzz::unexpected(e.what());
    }
    try {
        (void)varscope::parse_npy(bytes, "fuzz.npy");
    } catch (const varscope::NpyError&) {
    } catch (const std::exception& e) {
        varscope::fuzz::unexpected(e.what());
    }
    return 0;
}
