// core/eval/shards.h: the work list's deterministic shards, shard files, atomic writes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "core/eval/shards.h"
#include "tests/error_of.h"
#include "tests/test_util.h"

namespace varscope {
namespace {

using testing::error_of;
using testing::TempDir;

EvalManifest manifest(int64_t classes, std::vector<uint64_t> seeds, int64_t batch, int64_t per) {
    EvalManifest m;
    for (int64_t c = 0; c < classes; ++c) m.classes.push_back(100 + c);
    m.seeds = std::move(seeds);
    m.batch = batch;
    m.batches_per_shard = per;
    m.configs = {{"a", {{"scale_skip", {{"enabled", true}}}}}};
    return m;
}

nlohmann::json shard_json(int64_t index, const std::string& fingerprint) {
    return {{"fingerprint", fingerprint},
            {"shard", index},
            {"images",
             {{{"config", "a"},
               {"seed", 1},
               {"condition", 0},
               {"psnr_db", 30.0},
               {"ssim", 0.9},
               {"token_agreement", nullptr}}}},
            {"timing",
             {{"baseline",
               {{"calls", {{{"images", 1}, {"millis", 2.0}}}}, {"peak_memory_bytes", nullptr}}}}}};
}

TEST(EvalShards, UnitsAreSeedMajorBatchesAndShardsAreRunsOfThem) {
    const auto shards = plan_shards(manifest(3, {7, 8}, 2, 3));
    // Units: (7: 0 1) (7: 2) (8: 0 1) (8: 2); shards of 3 units.
    ASSERT_EQ(shards.size(), 2u);
    ASSERT_EQ(shards[0].units.size(), 3u);
    EXPECT_EQ(shards[0].units[0].seed, 7u);
    EXPECT_EQ(shards[0].units[0].conditions, (std::vector<int64_t>{0, 1}));
    EXPECT_EQ(shards[0].units[1].conditions, (std::vector<int64_t>{2}));
    EXPECT_EQ(shards[0].units[2].seed, 8u);
    EXPECT_EQ(shards[0].images(), 5);
    ASSERT_EQ(shards[1].units.size(), 1u);
    EXPECT_EQ(shards[1].units[0].seed, 8u);
    EXPECT_EQ(shards[1].units[0].conditions, (std::vector<int64_t>{2}));
    EXPECT_EQ(shards[1].index, 1);
    // Every (seed, condition) exactly once.
    std::set<std::pair<uint64_t, int64_t>> seen;
    for (const auto& s : shards)
        for (const auto& u : s.units)
            for (int64_t c : u.conditions) EXPECT_TRUE(seen.insert({u.seed, c}).second);
    EXPECT_EQ(seen.size(), 6u);
}

TEST(EvalShards, ARankRunsShardsOfOneBatchShapeTogether) {
    // 5 conditions in batches of 2, 3 seeds, one unit a shard: sizes 2 2 1 | 2 2 1 | 2 2 1.
    const auto shards = plan_shards(manifest(5, {1, 2, 3}, 2, 1));
    ASSERT_EQ(shards.size(), 9u);
    EXPECT_EQ(in_shape_order(shards_of_rank(9, 0, 1), shards),
              (std::vector<int64_t>{0, 1, 3, 4, 6, 7, 2, 5, 8}));
    EXPECT_EQ(in_shape_order(shards_of_rank(9, 0, 2), shards),
              (std::vector<int64_t>{0, 4, 6, 2, 8}));
    EXPECT_EQ(in_shape_order(shards_of_rank(9, 1, 2), shards), (std::vector<int64_t>{1, 3, 7, 5}));
    // Shards of several units: by their units' sizes, the whole run first; a shorter last shard
    // after the longer ones.
    const auto runs = plan_shards(manifest(5, {1, 2, 3}, 2, 2));  // (2 2) (1 2) (2 1) (2 2) (1)
    ASSERT_EQ(runs.size(), 5u);
    EXPECT_EQ(in_shape_order({0, 1, 2, 3, 4}, runs), (std::vector<int64_t>{0, 3, 2, 1, 4}));
}

TEST(EvalShards, TheOutcomeOfAShardLeavesOutItsTimingAndRunConditions) {
    nlohmann::json a = shard_json(3, "f"), b = shard_json(3, "f");
    b["timing"]["baseline"]["calls"][0]["millis"] = 7.0;
    b["graph_releases"] = 1;
    b["graph_captures"] = 2;
    EXPECT_NE(a, b);
    EXPECT_EQ(shard_outcome(a), shard_outcome(b));
    EXPECT_FALSE(shard_outcome(b).contains("graph_captures"));
    EXPECT_EQ(shard_outcome(b)["images"], a["images"]);  // what the images scored stays
    b["images"][0]["psnr_db"] = 31.0;
    EXPECT_NE(shard_outcome(a), shard_outcome(b));
}

TEST(EvalShards, RanksTakeEveryShardOnce) {
    for (int world : {1, 2, 3, 5}) {
        std::vector<int> count(11, 0);
        for (int r = 0; r < world; ++r)
            for (int64_t s : shards_of_rank(11, r, world)) {
                EXPECT_EQ(s % world, r);
                ++count[s];
            }
        for (int c : count) EXPECT_EQ(c, 1) << "world " << world;
    }
}

TEST(EvalShards, FingerprintFollowsTheWork) {
    EvalManifest a = manifest(2, {1}, 1, 1), b = a;
    b.output_dir = "elsewhere";
    b.rank_timeout_s = 5;
    EXPECT_EQ(manifest_fingerprint(a), manifest_fingerprint(b));
    EXPECT_EQ(manifest_fingerprint(a).size(), 16u);
    b.seeds = {2};
    EXPECT_NE(manifest_fingerprint(a), manifest_fingerprint(b));
    b = a;
    b.configs[0].accel = {{"scale_skip", {{"enabled", false}}}};
    EXPECT_NE(manifest_fingerprint(a), manifest_fingerprint(b));
}

TEST(EvalShards, AtomicWriteReplacesWholeAndNamesTheFileOnFailure) {
    TempDir dir;
    const std::string path = dir.file("x.json");
    write_file_atomic(path, "first");
    write_file_atomic(path, "second");
    std::ifstream f(path);
    std::string text((std::istreambuf_iterator<char>(f)), {});
    EXPECT_EQ(text, "second");
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);  // no tmp
    const std::string missing = dir.file("no/such/dir/x.json");
    EXPECT_NE(error_of<std::runtime_error>([&] { write_file_atomic(missing, "x"); }).find(missing),
              std::string::npos);
    // A folder it may not write to (as root every folder is writable: not checked then).
    if (::geteuid() != 0) {
        const auto ro = dir.path() / "ro";
        std::filesystem::create_directory(ro);
        ::chmod(ro.c_str(), 0555);
        EXPECT_NE(error_of<std::runtime_error>([&] {
                      write_file_atomic((ro / "x.json").string(), "x");
                  }).find("cannot write"),
                  std::string::npos);
        ::chmod(ro.c_str(), 0755);
    }
}

// Killed while writing a shard (issue #36): a child rewrites a ~2 MB shard file in a loop and is
// SIGKILLed at random points; the file is always the previous shard or the new one, whole, and
// a restart uses it (read_shard_result accepts it) instead of finding a damaged file.
TEST(EvalShards, ShardKilledMidWriteIsTheOldOrTheNewShardWhole) {
    TempDir dir;
    std::filesystem::create_directories(dir.path() / "shards");
    const std::string path = shard_path(dir.path().string(), 3);
    nlohmann::json big = shard_json(3, "f");
    const nlohmann::json image = big["images"][0];
    for (int i = 1; i < 20000; ++i) big["images"].push_back(image);
    const std::string big_text = big.dump() + "\n";
    write_file_atomic(path, shard_json(3, "f").dump() + "\n");
    std::mt19937 rng(36);
    for (int round = 0; round < 6; ++round) {
        const pid_t child = ::fork();
        ASSERT_GE(child, 0);
        if (child == 0) {
            for (;;) write_file_atomic(path, big_text);
        }
        ::usleep(20000 + rng() % 150000);
        ASSERT_EQ(::kill(child, SIGKILL), 0);
        int status = 0;
        ASSERT_EQ(::waitpid(child, &status, 0), child);
        ASSERT_TRUE(WIFSIGNALED(status));
        std::optional<nlohmann::json> got;
        ASSERT_NO_THROW(got = read_shard_result(path, 3, "f")) << "round " << round;
        ASSERT_TRUE(got.has_value());
        const size_t n = got->at("images").size();
        EXPECT_TRUE(n == 1 || n == big["images"].size()) << "round " << round << ": " << n;
    }
}

TEST(EvalShards, ShardFilesAreCheckedBeforeUse) {
    TempDir dir;
    const std::string path = shard_path(dir.path().string(), 3);
    EXPECT_EQ(std::filesystem::path(path).filename(), "shard-00003.json");
    EXPECT_FALSE(read_shard_result(path, 3, "f").has_value());  // not there: to compute
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    write_file_atomic(path, shard_json(3, "f").dump());
    ASSERT_TRUE(read_shard_result(path, 3, "f").has_value());
    // Another manifest's, another shard's, damaged, malformed entries: named errors.
    EXPECT_NE(error_of<ShardFileError>([&] {
                  read_shard_result(path, 3, "g");
              }).find("made by another manifest"),
              std::string::npos);
    EXPECT_NE(error_of<ShardFileError>([&] {
                  read_shard_result(path, 4, "f");
              }).find("holds shard 3, expected 4"),
              std::string::npos);
    write_file_atomic(path, shard_json(3, "f").dump().substr(0, 40));
    const std::string damaged = error_of<ShardFileError>([&] { read_shard_result(path, 3, "f"); });
    EXPECT_NE(damaged.find(path), std::string::npos) << damaged;
    EXPECT_NE(damaged.find("delete it"), std::string::npos) << damaged;
    auto bad = shard_json(3, "f");
    bad["images"][0]["ssim"] = "high";
    write_file_atomic(path, bad.dump());
    EXPECT_NE(error_of<ShardFileError>([&] {
                  read_shard_result(path, 3, "f");
              }).find("image entry is malformed"),
              std::string::npos);
    bad = shard_json(3, "f");
    bad["timing"]["baseline"]["calls"][0].erase("millis");
    write_file_atomic(path, bad.dump());
    EXPECT_NE(error_of<ShardFileError>([&] {
                  read_shard_result(path, 3, "f");
              }).find("timing of 'baseline' is malformed"),
              std::string::npos);
    // The counts of runs repeated after releasing CUDA graphs and of runs that captured graphs:
    // optional, whole numbers.
    for (const char* count : {"graph_releases", "graph_captures"}) {
        bad = shard_json(3, "f");
        bad[count] = 2;
        write_file_atomic(path, bad.dump());
        EXPECT_EQ(read_shard_result(path, 3, "f")->value(count, 0), 2);
        for (const nlohmann::json& v :
             {nlohmann::json(-1), nlohmann::json("2"), nlohmann::json(1.5)}) {
            bad[count] = v;
            write_file_atomic(path, bad.dump());
            EXPECT_NE(error_of<ShardFileError>([&] {
                          read_shard_result(path, 3, "f");
                      }).find("\"" + std::string(count) + "\" must be a whole number"),
                      std::string::npos)
                << count << " " << v;
        }
    }
}

}  // namespace
}  // namespace varscope
