// The eval job with "overlap_scoring" (issue #34; core/eval/scoring_queue.h) on a small random
// VAR and a tiny random emoji network on the CPU: the same shard files and result as scored
// inline, a restart resumes, a failing scorer is the shard's error; the throughput bench
// (core/eval/eval_throughput.h) and the manifest's random weights.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/eval/eval_job.h"
#include "core/eval/eval_throughput.h"
#include "core/io/checkpoint.h"
#include "core/io/json_read.h"
#include "core/io/module_binding.h"
#include "tests/error_of.h"
#include "tests/eval_test_util.h"
#include "tests/test_util.h"
#include "tests/tiny_models.h"

namespace varscope {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::eval_quality;
using testing::TempDir;

// A tiny random emoji network of 10 classes with reference statistics.
std::string tiny_emoji_network(const TempDir& dir) {
    EmojiFeatureConfig c;
    c.channels = {8, 16};
    c.groups = 4;
    c.num_classes = 10;
    torch::manual_seed(11);
    EmojiFeatureNet net(c);
    StateDict sd = module_state_dict(*net);
    sd[kEmojiReferenceMu] = at::zeros({16}, at::kDouble);
    sd[kEmojiReferenceSigma] = at::eye(16, at::kDouble).mul(0.01);
    const std::string path = dir.file("emoji.safetensors");
    save_safetensors(
        sd, path, {{"varscope.kind", kEmojiFeaturesKind}, {"varscope.config", c.to_json().dump()}});
    return path;
}

// 3 classes x 2 seeds in batches of 2, 2 calls per shard: 2 shards, every metric.
EvalManifest manifest(const TempDir& dir, const std::string& out, bool overlap) {
    EvalManifest m;
    m.classes = {1, 2, -1};
    m.seeds = {5, 6};
    m.batch = 2;
    m.batches_per_shard = 2;
    m.sampling = {{"cfg", 2.0}};
    m.configs = {{"skip1", {{"skip", {{"enabled", true}, {"last_n", 1}}}}},
                 {"off", {{"skip", {{"enabled", false}}}}}};
    m.output_dir = dir.file(out);
    m.warmup = false;
    m.save_images = true;
    m.metrics.emoji = tiny_emoji_network(dir);
    m.overlap_scoring = overlap;
    return m;
}

std::string file_text(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
}

// What a result holds besides timings: per config its images and every quality number.
nlohmann::json result_quality(const nlohmann::json& result) {
    nlohmann::json q = eval_quality(result);
    for (size_t i = 0; i < q.size(); ++i) q[i]["quality"] = result["configs"][i]["quality"];
    return q;
}

TEST(EvalOverlap, OverlapOnAndOffGiveTheSameShardFilesAndResult) {
    TempDir dir;
    auto runner = var_runner(testing::small_pipeline(7));
    const auto serial = run_eval_job(manifest(dir, "serial", false), *runner, {});
    const auto overlapped = run_eval_job(manifest(dir, "overlapped", true), *runner, {});
    EXPECT_EQ(overlapped.computed, 2);
    const auto a = manifest(dir, "serial", false), b = manifest(dir, "overlapped", true);
    // Overlap is how the job runs, not what it computes: the same fingerprint.
    EXPECT_EQ(manifest_fingerprint(a), manifest_fingerprint(b));
    const std::string fp = manifest_fingerprint(a);
    for (int64_t i = 0; i < 2; ++i) {
        const auto sa = read_shard_result(shard_path(a.output_dir, i), i, fp);
        const auto sb = read_shard_result(shard_path(b.output_dir, i), i, fp);
        ASSERT_TRUE(sa && sb) << i;
        EXPECT_FALSE((*sa)["images"].empty());
        EXPECT_TRUE(sa->contains("emoji_features"));
        EXPECT_EQ(shard_outcome(*sa), shard_outcome(*sb)) << "shard " << i;
        char name[40];
        std::snprintf(name, sizeof name, "images/shard-%05lld.safetensors",
                      static_cast<long long>(i));
        EXPECT_EQ(file_text(fs::path(a.output_dir) / name),
                  file_text(fs::path(b.output_dir) / name))
            << name;
    }
    EXPECT_EQ(result_quality(serial.result), result_quality(overlapped.result));
    EXPECT_TRUE(serial.result["configs"][1]["quality"]["emoji"]["fid"]["baseline"].is_number());
    EXPECT_EQ(file_text(fs::path(a.output_dir) / "images.csv"),
              file_text(fs::path(b.output_dir) / "images.csv"));
}

TEST(EvalOverlap, ARestartWithOverlapResumesToTheSameResult) {
    TempDir dir;
    auto runner = var_runner(testing::small_pipeline(7));
    const auto m = manifest(dir, "out", true);
    const auto first = run_eval_job(m, *runner, {});
    fs::remove(shard_path(m.output_dir, 1));
    const auto second = run_eval_job(m, *runner, {});
    EXPECT_EQ(second.computed, 1);
    EXPECT_EQ(second.resumed, 1);
    EXPECT_EQ(result_quality(second.result), result_quality(first.result));
}

TEST(EvalOverlap, AFailingScorerIsTheShardsErrorInBothModes) {
    TempDir dir;
    auto runner = var_runner(testing::small_pipeline(7));
    const auto m = manifest(dir, "out", true);
    const auto plans = eval_plans(m, *runner);
    const auto settings = eval_settings(m, *runner);
    const auto shards = plan_shards(m);
    EvalScorers scorers = load_eval_scorers(m, *runner);
    ASSERT_TRUE(scorers.emoji.has_value());
    scorers.emoji_targets.clear();  // the emoji scorer's lookup of a condition's class throws
    for (ShardScoring mode : {ShardScoring::Inline, ShardScoring::Overlapped}) {
        EXPECT_THROW(run_shard(m, *runner, plans, settings, shards[0], "f", scorers, mode),
                     std::out_of_range);
    }
    // Generation alone does not score: it runs.
    const auto gen =
        run_shard(m, *runner, plans, settings, shards[0], "f", scorers, ShardScoring::Off);
    EXPECT_TRUE(gen["images"].empty());
    EXPECT_FALSE(gen.contains("features"));
    EXPECT_EQ(gen["timing"]["skip1"]["calls"].size(), 2u);
}

TEST(EvalOverlap, TheThroughputBenchRunsEveryModeIntoItsScratchFolder) {
    TempDir dir;
    auto runner = var_runner(testing::small_pipeline(7));
    auto m = manifest(dir, "user-out", false);
    m.metrics.emoji.clear();
    EvalThroughputOptions o;
    o.scratch_dir = dir.file("scratch");
    o.max_shards = 1;
    int lines = 0;
    o.log = [&](const std::string&) { ++lines; };
    const auto files = use_stand_in_metrics(m, *runner, dir.file("stand-ins"));
    ASSERT_EQ(files.size(), 2u);
    m.metrics.inception.clear();  // the Inception costs ~6 GFLOP per image: too slow here
    const auto j = measure_eval_throughput(m, *runner, o);
    EXPECT_FALSE(fs::exists(m.output_dir));  // never the manifest's folder
    EXPECT_TRUE(fs::exists(shard_path(o.scratch_dir, 0)));
    EXPECT_EQ(j["shards"], 1);
    // Shard 0: seed 5's classes in calls of 2 and 1 images, under 3 configs.
    EXPECT_EQ(plan_shards(m).front().images(), 3);
    EXPECT_EQ(j["images_per_mode"], 3 * 3);
    EXPECT_EQ(j["metrics"], nlohmann::json({"psnr", "ssim", "token_agreement", "emoji"}));
    for (const char* mode : {"generation", "serial", "overlapped"}) {
        EXPECT_GT(j["modes"][mode]["seconds"].get<double>(), 0.0) << mode;
        EXPECT_GT(j["modes"][mode]["images_per_s"].get<double>(), 0.0) << mode;
    }
    const double r = j["ratios"]["serial_over_generation"].get<double>();
    EXPECT_NEAR(r,
                j["modes"]["generation"]["seconds"].get<double>() /
                    j["modes"]["serial"]["seconds"].get<double>(),
                1e-12);
    EXPECT_TRUE(j["overlapped_identical"].get<bool>());
    EXPECT_EQ(lines, 2);  // warm-up, one shard
    // The stand-in emoji network knows the model's classes (so the job accepts it).
    EXPECT_EQ(EmojiFeatureNetwork::load(files[1]).config().num_classes, 10);
    EXPECT_NO_THROW(FidInception::load(files[0]));
}

TEST(EvalOverlap, AManifestNamesRandomWeightsAndOverlap) {
    TempDir dir;
    nlohmann::json j = {{"model", {{"random", 2}, {"init_seed", 3}}},
                        {"classes", {1}},
                        {"seeds", {0}},
                        {"configs", {{"a", nlohmann::json::object()}}},
                        {"output_dir", "out"},
                        {"overlap_scoring", true}};
    const auto m = parse_manifest(j, "'m.json'", dir.path().string());
    EXPECT_EQ(m.random_depth, 2);
    EXPECT_EQ(m.init_seed, 3u);
    EXPECT_TRUE(m.overlap_scoring);
    EXPECT_EQ(m.work_json()["model"]["random"], nlohmann::json({{"depth", 2}, {"init_seed", 3}}));
    auto k = j;
    k["overlap_scoring"] = false;
    k["model"]["init_seed"] = 4;
    EXPECT_NE(manifest_fingerprint(parse_manifest(k, "'m.json'", "")), manifest_fingerprint(m));
    k["model"]["init_seed"] = 3;
    EXPECT_EQ(manifest_fingerprint(parse_manifest(k, "'m.json'", "")), manifest_fingerprint(m));
    auto error = [&](const nlohmann::json& model, const char* key = "model") {
        auto x = j;
        x[key] = model;
        return error_of<ManifestError>([&] { parse_manifest(x, "'m.json'", ""); });
    };
    EXPECT_NE(error({{"random", 0}}).find("model.random: expected a VAR depth"), std::string::npos);
    EXPECT_NE(error({{"random", "mar_base"}}).find("model.random"), std::string::npos);
    EXPECT_NE(error({{"random", 30}, {"embedded", "var"}}).find("name one of"), std::string::npos);
    EXPECT_NE(error({{"random", 30}, {"family", "var"}}).find("model.family"), std::string::npos);
    EXPECT_NE(error({{"embedded", "var"}, {"init_seed", 1}}).find("model.init_seed"),
              std::string::npos);
    EXPECT_NE(error({{"random", 30}, {"init_seed", -1}}).find("model.init_seed"),
              std::string::npos);
    EXPECT_NE(error("yes", "overlap_scoring").find("overlap_scoring: expected true or false"),
              std::string::npos);
}

TEST(EvalOverlap, RandomWeightsOpenAsTheVarOfThatDepth) {
    EvalManifest m;
    m.random_depth = 1;  // the smallest: the VQVAE (official architecture) dominates the cost
    LoadOptions lo;
    const auto runner = open_eval_runner(m, lo);
    EXPECT_EQ(runner->family(), Family::Var);
    EXPECT_EQ(runner->shape().num_classes, 1000);
    EXPECT_EQ(runner->shape().image_size, 256);
}

}  // namespace
}  // namespace varscope
