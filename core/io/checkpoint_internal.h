// Helpers shared by the checkpoint readers (not part of the public API).
#pragma once

#include <cstdint>
#include <string>

namespace varscope::detail {

// Throws CheckpointError("<path>: <what>").
[[noreturn]] void checkpoint_fail(const std::string& path, const std::string& what);

// Size of the regular file at `path`; throws CheckpointError "cannot open: ..." otherwise.
uint64_t checked_file_size(const std::string& path);

// Up to `n` bytes from the start of the file.
std::string read_head(const std::string& path, size_t n);

// Throws a clear CheckpointError for pre-1.6 torch.save files and bare pickles.
void reject_raw_pickle(const std::string& path, const std::string& head);

}  // namespace varscope::detail
