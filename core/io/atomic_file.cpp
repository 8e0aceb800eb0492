#include "core/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace varscope {
namespace {

// Two writers of one process (threads) never share a temporary name.
std::atomic<unsigned> temporary_counter{0};

}  // namespace

AtomicFileWriter::AtomicFileWriter(const std::string& path) : path_(path) {
    std::error_code ec;
    const std::filesystem::path resolved = std::filesystem::weakly_canonical(path, ec);
    target_ = ec ? path : resolved.string();
    struct stat st {};
    in_place_ = ::stat(target_.c_str(), &st) == 0 && !S_ISREG(st.st_mode);
    if (in_place_) {
        tmp_ = target_;
        fd_ = ::open(target_.c_str(), O_WRONLY | O_CLOEXEC);
    } else {
        tmp_ = target_ + ".tmp-" + std::to_string(::getpid()) + "-" +
               std::to_string(temporary_counter++);
        fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    }
    if (fd_ < 0) {
        const int err = errno;
        done_ = true;  // nothing to remove
        throw FileWriteError("cannot write '" + path_ + "': " + std::strerror(err));
    }
}

AtomicFileWriter::~AtomicFileWriter() {
    discard();
}

void AtomicFileWriter::discard() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    if (!done_ && !in_place_) ::unlink(tmp_.c_str());
    done_ = true;
}

void AtomicFileWriter::fail(const std::string& step, int err) {
    discard();
    throw FileWriteError("cannot write '" + path_ + "' (" + step + "): " + std::strerror(err));
}

void AtomicFileWriter::write(const void* data, size_t bytes) {
    if (done_) throw FileWriteError("cannot write '" + path_ + "': already committed or failed");
    const char* p = static_cast<const char*>(data);
    while (bytes > 0) {
        const ssize_t n = ::write(fd_, p, bytes);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) fail("write", errno);
        if (n == 0) fail("write", ENOSPC);  // no progress: a full disk that said nothing
        p += n;
        bytes -= static_cast<size_t>(n);
    }
}

void AtomicFileWriter::commit() {
    if (done_) throw FileWriteError("cannot write '" + path_ + "': already committed or failed");
    // A FIFO or a terminal cannot be synced (EINVAL); only files need it.
    if (!in_place_ && ::fsync(fd_) != 0) fail("fsync", errno);
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) {
        const int err = errno;
        fail("close", err);
    }
    if (!in_place_ && std::rename(tmp_.c_str(), target_.c_str()) != 0) {
        const int err = errno;
        discard();
        throw FileWriteError("cannot move '" + tmp_ + "' to '" + path_ +
                             "': " + std::strerror(err));
    }
    done_ = true;
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
    AtomicFileWriter file(path);
    file.write(bytes);
    file.commit();
}

}  // namespace varscope
