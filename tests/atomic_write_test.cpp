// Faults while writing (issue #36), for core/io/atomic_file (AtomicFileWriter, write_file_atomic)
// and save_safetensors, which writes through it: a process killed with SIGKILL at any point, a
// full disk, a read-only filesystem or a path that cannot be created leave the previous file
// whole and no temporary file; the error names the file and the system's reason.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <thread>

#include "core/io/atomic_file.h"
#include "core/io/checkpoint.h"
#include "tests/error_of.h"
#include "tests/fault_injection.h"
#include "tests/test_util.h"

using varscope::FileWriteError;
using varscope::write_file_atomic;
using varscope::testing::error_of;
using varscope::testing::TempDir;

namespace {

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

size_t entries(const std::filesystem::path& dir) {
    return static_cast<size_t>(std::distance(std::filesystem::directory_iterator(dir), {}));
}

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

}  // namespace

TEST(AtomicWrite, SafetensorsKilledMidWriteLeavesAWholeFile) {
    TempDir dir;
    const std::string path = dir.file("w.safetensors");
    varscope::save_safetensors({{"w", at::full({4}, 7.0f)}}, path);
    // 64 MB: each write takes tens of milliseconds, so most kills land inside one.
    const at::Tensor big = at::ones({16, 1024, 1024});
    std::mt19937 rng(36);
    for (int round = 0; round < 6; ++round) {
        const pid_t child = ::fork();
        ASSERT_GE(child, 0);
        if (child == 0) {  // writes the big tensor over and over until killed
            for (;;) varscope::save_safetensors({{"w", big}}, path);
        }
        ::usleep(20000 + rng() % 150000);
        ASSERT_EQ(::kill(child, SIGKILL), 0);
        int status = 0;
        ASSERT_EQ(::waitpid(child, &status, 0), child);
        ASSERT_TRUE(WIFSIGNALED(status));
        varscope::StateDict sd;
        ASSERT_NO_THROW(sd = varscope::load_checkpoint(path)) << "round " << round;
        const at::Tensor w = sd.at("w");
        if (w.numel() == 4) {
            EXPECT_TRUE(at::equal(w, at::full({4}, 7.0f)));
        } else {
            EXPECT_TRUE(at::equal(w, big)) << "round " << round;
        }
    }
}

// Not a regular file (a FIFO here; /dev/null in use): written in place, never renamed over. A
// symlink: the file it names is replaced and the link stays.
TEST(AtomicWrite, SpecialFilesAreWrittenInPlaceAndSymlinksFollowed) {
    TempDir dir;
    const std::string fifo = dir.file("fifo");
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    std::string got;
    std::thread reader([&] {
        std::ifstream in(fifo, std::ios::binary);
        got.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    });
    varscope::save_safetensors({{"w", at::full({4}, 7.0f)}}, fifo);
    reader.join();
    struct stat st {};
    ASSERT_EQ(::stat(fifo.c_str(), &st), 0);
    EXPECT_TRUE(S_ISFIFO(st.st_mode));
    EXPECT_GT(got.size(), 16u);

    const std::string file = dir.file("a.safetensors"), link = dir.file("link.safetensors");
    varscope::save_safetensors({{"w", at::full({4}, 1.0f)}}, file);
    std::filesystem::create_symlink(file, link);
    varscope::save_safetensors({{"w", at::full({4}, 2.0f)}}, link);
    EXPECT_TRUE(std::filesystem::is_symlink(link));
    EXPECT_TRUE(at::equal(varscope::load_checkpoint(file).at("w"), at::full({4}, 2.0f)));
}

// A full disk (RLIMIT_FSIZE: writes past 4 KiB fail with EFBIG) while a JSON result and a
// safetensors file are replaced: the error names the file and the reason, the previous files
// are whole, no temporary file is left.
TEST(WriteFaults, FullDiskLeavesThePreviousFileAndNoTemporary) {
    TempDir dir;
    const std::string json = dir.file("result.json"), st = dir.file("w.safetensors");
    write_file_atomic(json, "previous\n");
    varscope::save_safetensors({{"w", at::full({4}, 7.0f)}}, st);
    const std::string st_before = read_file(st);
    const auto child = varscope::testing::run_in_child([&](std::string& report) {
        varscope::testing::limit_file_size(4096);
        report += error_of<FileWriteError>(
                      [&] { write_file_atomic(json, std::string(64 << 10, 'x')); }, "no error") +
                  "\n";
        report += error_of<FileWriteError>(
            [&] {
                varscope::save_safetensors({{"w", at::ones({64, 64})}}, st);
            },
            "no error");
        return 0;
    });
    ASSERT_EQ(child.code, 0) << child.report;
    EXPECT_TRUE(contains(child.report, "cannot write '" + json + "' (write): File too large"))
        << child.report;
    EXPECT_TRUE(contains(child.report, "cannot write '" + st + "' (write): File too large"))
        << child.report;
    EXPECT_EQ(read_file(json), "previous\n");
    EXPECT_EQ(read_file(st), st_before);
    EXPECT_EQ(entries(dir.path()), 2u);  // no temporary file
}

// Outputs that cannot be created, for root too: a file where a folder is expected, a folder
// under /proc, a file of /proc (its folder takes no new file).
TEST(WriteFaults, CannotCreateNamesThePathAndTheReason) {
    TempDir dir;
    write_file_atomic(dir.file("plain"), "x");
    const std::string not_a_folder = dir.file("plain/out.json");
    EXPECT_EQ(error_of<FileWriteError>([&] { write_file_atomic(not_a_folder, "{}"); }),
              "cannot write '" + not_a_folder + "': Not a directory");
    EXPECT_EQ(error_of<FileWriteError>([&] {
                  varscope::save_safetensors({{"w", at::ones({2})}}, not_a_folder);
              }),
              "cannot write '" + not_a_folder + "': Not a directory");
    const std::string in_proc = "/proc/varscope-no-such-folder/out.json";
    EXPECT_EQ(error_of<FileWriteError>([&] { write_file_atomic(in_proc, "{}"); }),
              "cannot write '" + in_proc + "': No such file or directory");
    const std::string before = read_file("/proc/version");
    const std::string proc_file =
        error_of<FileWriteError>([&] { write_file_atomic("/proc/version", "x"); }, "no error");
    EXPECT_TRUE(contains(proc_file, "cannot write '/proc/version': ")) << proc_file;
    EXPECT_EQ(read_file("/proc/version"), before);
    EXPECT_EQ(entries(dir.path()), 1u);
}

// A real full filesystem (ENOSPC) and a read-only one (EROFS): a 64 KiB tmpfs in a private
// mount namespace of a child. Skipped (not passed) where unshare or mount is not allowed.
TEST(WriteFaults, SmallAndReadOnlyTmpfs) {
    TempDir dir;
    const std::string mnt = dir.file("small");
    std::filesystem::create_directory(mnt);
    const std::string path = mnt + "/result.json";
    const auto child = varscope::testing::run_in_child([&](std::string& report) {
        std::string why;
        if (!varscope::testing::mount_private_tmpfs(mnt, 64 << 10, why)) {
            report = why;
            return varscope::testing::kFaultUnavailable;
        }
        write_file_atomic(path, "previous\n");
        report += "full: " +
                  error_of<FileWriteError>(
                      [&] { write_file_atomic(path, std::string(256 << 10, 'x')); }, "no error") +
                  "\n";
        report += "safetensors: " +
                  error_of<FileWriteError>(
                      [&] {
                          varscope::save_safetensors({{"w", at::ones({256, 256})}},
                                                     mnt + "/w.safetensors");
                      },
                      "no error") +
                  "\n";
        report +=
            "after full: " + read_file(path) + "entries: " + std::to_string(entries(mnt)) + "\n";
        if (!varscope::testing::remount_read_only(mnt, why)) {
            report = why;
            return varscope::testing::kFaultUnavailable;
        }
        report += "read-only: " +
                  error_of<FileWriteError>([&] { write_file_atomic(path, "new\n"); }, "no error") +
                  "\n";
        report += "after read-only: " + read_file(path);
        return 0;
    });
    if (child.code == varscope::testing::kFaultUnavailable)
        GTEST_SKIP() << "no private tmpfs here: " << child.report;
    ASSERT_EQ(child.code, 0) << child.report;
    EXPECT_TRUE(contains(child.report,
                         "full: cannot write '" + path + "' (write): No space left on device"))
        << child.report;
    EXPECT_TRUE(contains(child.report, "safetensors: cannot write '" + mnt +
                                           "/w.safetensors' (write): No space left on device"))
        << child.report;
    EXPECT_TRUE(contains(child.report, "after full: previous\nentries: 1\n")) << child.report;
    EXPECT_TRUE(
        contains(child.report, "read-only: cannot write '" + path + "': Read-only file system"))
        << child.report;
    EXPECT_TRUE(contains(child.report, "after read-only: previous\n")) << child.report;
}

// The writer in pieces: nothing is visible under the target's name before commit(); a writer
// destroyed without commit() (an exception on the way) removes its temporary file.
TEST(WriteFaults, WriterShowsNothingBeforeCommitAndCleansUpWithout) {
    TempDir dir;
    const std::string path = dir.file("a.csv");
    write_file_atomic(path, "old\n");
    {
        varscope::AtomicFileWriter w(path);
        w.write("new,");
        EXPECT_EQ(read_file(path), "old\n");
        EXPECT_TRUE(std::filesystem::exists(w.temporary_path()));
        EXPECT_EQ(std::filesystem::path(w.temporary_path()).parent_path(), dir.path());
        w.write("row\n");
        w.commit();
        EXPECT_THROW(w.write("late"), FileWriteError);
    }
    EXPECT_EQ(read_file(path), "new,row\n");
    std::string tmp;
    {
        varscope::AtomicFileWriter w(path);
        w.write("abandoned");
        tmp = w.temporary_path();
    }
    EXPECT_FALSE(std::filesystem::exists(tmp));
    EXPECT_EQ(read_file(path), "new,row\n");
    EXPECT_EQ(entries(dir.path()), 1u);
}
