// Options `compare` (VAR) and `compare-mar` share: the accelerator config the accelerated side
// runs, where the figures and metrics go, and how the two sides are timed.
#pragma once

#include <ATen/core/Tensor.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace varscope::cli {

struct CompareArgsCommon {
    std::string accel;
    std::string out_dir;
    bool force = false;
    int64_t repeat = 1;
    int64_t warmup = -1;  // -1: warmup_runs() decides

    // presets: the model family's preset names for --accel's help; out_help: what --out gets.
    void add_to(CLI::App& cmd, const std::string& presets, const std::string& out_help);
    // Untimed runs of each side: --warmup, else 1 on CUDA (a first run captures the CUDA graphs,
    // which would land in its time) and 0 on the CPU.
    int64_t warmup_runs(bool cuda) const { return warmup >= 0 ? warmup : (cuda ? 1 : 0); }

    // A file in --out; name_<i> when the run makes n > 1 images.
    std::string out_file(const std::string& name, int64_t i = 0, int64_t n = 1) const;
    // Before sampling: metrics.json, the `extra` files and, with `images`, each image's
    // baseline/accelerated/diff must not exist (unless --force) and be writable.
    void check_outputs(int64_t n, bool images, const std::vector<std::string>& extra = {}) const;
    // Writes each image's baseline, accelerated and |difference| x4 (clipped at white) to --out.
    void write_images(const at::Tensor& base, const at::Tensor& accel) const;
};

}  // namespace varscope::cli
