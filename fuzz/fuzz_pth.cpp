// torch.save zip archives (.pth): zip directory, records, data.pkl, storages. load_pth promises
// a CheckpointError for every bad file.
#include "core/io/checkpoint.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string& path = varscope::fuzz::input_file(data, size);
    try {
        (void)varscope::load_pth(path);
    } catch (const varscope::CheckpointError&) {
    } catch (const std::exception& e) {
        varscope::fuzz::unexpected(e.what());
    }
    return 0;
}
