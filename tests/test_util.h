// Small helpers shared by the tests.
#pragma once

#include <filesystem>
#include <string>

namespace varscope::testing {

// A fresh directory under the system temp dir, removed when the object dies.
class TempDir {
  public:
    TempDir();
    ~TempDir();
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::filesystem::path& path() const { return path_; }
    std::string file(const std::string& name) const { return (path_ / name).string(); }

  private:
    std::filesystem::path path_;
};

std::string source_dir();

}  // namespace varscope::testing
