// `varscope-cli bench eval MANIFEST` (issue #34: generation + scoring keep >= 90 % of the rate
// of generation alone): the manifest's shards run side by side in one process, each shard under
// every mode in turn (the first mode rotates from shard to shard, so clock and thermal drift
// spread over the modes):
//   generation  every config's generate calls only (no scoring at all: the reference);
//   serial      generation + every metric of the manifest, scored inline as `eval` does with
//               "overlap_scoring": false (PSNR, SSIM, token agreement, Inception / emoji
//               features, the shard JSON written);
//   overlapped  the same with the scoring worker (core/eval/scoring_queue.h).
// Images/s per mode = images of every config / wall-clock seconds of the mode's shard runs
// (each ends with its device work done). The serial and overlapped shard JSON are compared
// (timings left out): they must be identical.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "core/eval/manifest.h"
#include "core/runner/runner.h"

namespace varscope {

struct EvalThroughputOptions {
    // Where shard files (and saved images) go: never the manifest's output_dir. Created.
    std::string scratch_dir;
    int64_t max_shards = 0;                       // the first N shards of the manifest (0 = all)
    std::function<void(const std::string&)> log;  // one line per shard and mode
};

// {"shards", "images_per_mode", "metrics": [...], "modes": {name: {"seconds", "images_per_s"}},
//  "ratios": {"serial_over_generation", "overlapped_over_generation"},
//  "overlapped_identical": bool}. ManifestError / std::invalid_argument as `eval` gives them.
nlohmann::json measure_eval_throughput(EvalManifest m, Runner& runner,
                                       const EvalThroughputOptions& options);

// Stand-in networks for timing the metrics without their files: the FID Inception with
// synthetic_inception_weights() (the parity fixtures' formula weights) and a randomly
// initialised emoji feature network (the shipped architecture, the model's class count),
// written to `dir` and named in m.metrics. Their numbers mean nothing; their cost is the real
// networks'. Returns what was written.
std::vector<std::string> use_stand_in_metrics(EvalManifest& m, const Runner& runner,
                                              const std::string& dir);

}  // namespace varscope
