// Whole-file writes that a crash or a reader never sees half done (issue #36): every file the
// CLI, the eval jobs, training and the exporters write goes through AtomicFileWriter (or
// write_file_atomic), so a killed process, a full disk or an unwritable folder leaves the
// previous file whole and no temporary file behind (a SIGKILL may leave `<path>.tmp-<pid>-<n>`).
#pragma once

#include <stdexcept>
#include <string>

namespace varscope {

// A file could not be written: the message names the path and the system's reason ("No space
// left on device", "File too large", ...). A failure while running (CLI exit 3), not bad input.
class FileWriteError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// Writes a file under a temporary name in the target's folder; commit() flushes it to disk and
// renames it over the target, so readers see the old file or the new one, whole. Destroyed
// without commit() (an exception, an error), the temporary file is removed.
// A symlink target: the file it names is replaced and the link stays. A target that exists but
// is not a regular file (/dev/null, a FIFO) is written in place: a rename would replace it.
class AtomicFileWriter {
  public:
    explicit AtomicFileWriter(const std::string& path);  // FileWriteError if it cannot create
    ~AtomicFileWriter();
    AtomicFileWriter(const AtomicFileWriter&) = delete;
    AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

    void write(const void* data, size_t bytes);  // FileWriteError (the temporary is removed)
    void write(const std::string& bytes) { write(bytes.data(), bytes.size()); }
    void commit();  // fsync, close, rename; FileWriteError (the temporary is removed)

    const std::string& path() const { return path_; }
    const std::string& temporary_path() const { return tmp_; }

  private:
    [[noreturn]] void fail(const std::string& step, int err);
    void discard();

    std::string path_, target_, tmp_;
    int fd_ = -1;
    bool in_place_ = false, done_ = false;
};

// The whole file at once through AtomicFileWriter.
void write_file_atomic(const std::string& path, const std::string& bytes);

}  // namespace varscope
