// generate-mar and compare-mar as a user meets them (the real varscope-cli binary, as
// cli_test.cpp): the embedded emoji MAR with its recommendation in both commands, the MAR flags
// (--no-cuda-graphs, --head-cfg-period) and one clear error line with a non-zero exit for bad
// input. Small settings keep each test to a few seconds on a 2-core CPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tests/cli_image_ext.h"
#include "tests/cli_run.h"
#include "tests/test_util.h"

namespace {

using varscope::testing::cli_image_ext;
using varscope::testing::CliRun;

CliRun cli(const std::string& args) {
    return varscope::testing::run_cli(args);
}

bool contains(const std::string& s, const std::string& part) {
    return s.find(part) != std::string::npos;
}

// Lines of `out` that start with `prefix`.
int lines_starting(const std::string& out, const std::string& prefix) {
    std::istringstream in(out);
    int n = 0;
    for (std::string line; std::getline(in, line);) n += line.rfind(prefix, 0) == 0 ? 1 : 0;
    return n;
}

// A failed run: exited (no crash) non-zero, with exactly one line starting `first` that
// contains `text`, and without sampling anything first.
void expect_clear_error(const CliRun& r, const std::string& first, const std::string& text) {
    EXPECT_GT(r.code, 0) << r.out;
    EXPECT_EQ(lines_starting(r.out, first), 1) << r.out;
    EXPECT_TRUE(contains(r.out, text)) << "expected '" << text << "' in:\n" << r.out;
    EXPECT_FALSE(contains(r.out, "run 1/")) << r.out;
    EXPECT_FALSE(contains(r.out, "terminate called")) << r.out;
}

nlohmann::json read_json(const std::string& path) {
    std::ifstream f(path);
    if (!f) return nullptr;
    return nlohmann::json::parse(f);
}

std::string models_dir() {
    return varscope::testing::source_dir() + "/resources/models";
}

}  // namespace

TEST(CliMar, CompareMarUsesTheEmbeddedModelPromptAndHeadCache) {
    varscope::testing::TempDir dir;
    const std::string out = dir.file("cmp");
    // 8 steps: LazyMAR's schedule has cached steps; the head cache every 3rd diffusion step.
    auto r =
        cli("compare-mar --accel lazymar --prompt \"red heart\" --seed 1 --num-iter 8 "
            "--num-sampling-steps 20 --head-cfg-period 3 --no-cuda-graphs -o " +
            out);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_TRUE(contains(r.out, "embedded emoji MAR")) << r.out;
    EXPECT_TRUE(contains(r.out, "[1891] HEAVY BLACK HEART")) << r.out;
    // --num-iter and --num-sampling-steps were given: the recommendation fills the rest only.
    EXPECT_TRUE(contains(
        r.out, "using the model's recommended cfg 3, linear cfg schedule, temperature 1 ("))
        << r.out;
    EXPECT_TRUE(contains(r.out, "head condition cache every 3 diffusion steps")) << r.out;
    const std::string ext = cli_image_ext();
    for (const std::string& f :
         {"baseline" + ext, "accelerated" + ext, "diff" + ext, std::string("tokens.safetensors")})
        EXPECT_TRUE(std::filesystem::exists(out + "/" + f)) << f << "\n" << r.out;
    const auto j = read_json(out + "/metrics.json");
    ASSERT_TRUE(j.is_object()) << r.out;
    EXPECT_EQ(j["metrics_on"], "image");
    EXPECT_EQ(j["labels"], nlohmann::json::array({1891}));
    EXPECT_EQ(j["num_iter"], 8);
    EXPECT_DOUBLE_EQ(j["cfg"].get<double>(), 3.0);
    EXPECT_EQ(j["cfg_schedule"], "linear");
    EXPECT_EQ(j["diffusion_steps"], 20);
    EXPECT_EQ(j["head_cfg_cache_period"], 3);
    EXPECT_EQ(j["accel"]["lazymar"]["head_cfg_period"], 3);
    EXPECT_EQ(j["cuda_graphs"], false);
    EXPECT_EQ(j["baseline"]["cuda_graphs"], false);
    EXPECT_EQ(j["accelerated"]["cuda_graphs"], false);
    EXPECT_EQ(j["warmup_runs"], 0);
    ASSERT_EQ(j["psnr_db"].size(), 1u);
    ASSERT_TRUE(j["psnr_db"][0].is_number()) << j["psnr_db"];  // the caches change the image
    EXPECT_GT(j["psnr_db"][0].get<double>(), 5.0);
    EXPECT_LT(j["ssim"][0].get<double>(), 1.0);
    // Fewer FLOPs on the accelerated side, the head's share included.
    EXPECT_GT(j["flops_ratio"].get<double>(), 1.0);
    EXPECT_LT(j["accelerated"]["flops"]["diffusion"].get<double>(),
              j["baseline"]["flops"]["diffusion"].get<double>());
    // A second run refuses to overwrite, before sampling.
    auto again = cli("compare-mar --accel lazymar --class 1891 --num-iter 2 -o " + out);
    expect_clear_error(again, "error:", "--force");
}

TEST(CliMar, CompareMarWithLazyMarOffIsIdentical) {
    varscope::testing::TempDir dir;
    const std::string out = dir.file("cmp");
    auto r =
        cli("compare-mar --accel baseline --class 1891 --seed 2 --num-iter 4 --num-sampling-steps "
            "10 -o " +
            out);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_TRUE(contains(r.out, "PSNR inf dB, SSIM 1.0000")) << r.out;
    const auto j = read_json(out + "/metrics.json");
    ASSERT_TRUE(j.is_object()) << r.out;
    EXPECT_EQ(j["accel_summary"], "baseline");
    EXPECT_TRUE(j["psnr_db"][0].is_null()) << j["psnr_db"];  // inf: identical images
    EXPECT_DOUBLE_EQ(j["ssim"][0].get<double>(), 1.0);
    EXPECT_DOUBLE_EQ(j["latent_relative_l2"].get<double>(), 0.0);
    EXPECT_DOUBLE_EQ(j["flops_ratio"].get<double>(), 1.0);
    EXPECT_EQ(j["head_cfg_cache_period"], 0);
    EXPECT_TRUE(std::filesystem::exists(out + "/baseline" + cli_image_ext())) << r.out;
}

TEST(CliMar, HeadPeriodFromTheAccelConfigAndTheFlag) {
    varscope::testing::TempDir dir;
    // The accel JSON's value is read; the flag replaces it and says so.
    auto flag =
        cli("compare-mar --accel '{\"lazymar\": {\"head_cfg_period\": 4}}' --head-cfg-period 2 "
            "--class 5 --num-iter 2 --num-sampling-steps 8 -o " +
            dir.file("b"));
    ASSERT_EQ(flag.code, 0) << flag.out;
    EXPECT_TRUE(
        contains(flag.out,
                 "--head-cfg-period 2 replaces the accelerator config's lazymar.head_cfg_period 4"))
        << flag.out;
    EXPECT_EQ(read_json(dir.file("b") + "/metrics.json")["head_cfg_cache_period"], 2);
    // The accel JSON keeps its own range check.
    auto bad = cli(
        "compare-mar --accel '{\"lazymar\": {\"head_cfg_period\": -1}}' --class 5 --num-iter 2");
    expect_clear_error(bad, "error:", "lazymar.head_cfg_period");
}

TEST(CliMar, GenerateMarTakesGraphAndHeadCacheFlags) {
    varscope::testing::TempDir dir;
    const std::string timings = dir.file("t.json");
    // The head cache is LazyMAR's (a hook of its condition cache): --accel names it.
    auto r =
        cli("generate-mar --class 1891 --num-iter 2 --num-sampling-steps 6 --no-cuda-graphs "
            "--accel lazymar-condition --head-cfg-period 2 -q --timings-json " +
            timings);
    ASSERT_EQ(r.code, 0) << r.out;
    const auto j = read_json(timings);
    ASSERT_TRUE(j.is_object()) << r.out;
    EXPECT_EQ(j["head_cfg_cache_period"], 2);
    EXPECT_EQ(j["cuda_graphs"], false);
    EXPECT_EQ(j["num_sampling_steps"], "6");
    EXPECT_DOUBLE_EQ(j["cfg"].get<double>(), 3.0);  // the recommendation
}

// One generate for every family (core's Runner): the family is read from the checkpoint, the
// aliases say what they are, and a family's own settings are refused on another family's model.
TEST(CliMar, GenerateReadsTheFamilyFromTheCheckpoint) {
    varscope::testing::TempDir dir;
    const std::string mar = models_dir() + "/emoji-mar.safetensors";
    const std::string vae = models_dir() + "/emoji-klvae.safetensors";
    // Named with --var, the file's tensors still make it a MAR model.
    auto r = cli("generate --var " + mar + " --vae " + vae +
                 " --class 1891 --num-iter 2 "
                 "--num-sampling-steps 5 -q --tokens-out " +
                 dir.file("t.safetensors"));
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_TRUE(contains(r.out, "MAR: encoder")) << r.out;
    EXPECT_TRUE(std::filesystem::exists(dir.file("t.safetensors")));
    // --family mar picks the embedded MAR; the alias prints its notice.
    auto fam =
        cli("generate --family mar --class 1891 --num-iter 2 --num-sampling-steps 5 -q "
            "--timings-json " +
            dir.file("f.json"));
    ASSERT_EQ(fam.code, 0) << fam.out;
    EXPECT_EQ(read_json(dir.file("f.json"))["family"], "mar");
    auto alias =
        cli("generate-mar --class 1891 --num-iter 2 --num-sampling-steps 5 -q "
            "--timings-json " +
            dir.file("a.json"));
    ASSERT_EQ(alias.code, 0) << alias.out;
    EXPECT_TRUE(contains(alias.out, "generate-mar is an alias of `generate`")) << alias.out;
    // A VAR setting on the MAR model, a MAR setting on the VAR model: refused before sampling.
    expect_clear_error(
        cli("generate --family mar --top-k 5 --num-iter 2 -o " + dir.file("x" + cli_image_ext())),
        "error:", "--top-k is a VAR/Infinity setting; the model is MAR");
    expect_clear_error(
        cli("generate --family var --num-iter 4 -o " + dir.file("y" + cli_image_ext())),
        "error:", "--num-iter is a MAR setting; the model is VAR");
    // An accelerator config of the other family fails before the model loads.
    expect_clear_error(cli("compare --family mar --accel fastvar -o " + dir.file("c")),
                       "error:", "--accel");
}

// CLI11 parse errors: the flag's line first (then CLI11's "Run with --help" hint).
TEST(CliMar, GenerateMarRejectsOutOfRangeFlags) {
    const std::string g = "generate-mar -o x.png";
    expect_clear_error(cli(g + " --head-cfg-period 1001"),
                       "--head-cfg-period:", "must be in [0, 1000]");
    expect_clear_error(cli(g + " --head-cfg-period 2.5"), "--head-cfg-period:", "whole number");
    expect_clear_error(cli(g + " --num-iter 0"), "--num-iter:", "not in range 1 to 4096");
    expect_clear_error(cli(g + " --cfg -1"), "--cfg:", "not in range");
    expect_clear_error(cli(g + " --cfg-schedule cosine"),
                       "--cfg-schedule:", "cosine not in {linear,constant}");
}

TEST(CliMar, CompareMarRejectsOutOfRangeFlags) {
    const std::string c = "compare-mar --accel lazymar";
    expect_clear_error(cli(c + " --head-cfg-period -1"), "--head-cfg-period:", "got -1");
    expect_clear_error(cli(c + " --num-iter 0"), "--num-iter:", "not in range 1 to 4096");
    expect_clear_error(cli(c + " --cfg -0.5"), "--cfg:", "not in range");
    expect_clear_error(cli(c + " --cfg-schedule cosine"),
                       "--cfg-schedule:", "cosine not in {linear,constant}");
    // The head cache belongs to LazyMAR's condition cache: not on the baseline side.
    expect_clear_error(cli("compare-mar --accel baseline --head-cfg-period 3 --num-iter 2"),
                       "error:", "pass --accel lazymar or lazymar-condition");
}

// Nonexistent, garbage and swapped model files.
static void expect_bad_model_files_rejected(const std::string& cmd) {
    varscope::testing::TempDir dir;
    const std::string garbage = dir.file("garbage.safetensors");
    std::ofstream(garbage) << "not a model";
    expect_clear_error(cli(cmd + " --mar /nonexistent/mar.safetensors"),
                       "--mar:", "/nonexistent/mar.safetensors");
    expect_clear_error(cli(cmd + " --vae /nonexistent/vae.ckpt"),
                       "--vae:", "/nonexistent/vae.ckpt");
    expect_clear_error(cli(cmd + " --mar " + garbage), "error:", "garbage.safetensors");
    expect_clear_error(cli(cmd + " --vae " + garbage), "error:", "garbage.safetensors");
    // Swapped: each names what the file holds.
    expect_clear_error(cli(cmd + " --mar " + models_dir() + "/emoji-klvae.safetensors"),
                       "error:", "no MAR weights found");
}

TEST(CliMar, GenerateMarRejectsBadModelFiles) {
    varscope::testing::TempDir dir;
    expect_bad_model_files_rejected("generate-mar --num-iter 2 -o " +
                                    dir.file("x" + cli_image_ext()));
}

TEST(CliMar, CompareMarRejectsBadModelFiles) {
    expect_bad_model_files_rejected("compare-mar --accel lazymar --num-iter 2");
    expect_clear_error(cli("compare-mar --accel lazymar --num-iter 2 --vae " + models_dir() +
                           "/emoji-mar.safetensors"),
                       "error:", "not a KL VAE checkpoint");
}

TEST(CliMar, GenerateMarUnwritableOutputsFailBeforeSampling) {
    varscope::testing::TempDir dir;
    const std::string file = dir.file("plain" + cli_image_ext());
    std::ofstream(file) << "x";
    const std::string g = "generate-mar --num-iter 2 ";
    expect_clear_error(cli(g + "-o " + dir.file("missing/x" + cli_image_ext())),
                       "error:", "output folder");
    expect_clear_error(cli(g + "-o " + file + "/x" + cli_image_ext()), "error:", "is not a folder");
    expect_clear_error(cli(g + "-o " + dir.file("x.gif")),
                       "error:", "unsupported image format '.gif'");
    expect_clear_error(cli(g + "-o " + file), "error:", "pass --force");
    expect_clear_error(cli(g + "--timings-json " + dir.file("missing/t.json")),
                       "error:", "--timings-json");
    expect_clear_error(cli(g + "--tokens-out " + dir.path().string()), "error:", "is a folder");
}

TEST(CliMar, CompareMarUnwritableOutputFailsBeforeSampling) {
    varscope::testing::TempDir dir;
    const std::string file = dir.file("plain.txt");
    std::ofstream(file) << "x";
    const std::string c = "compare-mar --accel lazymar --num-iter 2 ";
    expect_clear_error(cli(c + "-o " + file), "error:", "exists and is not a folder");
    expect_clear_error(cli(c + "-o " + file + "/sub"), "error:", "cannot create the folder");
}
