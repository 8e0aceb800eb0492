// What the reader harnesses check per input, as plain functions: the harnesses (fuzz/*.cpp)
// call them on libFuzzer's inputs, and the normal test suite (tests/fuzz_regressions_test.cpp)
// calls them on every input fuzzing ever found (tests/fixtures/fuzz/<harness>/), so a finding
// stays fixed in builds without clang or sanitizers. A check returns when the reader kept its
// promise (a value, or the error it documents) and throws ContractBroken otherwise.
// Declarations only: the harnesses compile in seconds, reader_contracts.cpp once.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace varscope::fuzz {

// A reader let through an exception it does not document, or a round trip changed a value.
class ContractBroken : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// parse_json (every JSON read goes through it): a value or a JsonReadError; an accepted value
// prints and parses back to itself.
void check_json(const std::string& bytes);
// The pickle interpreter alone: a value or a PickleError.
void check_pickle(const std::string& bytes);
// torch.save zip archives: load_pth promises a CheckpointError for every bad file.
void check_pth(const std::string& path);
// safetensors files through load_checkpoint and the metadata reader: CheckpointError only.
void check_safetensors(const std::string& path);
// teacher-forward's input file checked against a two-scale VAR (patch_nums 1,2; 10 classes,
// 16 codes): CheckpointError or std::invalid_argument only.
void check_teacher_input(const std::string& path);
// .npz archives and bare .npy arrays (FID reference statistics): NpyError only.
void check_npz(const std::string& bytes);

// The reader harnesses, whose checks check_reader runs.
const std::vector<std::string>& reader_harnesses();
// The check of reader harness `harness` (fuzz_json, ...) on the input in file `path`;
// std::invalid_argument for a name that is not a reader harness.
void check_reader(const std::string& harness, const std::string& path);

}  // namespace varscope::fuzz
