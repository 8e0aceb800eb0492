// `varscope-cli bench eval`: the scoring-overlap throughput bench (issue #34) on the embedded
// emoji VAR with the emoji metrics: every mode timed, the overlapped shards equal to the serial
// ones, nothing written into the manifest's folder; a scratch folder that is the output folder
// is refused (exit 2).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/io/json_read.h"
#include "tests/cli_run.h"
#include "tests/test_util.h"

namespace varscope {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;
using testing::TempDir;

std::string write_manifest(const TempDir& dir, const std::string& out) {
    const nlohmann::json j = {
        {"model", {{"embedded", "var"}}},
        {"classes", {1891, 581}},
        {"seeds", {3, 4}},
        {"batch", 2},
        {"configs", {{"skip2", {{"skip", {{"enabled", true}, {"last_n", 2}}}}}}},
        {"output_dir", out},
        {"metrics", {{"emoji", true}}}};
    const std::string path = dir.file("m.json");
    std::ofstream(path) << j.dump(2);
    return path;
}

TEST(CliBenchEval, TimesEveryModeInAScratchFolder) {
    TempDir dir;
    const std::string out = dir.file("user-out");
    const std::string json = dir.file("bench.json");
    const auto r = run_cli("bench eval " + write_manifest(dir, out) + " --json " + json, "", 600);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("overlapped / generation"), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(out));  // the manifest's folder is not touched
    const auto j = read_json_file(json, "bench json")["throughput"];
    EXPECT_EQ(j["shards"], 2);
    EXPECT_EQ(j["images_per_mode"], 2 * 2 * 2);  // 2 shards of 2 images, 2 configs
    EXPECT_EQ(j["metrics"], nlohmann::json({"psnr", "ssim", "token_agreement", "emoji"}));
    EXPECT_TRUE(j["overlapped_identical"].get<bool>());
    for (const char* mode : {"generation", "serial", "overlapped"})
        EXPECT_GT(j["modes"][mode]["images_per_s"].get<double>(), 0.0) << mode;
}

TEST(CliBenchEval, TheOutputFolderIsNoScratchFolder) {
    TempDir dir;
    const std::string out = dir.file("user-out");
    const auto r = run_cli("bench eval " + write_manifest(dir, out) + " --scratch " + out);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("is the manifest's output_dir"), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace varscope
