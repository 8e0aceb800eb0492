// The eval job's result from its shard results (issue #34): per config the image metrics
// against the baseline (mean and 95 % interval), throughput, latency percentiles and peak
// memory, as JSON and CSV. The shards are read in index order and their images in file order,
// so the sums (and the result) do not depend on which rank computed which shard.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/eval/manifest.h"

namespace varscope {

// Mean, 95 % interval half-width (normal approximation, 1.96 s / sqrt(n); null below 2
// values) and count. PSNR of identical images is infinite: it is counted apart ("identical")
// and left out of the mean.
nlohmann::json mean_ci(const std::vector<double>& values);
// Nearest-rank percentile (p in [0, 100]) of unsorted values; 0 for none.
double percentile(std::vector<double> values, double p);

// The per-config summary of shard results `shards` (all of them, in index order). Config order:
// the baseline, then the manifest's.
nlohmann::json aggregate_shards(const EvalManifest& m, const std::vector<nlohmann::json>& shards);

// The whole job's throughput (what scales with processes; a config's `images_per_s` is per
// process): the images of the timed calls of the shards this run computed (`computed`, indices
// into `shards`; every config; resumed shards cost nothing and are left out) over `wall_s`, rank
// 0's time from its first shard to every rank's results gathered (model loading not included).
nlohmann::json job_throughput(const std::vector<nlohmann::json>& shards,
                              const std::vector<int64_t>& computed, int processes, double wall_s);

// One row per config: the summary's numbers. One row per image: config, seed, condition and its
// metrics.
std::string summary_csv(const nlohmann::json& result);
std::string images_csv(const std::vector<nlohmann::json>& shards);

}  // namespace varscope
