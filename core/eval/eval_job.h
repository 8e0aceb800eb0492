// `varscope-cli eval`'s job (issue #34), written once for every model family against Runner:
// the shards of a manifest, each run under the baseline and every accelerator config, compared
// per image (PSNR, SSIM, token agreement), timed, written atomically; a restart skips finished
// shards; rank 0 gathers every rank's shard results and writes result.json, summary.csv and
// images.csv. Quality metrics that need a feature network (FID, ...) plug in at run_shard's
// per-image loop and at aggregate_shards: with the manifest's "metrics", every image's FID
// Inception features go into the shard file and the result gets FID, sFID, IS and
// precision/recall per config (core/eval/quality.h). The scoring runs inline after each call,
// or with the manifest's "overlap_scoring" on a worker while the next call generates
// (core/eval/scoring_queue.h): the same shard files either way.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/eval/manifest.h"
#include "core/eval/process_group.h"
#include "core/eval/shards.h"
#include "core/metrics/emoji_features.h"
#include "core/metrics/fid_inception.h"
#include "core/runner/runner.h"

namespace varscope {

struct EvalProgress {
    int rank = 0;
    int64_t shard = -1;   // the shard just finished (in_shape_order: not always the next index)
    int64_t done = 0;     // shards of this rank finished (computed or found)
    int64_t total = 0;    // shards of this rank
    int64_t resumed = 0;  // of `done`, found finished on disk
    double elapsed_s = 0;
    double eta_s = -1;  // -1 until a shard was computed
    // Runs made again after releasing the runner's cached CUDA graphs (out of memory beside
    // them, oom_retry.h); each costs new graph captures, so a count that grows means slow shards.
    int64_t graph_releases = 0;
    // Runs that captured CUDA graphs (a batch size or config not seen before; the warm-up's
    // captures are not counted): a few per job is expected, one per shard is not.
    int64_t graph_captures = 0;
};

struct EvalJobOptions {
    ProcessGroup* group = nullptr;  // null: one process
    std::function<void(const EvalProgress&)> progress;
};

struct EvalJobResult {
    bool root = true;       // rank 0: `result` is filled and the files are written
    nlohmann::json result;  // result.json's content
    int64_t computed = 0;   // shards this process computed
    int64_t resumed = 0;    // shards this process found finished
    std::string result_path;
};

// The baseline and one plan per manifest config, parsed by the runner's family (the manifest's
// accel JSON, preset name or file). ManifestError naming the config.
struct EvalPlans {
    std::vector<std::string> names;                       // the baseline first
    std::vector<std::shared_ptr<const AccelPlan>> plans;  // null for the baseline
};
EvalPlans eval_plans(const EvalManifest& m, const Runner& runner);

// The family's defaults with the model's recommendation and the manifest's "sampling" over them.
SampleSettings eval_settings(const EvalManifest& m, const Runner& runner);

// Creates the output folder (and shards/) and checks a file can be written there;
// std::invalid_argument naming output_dir otherwise.
void prepare_eval_output(const EvalManifest& m);

// The networks of the manifest's "metrics" (none when it has none), loaded, on the runner's
// device, and checked against the model before any sampling (ManifestError naming the field).
struct EvalScorers {
    std::optional<FidInception> inception;
    std::optional<EmojiFeatureNetwork> emoji;
    std::vector<int64_t> emoji_targets;  // per condition: the class to show, -1 = not counted
};
EvalScorers load_eval_scorers(const EvalManifest& m, const Runner& runner);

// How a shard's images are scored: not at all (generation alone, the throughput bench's
// reference: the shard JSON then has timings only), inline after each generate call (the job
// with "overlap_scoring": false), or by the scoring worker while the next call generates
// (core/eval/scoring_queue.h; the same JSON as inline).
enum class ShardScoring { Off, Inline, Overlapped };

// One shard's result (the JSON of its shard file); with the scorers' networks, the features of
// every image of every config too (std::invalid_argument for a model without decoded images).
nlohmann::json run_shard(const EvalManifest& m, Runner& runner, const EvalPlans& plans,
                         const SampleSettings& settings, const EvalShard& shard,
                         const std::string& fingerprint, const EvalScorers& scorers,
                         ShardScoring scoring);

// One untimed call per config on the shard's first unit (one-time costs: CUDA graph capture,
// allocator growth).
void warm_up_shard(const EvalManifest& m, Runner& runner, const EvalPlans& plans,
                   const SampleSettings& settings, const EvalShard& shard);

// The runner a manifest names: its checkpoint (open_runner), or random weights ("model":
// {"random": 30}: VAR of that depth, the official init, as --random 30).
std::unique_ptr<Runner> open_eval_runner(const EvalManifest& m, const LoadOptions& options);

EvalJobResult run_eval_job(const EvalManifest& m, Runner& runner, const EvalJobOptions& options);

}  // namespace varscope
