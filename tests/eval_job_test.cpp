// core/eval/eval_job.h: the eval job on a small random VAR (fast on a CPU): every shard under
// the baseline and each config, resumed from shard files, and the same result from 2 ranks
// under torchrun (the test binary launched by torchrun runs the DISABLED_ worker below).
#include "core/eval/eval_job.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/io/json_read.h"
#include "tests/error_of.h"
#include "tests/eval_test_util.h"
#include "tests/test_util.h"
#include "tests/tiny_models.h"

namespace varscope {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::eval_quality;
using testing::free_port;
using testing::TempDir;

// 3 classes x 2 seeds in batches of 2: 4 generate calls, one per shard.
EvalManifest manifest(const std::string& out) {
    EvalManifest m;
    m.classes = {1, 2, 3};
    m.seeds = {5, 6};
    m.batch = 2;
    m.batches_per_shard = 1;
    m.sampling = {{"cfg", 2.0}};
    m.configs = {{"off", {{"skip", {{"enabled", false}}}}},
                 {"skip1", {{"skip", {{"enabled", true}, {"last_n", 1}}}}}};
    m.output_dir = out;
    return m;
}

std::unique_ptr<Runner> small_runner() {
    return var_runner(testing::small_pipeline(7));
}

TEST(EvalJob, RunsEveryShardUnderEveryConfigAndSummarises) {
    TempDir dir;
    const auto out = (dir.path() / "out").string();
    auto runner = small_runner();
    std::vector<EvalProgress> seen;
    EvalJobOptions o;
    o.progress = [&](const EvalProgress& p) { seen.push_back(p); };
    const auto r = run_eval_job(manifest(out), *runner, o);
    EXPECT_TRUE(r.root);
    EXPECT_EQ(r.computed, 4);
    EXPECT_EQ(r.resumed, 0);
    ASSERT_EQ(seen.size(), 4u);
    // Shards 0 and 2 (two classes) before 1 and 3 (the third class): one batch size at a time.
    std::vector<int64_t> order;
    for (const auto& p : seen) order.push_back(p.shard);
    EXPECT_EQ(order, (std::vector<int64_t>{0, 2, 1, 3}));
    for (const auto& p : seen) EXPECT_EQ(p.graph_captures, 0);  // CPU: no graphs
    EXPECT_EQ(seen.back().done, 4);
    EXPECT_EQ(seen.back().total, 4);
    EXPECT_EQ(seen.back().eta_s, 0.0);
    for (int i = 0; i < 4; ++i) EXPECT_TRUE(fs::exists(shard_path(out, i))) << i;
    for (const char* f : {"result.json", "summary.csv", "images.csv"})
        EXPECT_TRUE(fs::exists(fs::path(out) / f)) << f;
    const auto& configs = r.result["configs"];
    ASSERT_EQ(configs.size(), 3u);
    EXPECT_EQ(configs[0]["name"], "baseline");
    EXPECT_EQ(configs[1]["name"], "off");
    EXPECT_EQ(configs[2]["name"], "skip1");
    for (const auto& c : configs) {
        EXPECT_EQ(c["images"], 6) << c["name"];
        EXPECT_GT(c["images_per_s"].get<double>(), 0.0) << c["name"];
        EXPECT_TRUE(c["peak_memory_bytes"].is_null());  // CPU
    }
    // Accelerators off are the baseline: identical images and tokens.
    EXPECT_EQ(configs[1]["psnr_db"]["identical"], 6);
    EXPECT_DOUBLE_EQ(configs[1]["ssim"]["mean"].get<double>(), 1.0);
    EXPECT_DOUBLE_EQ(configs[1]["token_agreement"]["mean"].get<double>(), 1.0);
    // Skipping the last scale changes the images and leaves that scale's tokens undecoded.
    EXPECT_LT(configs[2]["psnr_db"]["identical"].get<int64_t>(), 6);
    EXPECT_LT(configs[2]["ssim"]["mean"].get<double>(), 1.0);
    const double agreement = configs[2]["token_agreement"]["mean"].get<double>();
    EXPECT_GT(agreement, 0.0);
    EXPECT_LT(agreement, 1.0);
    // The job's throughput counts every timed image of every config (3 x 6) once.
    const auto& job = r.result["job"];
    EXPECT_EQ(job["processes"], 1);
    EXPECT_EQ(job["shards_computed"], 4);
    EXPECT_EQ(job["shards_resumed"], 0);
    EXPECT_EQ(job["images_generated"], 18);
    EXPECT_GT(job["wall_s"].get<double>(), 0.0);
    EXPECT_DOUBLE_EQ(job["images_per_s"].get<double>(), 18 / job["wall_s"].get<double>());
    // The file holds what the call returned.
    EXPECT_EQ(read_json_file((fs::path(out) / "result.json").string(), "result"), r.result);
}

TEST(EvalJob, ARestartSkipsFinishedShardsAndCountsEachOnce) {
    TempDir dir;
    const auto out = (dir.path() / "out").string();
    auto runner = small_runner();
    const auto first = run_eval_job(manifest(out), *runner, {});
    // As if killed after three shards: one shard file is missing.
    fs::remove(shard_path(out, 2));
    const auto second = run_eval_job(manifest(out), *runner, {});
    EXPECT_EQ(second.computed, 1);
    EXPECT_EQ(second.resumed, 3);
    EXPECT_EQ(eval_quality(second.result), eval_quality(first.result));
    EXPECT_EQ(second.result["configs"][2]["images"], 6);  // not 6 + 4
    // Only the recomputed shard (seed 6, classes 1 and 2, under 3 configs) counts as this run's
    // work.
    EXPECT_EQ(second.result["job"]["shards_computed"], 1);
    EXPECT_EQ(second.result["job"]["shards_resumed"], 3);
    EXPECT_EQ(second.result["job"]["images_generated"], 6);
    const auto third = run_eval_job(manifest(out), *runner, {});
    EXPECT_EQ(third.computed, 0);
    EXPECT_EQ(third.result["job"]["images_generated"], 0);
    EXPECT_EQ(third.result["job"]["images_per_s"], 0.0);
    EXPECT_EQ(eval_quality(third.result), eval_quality(first.result));
}

TEST(EvalJob, ADamagedShardFileStopsTheJobWithItsName) {
    TempDir dir;
    const auto out = (dir.path() / "out").string();
    auto runner = small_runner();
    run_eval_job(manifest(out), *runner, {});
    const std::string path = shard_path(out, 1);
    std::ofstream(path) << "{\"fingerprint\": ";
    const std::string e =
        error_of<ShardFileError>([&] { run_eval_job(manifest(out), *runner, {}); });
    EXPECT_NE(e.find(path), std::string::npos) << e;
    // Another manifest's shards in the same folder are refused, not mixed in.
    fs::remove(path);
    EvalManifest other = manifest(out);
    other.seeds = {5, 7};
    EXPECT_NE(error_of<ShardFileError>([&] {
                  run_eval_job(other, *runner, {});
              }).find("made by another manifest"),
              std::string::npos);
}

TEST(EvalJob, BadOutputFolderAndConfigsAreNamed) {
    TempDir dir;
    auto runner = small_runner();
    std::ofstream(dir.file("a-file")) << "x";
    const auto blocked = (dir.path() / "a-file" / "out").string();
    EXPECT_NE(error_of<std::invalid_argument>([&] {
                  run_eval_job(manifest(blocked), *runner, {});
              }).find("output_dir '" + blocked + "'"),
              std::string::npos);
    EvalManifest m = manifest((dir.path() / "out").string());
    m.configs.push_back({"bad", {{"skip", {{"enabled", true}, {"last_n", "two"}}}}});
    const std::string e = error_of<ManifestError>([&] { run_eval_job(m, *runner, {}); });
    EXPECT_NE(e.find("configs.bad"), std::string::npos) << e;
    m.configs.back().accel = "no-such-preset";
    EXPECT_NE(error_of<ManifestError>([&] { run_eval_job(m, *runner, {}); }).find("configs.bad"),
              std::string::npos);
    m = manifest((dir.path() / "out2").string());
    m.classes = {1, 99};  // the small model has 10 classes
    EXPECT_THROW(run_eval_job(m, *runner, {}), std::invalid_argument);
}

TEST(EvalJob, SavedImagesComeWithTheShards) {
    TempDir dir;
    EvalManifest m = manifest((dir.path() / "out").string());
    m.save_images = true;
    m.seeds = {5};
    auto runner = small_runner();
    run_eval_job(m, *runner, {});
    EXPECT_TRUE(fs::exists(dir.path() / "out" / "images" / "shard-00000.safetensors"));
    EXPECT_TRUE(fs::exists(dir.path() / "out" / "images" / "shard-00001.safetensors"));
}

// --- 2 ranks under torchrun: this binary, launched twice, runs the worker below.

std::string torchrun_path() {
#ifdef VARSCOPE_TORCHRUN_PATH
    if (fs::exists(VARSCOPE_TORCHRUN_PATH)) return VARSCOPE_TORCHRUN_PATH;
#endif
    return {};
}

// Runs the worker as 2 ranks; returns torchrun's exit code.
int torchrun_workers(const std::string& out, const std::string& env = "") {
    const std::string self = fs::read_symlink("/proc/self/exe").string();
    // OMP_NUM_THREADS=1 as torchrun sets it only where it is unset: the reference runs on one
    // thread (OneThread below), whatever the caller's environment says.
    const std::string cmd = "env OMP_NUM_THREADS=1 VARSCOPE_EVAL_TEST_OUT=" + out + " " + env +
                            " timeout -k 5 300 " + torchrun_path() +
                            " --nproc-per-node 2 --master-port " + std::to_string(free_port()) +
                            " --no-python " + self +
                            " --gtest_also_run_disabled_tests"
                            " --gtest_filter=EvalJobWorker.DISABLED_RunsOneRank > " +
                            out + ".log 2>&1";
    const int status = std::system(cmd.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string log_of(const std::string& out) {
    std::ifstream f(out + ".log");
    return std::string((std::istreambuf_iterator<char>(f)), {});
}

// A rank of the torchrun tests (disabled: only run when launched by them).
TEST(EvalJobWorker, DISABLED_RunsOneRank) {
    const char* out = std::getenv("VARSCOPE_EVAL_TEST_OUT");
    ASSERT_NE(out, nullptr) << "launched by EvalJobDistributed only";
    const auto spec = distributed_spec_from([](const char* k) { return std::getenv(k); });
    ASSERT_TRUE(spec.has_value()) << "not under torchrun";
    auto group = tcp_store_group(*spec);
    auto runner = small_runner();
    const char* die = std::getenv("VARSCOPE_EVAL_TEST_DIE_RANK");
    EvalJobOptions o;
    o.group = group.get();
    if (die && std::atoi(die) == spec->rank)
        o.progress = [](const EvalProgress&) { std::_Exit(3); };  // dies after its first shard
    const auto r = run_eval_job(manifest(out), *runner, o);
    std::ofstream(std::string(out) + ".rank" + std::to_string(spec->rank))
        << r.computed << " " << r.resumed << "\n";
}

// The workers run with OMP_NUM_THREADS=1 (torchrun_workers); CPU kernels sum in an order that
// depends on the thread count, so the 1-process reference runs on one thread too for a
// bit-for-bit comparison.
struct OneThread {
    int before = at::get_num_threads();
    OneThread() { at::set_num_threads(1); }
    ~OneThread() { at::set_num_threads(before); }
};

EvalJobResult one_process_result(const std::string& out) {
    OneThread one;
    auto runner = small_runner();
    return run_eval_job(manifest(out), *runner, {});
}

int computed_by(const std::string& out, int rank) {
    std::ifstream f(out + ".rank" + std::to_string(rank));
    int computed = -1;
    f >> computed;
    return computed;
}

TEST(EvalJobDistributed, TwoRanksUnderTorchrunGiveTheOneRankResultBitForBit) {
    if (torchrun_path().empty()) GTEST_SKIP() << "torchrun not found (VARSCOPE_TORCHRUN_PATH)";
    TempDir dir;
    const auto one = one_process_result((dir.path() / "one").string());
    const auto out = (dir.path() / "two").string();
    ASSERT_EQ(torchrun_workers(out), 0) << log_of(out);
    EXPECT_EQ(computed_by(out, 0), 2);  // shards 0 and 2
    EXPECT_EQ(computed_by(out, 1), 2);  // shards 1 and 3
    const auto two = read_json_file((fs::path(out) / "result.json").string(), "result");
    EXPECT_EQ(two["world_size"], 2);
    EXPECT_EQ(two["job"]["processes"], 2);
    EXPECT_EQ(two["job"]["shards_computed"], 4);  // both ranks' shards, gathered
    EXPECT_EQ(two["job"]["images_generated"], one.result["job"]["images_generated"]);
    EXPECT_EQ(two["fingerprint"], one.result["fingerprint"]);
    EXPECT_EQ(eval_quality(two), eval_quality(one.result));
    for (int i = 0; i < 4; ++i) {
        const auto a = read_json_file(shard_path(out, i), "2-rank shard");
        const auto b = read_json_file(shard_path((dir.path() / "one").string(), i), "shard");
        EXPECT_EQ(a["images"], b["images"]) << "shard " << i;
    }
}

TEST(EvalJobDistributed, ARankThatDiesFailsTheJobAndTheRestartResumes) {
    if (torchrun_path().empty()) GTEST_SKIP() << "torchrun not found (VARSCOPE_TORCHRUN_PATH)";
    TempDir dir;
    const auto out = (dir.path() / "job").string();
    EXPECT_NE(torchrun_workers(out, "VARSCOPE_EVAL_TEST_DIE_RANK=1"), 0) << log_of(out);
    EXPECT_FALSE(fs::exists(fs::path(out) / "result.json"));
    int written = 0;
    for (int i = 0; i < 4; ++i) written += fs::exists(shard_path(out, i));
    EXPECT_GE(written, 1);  // rank 1's first shard at least
    ASSERT_EQ(torchrun_workers(out), 0) << log_of(out);
    EXPECT_EQ(computed_by(out, 0) + computed_by(out, 1), 4 - written);
    const auto one = one_process_result((dir.path() / "one").string());
    EXPECT_EQ(eval_quality(read_json_file((fs::path(out) / "result.json").string(), "result")),
              eval_quality(one.result));
}

}  // namespace
}  // namespace varscope
