// The eval job's overlapped scoring on CUDA (issue #34; core/eval/scoring_queue.h): the worker's
// own stream waits for the generating stream at each task, so the shard files are the ones of
// inline scoring; with every metric (FID Inception with the formula weights, a tiny emoji
// network) on a small VAR with CUDA graphs. Skips without CUDA.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/eval/eval_job.h"
#include "core/eval/eval_throughput.h"
#include "core/io/checkpoint.h"
#include "core/io/module_binding.h"
#include "tests/gpu/device_pipelines.h"
#include "tests/test_util.h"
#include "tests/tiny_models.h"

using namespace varscope;

namespace {

std::string tiny_emoji_network(const varscope::testing::TempDir& dir) {
    EmojiFeatureConfig c;
    c.channels = {8, 16};
    c.groups = 4;
    c.num_classes = 10;
    torch::manual_seed(11);
    EmojiFeatureNet net(c);
    const std::string path = dir.file("emoji.safetensors");
    save_safetensors(
        module_state_dict(*net), path,
        {{"varscope.kind", kEmojiFeaturesKind}, {"varscope.config", c.to_json().dump()}});
    return path;
}

// The tests' small random VAR (the CPU tests' weights) on CUDA in fp32.
std::unique_ptr<Runner> small_cuda_runner() {
    auto cpu = varscope::testing::small_pipeline(7);
    return var_runner(varscope::testing::with_weights_of(cpu, {"cuda", Precision::Fp32, false}));
}

}  // namespace

TEST(EvalOverlapGpu, OverlappedScoringGivesTheInlineShardsOnCuda) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    varscope::testing::TempDir dir;
    auto runner = small_cuda_runner();
    save_safetensors(synthetic_inception_weights(), dir.file("inception.safetensors"));
    EvalManifest m;
    m.classes = {1, 2, 3, 4};
    m.seeds = {5, 6, 7};
    m.batch = 4;
    m.batches_per_shard = 3;
    m.configs = {{"skip1", {{"skip", {{"enabled", true}, {"last_n", 1}}}}}};
    m.output_dir = dir.file("out");
    m.save_images = true;
    m.metrics.inception = dir.file("inception.safetensors");
    m.metrics.emoji = tiny_emoji_network(dir);
    const auto plans = eval_plans(m, *runner);
    const auto settings = eval_settings(m, *runner);
    const auto scorers = load_eval_scorers(m, *runner);
    const auto shard = plan_shards(m).front();
    warm_up_shard(m, *runner, plans, settings, shard);
    auto run = [&](ShardScoring mode) {
        return shard_outcome(run_shard(m, *runner, plans, settings, shard, "f", scorers, mode));
    };
    const auto inline1 = run(ShardScoring::Inline);
    const auto inline2 = run(ShardScoring::Inline);
    ASSERT_EQ(inline1, inline2) << "inline scoring is not deterministic on this device";
    for (int i = 0; i < 3; ++i) EXPECT_EQ(run(ShardScoring::Overlapped), inline1) << "run " << i;
    EXPECT_EQ(inline1["features"]["skip1"]["images"], 12);
    // PSNR/SSIM ran on the device (core/eval/eval_job.cpp, image_scores): one entry per image.
    ASSERT_EQ(inline1["images"].size(), 12u);
    for (const auto& image : inline1["images"]) {
        EXPECT_LE(image["ssim"].get<double>(), 1.0);
        EXPECT_GT(image["ssim"].get<double>(), -1.0);
    }

    // The bench on the same job: every mode runs, the overlapped JSON matches.
    EvalThroughputOptions o;
    o.scratch_dir = dir.file("scratch");
    const auto j = measure_eval_throughput(m, *runner, o);
    EXPECT_TRUE(j["overlapped_identical"].get<bool>());
    EXPECT_GT(j["modes"]["overlapped"]["images_per_s"].get<double>(), 0.0);
}

// A job whose seeds end with a short unit (3 classes in batches of 2: 2, 1, 2, 1, ...) under two
// plans: the process runs the shards of one batch size together (in_shape_order), so past the
// warm-up (batch 2, not counted) only batch 1 captures new graphs, once per plan. In index
// order the four graph sets (2 plans x 2 batch sizes) outgrew the graph cache's three and
// nearly every run captured again (the scaling job of sessions 30-31).
TEST(EvalOverlapGpu, AJobCapturesGraphsOncePerBatchSizeAndPlan) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    varscope::testing::TempDir dir;
    auto runner = small_cuda_runner();
    EvalManifest m;
    m.classes = {1, 2, 3};
    m.seeds = {5, 6, 7, 8};
    m.batch = 2;
    m.batches_per_shard = 1;
    m.configs = {{"skip1", {{"skip", {{"enabled", true}, {"last_n", 1}}}}}};
    m.output_dir = dir.file("out");
    EvalJobOptions o;
    EvalProgress last;
    o.progress = [&](const EvalProgress& p) { last = p; };
    const auto r = run_eval_job(m, *runner, o);
    EXPECT_EQ(r.computed, 8);
    EXPECT_EQ(last.done, 8);
    EXPECT_EQ(last.graph_captures, 2);
    EXPECT_EQ(last.graph_releases, 0);
}
