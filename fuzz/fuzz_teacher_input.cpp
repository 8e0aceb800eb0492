// teacher-forward's input file: a checkpoint (any format load_checkpoint reads) whose tensors
// are then checked against a two-scale VAR (patch_nums 1,2; 10 classes, 16 codes). Only
// CheckpointError and std::invalid_argument may come out.
#include "core/models/var_teacher_input.h"
#include "core/io/checkpoint.h"
#include "fuzz/fuzz_util.h"

namespace {

// Set by hand: VarConfig::for_depth lives in var.cpp with the whole transformer.
varscope::VarConfig two_scales() {
    varscope::VarConfig c;
    c.patch_nums = {1, 2};
    c.num_classes = 10;
    c.vocab_size = 16;
    return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const varscope::VarConfig config = two_scales();
    const std::string& path = varscope::fuzz::input_file(data, size);
    try {
        (void)varscope::check_var_teacher_input(varscope::load_checkpoint(path), config, path);
    } catch (const varscope::CheckpointError&) {
    } catch (const std::invalid_argument&) {
    } catch (const std::exception& e) {
        varscope::fuzz::unexpected(e.what());
    }
    return 0;
}
