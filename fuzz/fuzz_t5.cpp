// The T5 text encoder's readers of a stranger's folder (issue #32): the first byte picks the
// input's role, the rest is its content (fuzz/t5_contract.h, shared with the regression test).
// SentencePiece itself is the system library (not instrumented): a crash inside it is still a
// finding, ours to guard against.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "fuzz/fuzz_util.h"
#include "fuzz/t5_contract.h"

namespace {

const std::filesystem::path& folder() {
    static const std::filesystem::path p = [] {
        auto d = std::filesystem::temp_directory_path() /
                 ("varscope-fuzz-t5-" + std::to_string(::getpid()));
        std::filesystem::create_directories(d);
        static std::filesystem::path for_exit;
        for_exit = d;
        std::atexit([] {
            std::error_code ec;
            std::filesystem::remove_all(for_exit, ec);
        });
        return d;
    }();
    return p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        varscope::fuzz::check_t5(std::string(reinterpret_cast<const char*>(data), size),
                                 folder().string());
    } catch (const std::exception& e) {
        varscope::fuzz::unexpected(e.what());
    }
    return 0;
}
