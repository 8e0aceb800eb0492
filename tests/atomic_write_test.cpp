// Killed while writing (issue #36): save_safetensors writes a temporary file in the same folder
// and renames it over the target, so a process killed with SIGKILL at any point leaves either
// the previous file or the new one whole, never a truncated file.
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

#include "core/io/checkpoint.h"
#include "tests/test_util.h"

using varscope::testing::TempDir;

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
