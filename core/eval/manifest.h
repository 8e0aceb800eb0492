// The eval job's manifest (issue #34): what to sample (a model of any family, opened through
// core/runner), for which classes or prompts and seeds, in which batches, under which named
// accelerator configs, and where the shard files and results go. Read strictly: an unknown key
// is an error (a misspelt "seed" must not run the default), every field is named in messages.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/runner/runner.h"

namespace varscope {

// A bad manifest: the message starts with "manifest '<file>': <field>: ...".
class ManifestError : public std::invalid_argument {
  public:
    using std::invalid_argument::invalid_argument;
};

// One named accelerator config; `accel` is what `--accel` takes (a JSON object, or a string:
// a preset name or a JSON file, relative paths resolved against the manifest's folder).
struct EvalConfig {
    std::string name;
    nlohmann::json accel;
};

// Distribution metrics (FID, sFID, IS, precision/recall; core/eval/quality.h) and the emoji
// models' own metrics (emoji Frechet distance and accuracy; core/eval/emoji_quality.h):
// "metrics" in the manifest. Each is off without its network file.
struct EvalMetricsSpec {
    std::string inception;  // pytorch-fid's pt_inception-2015-12-05-6726825d.pth (or equivalent)
    std::string reference;  // optional .npz: mu, sigma [, mu_s, sigma_s]
    // An emoji feature network export ("emoji": true in the manifest = the shipped
    // resources/models/emoji-features.safetensors).
    std::string emoji;
    int64_t is_splits = 10;
    int64_t pr_k = 3;
    bool enabled() const { return inception_enabled() || emoji_enabled(); }
    bool inception_enabled() const { return !inception.empty(); }
    bool emoji_enabled() const { return !emoji.empty(); }
};

// The name of the config with the accelerators off, which every job runs first and compares to.
inline constexpr const char* kBaselineConfig = "baseline";

struct EvalManifest {
    ModelSpec model;
    // "model": {"random": 30}: random (official-init) VAR weights of that depth instead of a
    // checkpoint, for timing (`--random 30`); `init_seed` seeds them. 0 = a checkpoint.
    int64_t random_depth = 0;
    uint64_t init_seed = 0;
    std::string device = "cpu";
    std::string precision = "fp32";
    std::vector<int64_t> classes;      // one image per class and seed (VAR, MAR)
    std::vector<std::string> prompts;  // or one per prompt and seed (Infinity)
    std::vector<uint64_t> seeds;
    int64_t batch = 1;              // images per generate call (same seed, next conditions)
    int64_t batches_per_shard = 1;  // generate calls per shard (of every config)
    // Sampling settings over the family's defaults (keys as the CLI's flags: cfg, top_k,
    // top_p, more_smooth, num_iter, temperature, tau); others refused.
    nlohmann::json sampling = nlohmann::json::object();
    std::vector<EvalConfig> configs;  // the accelerated configs (the baseline is implicit)
    std::string output_dir;
    bool save_images = false;
    // One untimed call per config before a process's first shard (one-time costs, CUDA graph
    // capture and allocator growth, stay out of the latencies). Not part of the work.
    bool warmup = true;
    double rank_timeout_s = 3600;  // distributed: how long rank 0 waits for the others
    // Score each generate call's images on a worker (own CUDA stream) while the next call
    // generates (core/eval/scoring_queue.h); the shard files are the same either way. Not part
    // of the work.
    bool overlap_scoring = false;
    EvalMetricsSpec metrics;

    int64_t conditions() const {
        return static_cast<int64_t>(prompts.empty() ? classes.size() : prompts.size());
    }
    // What decides the images and metrics (not output_dir, not timeouts): a shard file made
    // under another work definition is refused instead of being mixed in.
    nlohmann::json work_json() const;
};

// `j` as read from `source` (messages name it); relative paths resolve against `base_dir`.
EvalManifest parse_manifest(const nlohmann::json& j, const std::string& source,
                            const std::string& base_dir);
// Reads and parses the file (core/io/json_read: duplicate keys, depth, non-regular files).
EvalManifest read_manifest(const std::string& path);

}  // namespace varscope
