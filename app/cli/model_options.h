// Options shared by the subcommands that need a VAR model: checkpoint files, random weights, or
// (neither given) the embedded emoji model.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "core/pipeline.h"

namespace varscope::cli {

struct ModelOptions {
    std::string var_path, vae_path;
    int64_t random_depth = 0;  // > 0: official-init random weights of VAR-d<depth>
    uint64_t init_seed = 0;
    std::vector<int64_t> patch_nums;
    std::string device = "cpu";
    std::string precision = "fp32";

    void add_to(CLI::App& cmd);
    VarPipeline build() const;  // throws with a clear message on bad combinations
    // The var checkpoint actually used (the embedded one when none was given); "" for --random.
    std::string effective_var_path() const;
};

}  // namespace varscope::cli
