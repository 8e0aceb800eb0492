// Sampling options shared by `generate`, `compare` and the benches: class / prompt, seed, CFG,
// top-k/p, attention backend, and the accelerator config.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "app/cli/model_options.h"
#include "app/cli/run_args.h"  // class_for_prompt
#include "core/accel/accel_config.h"
#include "core/pipeline.h"

namespace varscope::cli {

struct SamplingArgs {
    std::vector<int64_t> classes;
    std::string prompt;
    int64_t batch = 1;
    uint64_t seed = 0;
    bool random_seed = false;
    double cfg = 4.0;
    int64_t top_k = 900;
    double top_p = 0.95;
    bool more_smooth = false;
    std::string attention = "sdpa";
    bool no_cuda_graphs = false;

private:
    // Set by add_to: tell "given on the command line" from "left at the default".
    CLI::Option* cfg_option_ = nullptr;
    CLI::Option* top_k_option_ = nullptr;
    CLI::Option* top_p_option_ = nullptr;
    void apply_recommendation(const std::string& var_path, VarSampleOptions& opt) const;

public:

    void add_to(CLI::App& cmd);
    // Options for `pipe`; a prompt is matched against the model's class names (ranked list
    // printed to stderr). CFG / top-k / top-p not given on the command line come from the model
    // file's recommendation where it has one (a note on stderr says so). Throws
    // std::invalid_argument with a clear message.
    VarSampleOptions resolve(const VarPipeline& pipe, const ModelOptions& model) const;
};


// --accel: a JSON file, inline JSON or a preset name; "" = baseline.
AccelConfig parse_accel_argument(const std::string& arg);
std::string preset_names();  // "baseline, fastvar, ..." for help texts

}  // namespace varscope::cli
