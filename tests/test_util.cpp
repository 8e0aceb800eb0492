#include "tests/test_util.h"

#include <random>

namespace varscope::testing {

TempDir::TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("varscope-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
}

std::string source_dir() { return VARSCOPE_SOURCE_DIR; }

}  // namespace varscope::testing
