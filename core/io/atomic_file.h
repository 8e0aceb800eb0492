// Whole-file writes that a crash or a reader never sees half done (issue #36): eval shards and
// results, the CLI's JSON/CSV reports.
#pragma once

#include <string>

namespace varscope {

// Writes `bytes` to `path` so that a reader (or a crash at any point) sees the old file or the
// new one whole: a temporary file in the same folder, flushed to disk, renamed over `path`.
// std::runtime_error naming the path on failure (disk full, no permission); the temporary
// file is removed.
void write_file_atomic(const std::string& path, const std::string& bytes);

}  // namespace varscope
