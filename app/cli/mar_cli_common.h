// Options shared by the MAR subcommands (generate-mar, compare-mar; bench mar uses
// mar_config_argument): the model (a checkpoint, random weights of a preset/JSON config, or the
// embedded emoji MAR with its KL VAE) and the sampling flags, with the model file's
// recommendation ('varscope.mar_sampling') filling the flags not given. Implementation:
// mar_cli_common.cpp.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "core/mar_pipeline.h"

namespace varscope::cli {

// "mar_base" | "mar_large" | "mar_huge" | inline JSON | a JSON file.
MarConfig mar_config_argument(const std::string& spec);

struct MarRunArgs {
    std::string mar_path, vae_path, random_config;
    bool raw_weights = false;
    uint64_t init_seed = 0;
    std::string device = "cpu", precision = "fp32";
    std::vector<int64_t> classes;
    std::string prompt;
    int64_t batch = 1;
    uint64_t seed = 0;
    int64_t num_iter = 64;
    double cfg = 1.0, temperature = 1.0;
    std::string cfg_schedule = "linear", sampling_steps = "100";
    bool no_cuda_graphs = false;
    // The DiffLoss head's condition cache (LazyMAR's head_cfg_period; 0 = off). Only meaningful
    // when head_cfg_period_given().
    int64_t head_cfg_period = 0;

    // Registers --mar, --vae, --raw-weights, --random, --init-seed, --device, --precision,
    // --class, --prompt, --batch, --seed, --num-iter, --cfg, --cfg-schedule,
    // --num-sampling-steps, --temperature, --no-cuda-graphs and --head-cfg-period.
    void add_to(CLI::App& cmd);

    // Call once after parsing, before build(): neither --mar nor --random selects the embedded
    // emoji MAR and its KL VAE (unless --vae is given); then the model file's recommended
    // settings fill the flags not given on the command line. Notes on stderr say so.
    void resolve_model();
    MarPipeline build() const;
    // The sampling options for `pipe`: --prompt matched against the model's class names
    // (ranked list on stderr), CUDA graphs unless --no-cuda-graphs, the head condition cache
    // when --head-cfg-period was given. Throws std::invalid_argument with a clear message.
    MarSampleOptions options(const MarPipeline& pipe) const;

    bool head_cfg_period_given() const;

private:
    // Tell "given on the command line" from "left at the default".
    CLI::Option *num_iter_opt_ = nullptr, *cfg_opt_ = nullptr, *schedule_opt_ = nullptr,
                *temperature_opt_ = nullptr, *steps_opt_ = nullptr, *vae_opt_ = nullptr,
                *head_period_opt_ = nullptr;
};

// Output checks before any work is done, so a bad path fails in a second, not after sampling:
// the folder of `path` exists and is writable (probed by creating a file), `path` does not
// exist unless `force`, it is not an input of the run (io_paths.h), and, with `image`, its
// extension is a supported image format.
// `flag` names the option in messages. std::invalid_argument on failure.
void check_output_file(const std::string& path, bool force, const std::string& flag,
                       bool image = false);
// Throws std::invalid_argument when two of a run's outputs ({flag, path}, empty paths ignored)
// are one file: "-o x.png --tokens-out x.png" wrote the tokens over the image and said done.
void check_distinct_outputs(const std::vector<std::pair<std::string, std::string>>& outputs);
// generate / generate-mar once the batch of n images is known: each numbered image (--out) is
// checked, and no two outputs name one file.
void check_generate_outputs(const std::string& out, int64_t n, const std::string& tokens_out,
                            const std::string& timings_json, bool force);
// Creates `dir` (and parents) and checks that files can be written in it.
void prepare_output_dir(const std::string& dir, const std::string& flag);

}  // namespace varscope::cli
