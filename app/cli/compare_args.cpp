#include "app/cli/compare_args.h"

#include <ATen/ATen.h>

#include <filesystem>

#include "app/cli/image_io.h"
#include "app/cli/mar_cli_common.h"  // check_output_file
#include "core/metrics/image_metrics.h"

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

std::string CompareArgsCommon::out_file(const std::string& name, int64_t i, int64_t n) const {
    return numbered_path((std::filesystem::path(out_dir) / name).string(), i, n);
}

void CompareArgsCommon::check_outputs(int64_t n, bool images,
                                      const std::vector<std::string>& extra) const {
    if (out_dir.empty()) return;
    std::vector<std::string> files = {out_file("metrics.json")};
    for (const auto& e : extra) files.push_back(out_file(e));
    for (int64_t i = 0; images && i < n; ++i)
        for (const char* name : {"baseline", "accelerated", "diff"})
            files.push_back(out_file(name + default_image_extension(), i, n));
    for (const auto& f : files) check_output_file(f, force, "--out");
}

void CompareArgsCommon::write_images(const at::Tensor& base, const at::Tensor& accel) const {
    const int64_t n = base.size(0);
    const auto diff = abs_diff_map(base, accel);  // (B, H, W)
    const std::string ext = default_image_extension();
    for (int64_t i = 0; i < n; ++i) {
        write_image(base[i], out_file("baseline" + ext, i, n), force);
        write_image(accel[i], out_file("accelerated" + ext, i, n), force);
        // Differences are small; amplify 4x so they are visible, clipped at white.
        write_image(diff[i].mul(4).clamp(0, 1).unsqueeze(0).expand({3, -1, -1}),
                    out_file("diff" + ext, i, n), force);
    }
}

}  // namespace varscope::cli
