// Options `compare` (VAR) and `compare-mar` share: the accelerator config the accelerated side
// runs, where the figures and metrics go, and how the two sides are timed.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace varscope::cli {

struct CompareArgsCommon {
    std::string accel;
    std::string out_dir;
    bool force = false;
    int64_t repeat = 1, warmup = 0;

    // presets: the model family's preset names for --accel's help; out_help: what --out gets.
    void add_to(CLI::App& cmd, const std::string& presets, const std::string& out_help);
};

}  // namespace varscope::cli
