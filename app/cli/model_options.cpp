#include "app/cli/model_options.h"

#include <iostream>
#include <stdexcept>

#include "app/cli/run_report.h"  // exec_policy
#include "app/cli/option_checks.h"
#include "app/cli/seed_option.h"
#include "core/resources.h"

namespace varscope::cli {

void ModelOptions::add_to(CLI::App& cmd) {
    cmd.add_option("--var", var_path, "VAR transformer checkpoint (.pth or .safetensors)")
        ->check(CLI::ExistingFile);
    cmd.add_option("--vae", vae_path, "multi-scale VQVAE checkpoint (.pth or .safetensors)")
        ->check(CLI::ExistingFile);
    cmd.add_option("--random", random_depth,
                   "use random (official-init) weights of VAR-d<N> instead of checkpoints")
        ->check(CLI::Range(1, 64));
    cmd.add_option("--init-seed", init_seed, "seed of the random weights")->check(seed_validator());
    cmd.add_option("--patch-nums", patch_nums, "patch schedule, e.g. 1,2,3,4,5,6,8,10,13,16")
        ->delimiter(',')
        ->check(whole_number_at_least(1));  // each entry; "" was read as [0]
    cmd.add_option("--device", device, "cpu, cuda or cuda:N")->capture_default_str();
    cmd.add_option(
           "--precision", precision,
           "transformer precision (bf16-autocast: fp32 stream, bf16 matrix products, as "
           "torch.autocast; tf32: fp32 with TF32 matrix products on CUDA, as the official demo)")
        ->check(CLI::IsMember({"fp32", "fp16", "bf16", "bf16-autocast", "tf32"}))
        ->capture_default_str();
}

VarPipeline ModelOptions::build() const {
    LoadOptions lo = load_options(device, precision);
    lo.exec = exec_policy();
    if (random_depth > 0) {
        if (!var_path.empty() || !vae_path.empty())
            throw std::invalid_argument("--random cannot be combined with --var/--vae");
        VarConfig vc = VarConfig::for_depth(random_depth, patch_nums);
        VqvaeConfig ac;  // the official vae_ch160v4096z32 architecture
        ac.patch_nums = vc.patch_nums;
        return VarPipeline::random(vc, ac, init_seed, lo);
    }
    if (var_path.empty() && vae_path.empty()) {
        if (!embedded_model_available())
            throw std::invalid_argument(
                "no model: pass --var and --vae checkpoints, or --random <depth> for random "
                "weights "
                "(the embedded emoji model was not found in " +
                resource_dir() + "/models)");
        auto files = embedded_model_files();
        files.patch_nums = patch_nums;
        std::cerr << "no --var/--vae given: using the embedded emoji VAR (" << files.var_path
                  << ")\n";
        return VarPipeline::load(files, lo);
    }
    if (var_path.empty() || vae_path.empty())
        throw std::invalid_argument(
            "pass both --var and --vae (or neither, for the embedded emoji model)");
    return VarPipeline::load({var_path, vae_path, patch_nums}, lo);
}

std::string ModelOptions::effective_var_path() const {
    if (random_depth > 0) return {};
    if (!var_path.empty()) return var_path;
    return embedded_model_available() ? embedded_model_files().var_path : std::string();
}

}  // namespace varscope::cli
