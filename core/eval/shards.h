// The eval job's work list and its shards (issue #34). A unit is one generate call: one seed
// and up to `batch` consecutive conditions (classes or prompts). A shard is a fixed run of
// consecutive units, run under the baseline and every config (the comparison stays inside the
// shard, so any rank can run any shard). The split depends on the manifest only, so every
// process (and every restart) sees the same shards; rank r of W runs shards r, r+W, ...
//
// A finished shard is one JSON file, written atomically (temporary file + fsync + rename), that
// carries the manifest's fingerprint: a restart skips the shards whose files are there, and the
// aggregation reads exactly one file per shard, so nothing is counted twice or lost.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/eval/manifest.h"
#include "core/io/atomic_file.h"  // write_file_atomic, used by the eval job for every file

namespace varscope {

struct EvalUnit {
    uint64_t seed = 0;
    std::vector<int64_t> conditions;  // indices into the manifest's classes or prompts
};

struct EvalShard {
    int64_t index = 0;
    std::vector<EvalUnit> units;
    int64_t images() const;  // per config
};

// Units seed-major (every condition of seed 0, then seed 1, ...), then shards of
// batches_per_shard units.
std::vector<EvalShard> plan_shards(const EvalManifest& m);
// The shard indices rank `rank` of `world` runs: rank, rank + world, ...
std::vector<int64_t> shards_of_rank(int64_t shards, int rank, int world);
// The order a rank runs `todo` in: shards whose units have the same batch sizes together, the
// largest batches first, otherwise by index. Each batch size needs its own CUDA graph sets (one
// per config), and the seed-major plan ends every seed with a short unit (250 classes in
// batches of 64: 64, 64, 64, 58): in index order two configs alternated between four sets,
// more than the graph cache keeps, and nearly every call captured its graphs again. Results do
// not depend on the order: every unit seeds its own generator.
std::vector<int64_t> in_shape_order(std::vector<int64_t> todo,
                                    const std::vector<EvalShard>& shards);

// FNV-1a 64 of the manifest's work_json(), as 16 hex digits: stable across processes and
// machines (std::hash is not).
std::string manifest_fingerprint(const EvalManifest& m);

// The shard file's path under the output folder: <dir>/shards/shard-00012.json.
std::string shard_path(const std::string& output_dir, int64_t index);

// A shard result without what differs between two runs of the same work: its timing and the
// run conditions (graph_releases, graph_captures). Two runs of a shard must agree on the rest.
nlohmann::json shard_outcome(nlohmann::json shard);

// A shard file that cannot be used: damaged, made by another manifest, or for another shard.
// The message names the file and says what to do (delete it to recompute that shard).
class ShardFileError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// The shard's result if its file exists and is whole and belongs to this manifest and index;
// nullopt when there is no file. ShardFileError otherwise.
std::optional<nlohmann::json> read_shard_result(const std::string& path, int64_t index,
                                                const std::string& fingerprint);
// Checks a shard result (from a file or another rank): fingerprint, index, the fields the
// aggregation reads. ShardFileError naming `source`.
void check_shard_result(const nlohmann::json& j, int64_t index, const std::string& fingerprint,
                        const std::string& source);

}  // namespace varscope
