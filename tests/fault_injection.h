// Faults for the write tests (issue #36) that work when the tests run as root (chmod stops no
// root process): a full disk through RLIMIT_FSIZE, a small or read-only tmpfs in a private
// mount namespace, each inside a forked child so that the test process is untouched.
#pragma once

#include <ATen/Parallel.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <string>

namespace varscope::testing {

struct ChildOutcome {
    int code = -1;  // the child's exit code; -1: killed by a signal
    std::string report;
};

// Exit code of a child whose fault could not be set up here (unshare/mount refused): skip.
constexpr int kFaultUnavailable = 77;

// In a forked child, before any tensor work: the parent's OpenMP thread pool does not survive
// fork (a parallel kernel in the child waits forever), so the child computes on one thread.
inline void single_threaded_after_fork() {
    at::set_num_threads(1);
}

// Runs `f` in a forked child and returns its exit code and the text it put in `report`. The
// child leaves with _exit: no test framework or static destructors run twice.
inline ChildOutcome run_in_child(const std::function<int(std::string& report)>& f) {
    int fds[2];
    if (::pipe(fds) != 0) return {};
    const pid_t pid = ::fork();
    if (pid < 0) return {};
    if (pid == 0) {
        ::close(fds[0]);
        single_threaded_after_fork();
        std::string report;
        int code = 3;
        try {
            code = f(report);
        } catch (const std::exception& e) {
            report += std::string("unexpected exception: ") + e.what();
        }
        for (size_t done = 0; done < report.size();) {
            const ssize_t n = ::write(fds[1], report.data() + done, report.size() - done);
            if (n <= 0) break;
            done += static_cast<size_t>(n);
        }
        ::close(fds[1]);
        ::_exit(code);
    }
    ::close(fds[1]);
    ChildOutcome out;
    char buf[4096];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) out.report.append(buf, n);
    ::close(fds[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    out.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return out;
}

// In a child: a file may grow to `bytes` at most; a write past it fails with EFBIG, as a full
// disk fails with ENOSPC (SIGXFSZ, which would kill the process instead, is ignored).
inline void limit_file_size(rlim_t bytes) {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit lim{bytes, bytes};
    ::setrlimit(RLIMIT_FSIZE, &lim);
}

// In a child: a tmpfs of `bytes` at `dir`, in a mount namespace of its own so that nobody else
// sees it. False with the reason where this machine refuses.
inline bool mount_private_tmpfs(const std::string& dir, size_t bytes, std::string& why) {
    if (::unshare(CLONE_NEWNS) != 0) {
        why = std::string("unshare(CLONE_NEWNS): ") + std::strerror(errno);
        return false;
    }
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
        why = std::string("mount --make-rprivate /: ") + std::strerror(errno);
        return false;
    }
    const std::string options = "size=" + std::to_string(bytes);
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, options.c_str()) != 0) {
        why = std::string("mount tmpfs: ") + std::strerror(errno);
        return false;
    }
    return true;
}

// In a child after mount_private_tmpfs: the tmpfs becomes read-only (EROFS stops root too).
inline bool remount_read_only(const std::string& dir, std::string& why) {
    if (::mount(nullptr, dir.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr) != 0) {
        why = std::string("remount read-only: ") + std::strerror(errno);
        return false;
    }
    return true;
}

}  // namespace varscope::testing
