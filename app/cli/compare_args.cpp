#include "app/cli/compare_args.h"

namespace varscope::cli {

void CompareArgsCommon::add_to(CLI::App& cmd, const std::string& presets,
                               const std::string& out_help) {
    cmd.add_option("--accel", accel,
                   "accelerators: a JSON config file, inline JSON, or a preset (" + presets + ")")
        ->required();
    cmd.add_option("-o,--out", out_dir, out_help);
    cmd.add_flag("--force", force, "overwrite existing files in --out");
    cmd.add_option("--repeat", repeat, "timed runs of each side")->check(CLI::Range(1, 1000));
    cmd.add_option("--warmup", warmup,
                   "untimed runs of each side first (default: 1 on CUDA, whose first run "
                   "captures the CUDA graphs; 0 on the CPU)")
        ->check(CLI::Range(0, 100));
}

}  // namespace varscope::cli
