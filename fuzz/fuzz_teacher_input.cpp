// teacher-forward's input file: a checkpoint (any format load_checkpoint reads) whose tensors
// are then checked against a two-scale VAR (patch_nums 1,2; 10 classes, 16 codes). Only
// CheckpointError and std::invalid_argument may come out.
// The check itself is in fuzz/reader_contracts.h (shared with tests/fuzz_regressions_test.cpp).
#include "fuzz/fuzz_util.h"
#include "fuzz/reader_contracts.h"

using namespace varscope::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    return checked([&] { check_teacher_input(input_file(data, size)); });
}
