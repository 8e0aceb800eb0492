// The CLI as a user meets it: exit codes and messages for bad input.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>

#include "tests/test_util.h"

namespace {

struct Run {
    int code;
    std::string out;
};

Run cli_env(const std::string& env, const std::string& args) {
    std::string cmd = (env.empty() ? "" : "env " + env + " ") + std::string(VARSCOPE_CLI_PATH) + " " + args + " 2>&1";
    Run r{-1, {}};
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return r;
    std::array<char, 4096> buf{};
    while (fgets(buf.data(), buf.size(), p)) r.out += buf.data();
    int status = pclose(p);
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
}

Run cli(const std::string& args) { return cli_env("", args); }

}  // namespace

TEST(Cli, MissingCheckpointIsAClearError) {
    auto r = cli("generate --var /nonexistent/var.pth --vae /nonexistent/vae.pth -o x.ppm");
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("/nonexistent/var.pth"), std::string::npos) << r.out;
}

TEST(Cli, NoModelGiven) {
    varscope::testing::TempDir empty;  // no embedded model there
    auto r = cli_env("VARSCOPE_RESOURCES=" + empty.path().string(), "generate -o x.ppm");
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.out.find("no model"), std::string::npos) << r.out;
}

TEST(Cli, OutOfRangeFlags) {
    EXPECT_NE(cli("generate --random 2 --top-p 3 -o x.ppm").code, 0);
    EXPECT_NE(cli("generate --random 2 --device warp9 -o x.ppm").code, 0);
}

TEST(Cli, TruncatedCheckpointAndGoodRun) {
    varscope::testing::TempDir dir;
    {
        FILE* f = fopen(dir.file("broken.pth").c_str(), "wb");
        fputs("PK\x03\x04truncated", f);
        fclose(f);
    }
    auto bad = cli("info " + dir.file("broken.pth"));
    EXPECT_EQ(bad.code, 2) << bad.out;
    EXPECT_NE(bad.out.find("broken.pth"), std::string::npos) << bad.out;

    const std::string out = dir.file("img.ppm");
    auto good = cli("generate --random 2 --patch-nums 1,2 --class 1 --seed 3 -q -o " + out);
    ASSERT_EQ(good.code, 0) << good.out;
    FILE* f = fopen(out.c_str(), "rb");
    ASSERT_NE(f, nullptr);
    char magic[3] = {};
    EXPECT_EQ(fread(magic, 1, 2, f), 2u);
    fclose(f);
    EXPECT_STREQ(magic, "P6");
    // Refuses to overwrite without --force, keeping the existing file.
    auto again = cli("generate --random 2 --patch-nums 1,2 --class 1 -q -o " + out);
    EXPECT_EQ(again.code, 2);
    EXPECT_NE(again.out.find("--force"), std::string::npos) << again.out;
    auto fmt = cli("generate --random 2 --patch-nums 1,2 -q -o " + dir.file("img.gif"));
    EXPECT_NE(fmt.out.find("unsupported image format"), std::string::npos) << fmt.out;
}

TEST(Cli, EmbeddedModelGeneratesFromAPrompt) {
    varscope::testing::TempDir dir;
    const std::string out = dir.file("heart.ppm");
    auto r = cli("generate --prompt \"red heart\" --seed 1 --cfg 3 -q -o " + out);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("[1891] HEAVY BLACK HEART"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("(class 1891)"), std::string::npos) << r.out;
}
