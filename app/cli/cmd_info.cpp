// `varscope-cli info CKPT`: what a checkpoint holds and which architecture it describes.
#include <ATen/ATen.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "app/cli/run_report.h"  // exec_policy
#include "core/io/checkpoint.h"
#include "core/models/detect.h"

namespace varscope::cli {

Command add_info(CLI::App& app) {
    auto* cmd = app.add_subcommand(
        "info",
        "print the model family and architecture of a checkpoint, and the execution "
        "policy (VARSCOPE_* variables)");
    auto path = std::make_shared<std::string>();
    auto list = std::make_shared<bool>(false);
    cmd->add_option("checkpoint", *path, "checkpoint file (.pth or .safetensors)")
        ->required()
        ->check(CLI::ExistingFile);
    cmd->add_flag("--tensors", *list, "also list every tensor with its shape and dtype");
    return [path, list]() {
        const StateDict all = load_checkpoint(*path);
        const DetectedFamily found = detect_family_nested(all);
        const ModelFamily fam = found.family;
        const StateDict d = found.prefix.empty() ? all : select_prefix(all, found.prefix);
        int64_t numel = 0;
        for (const auto& [n, t] : d) numel += t.numel();
        std::cout << *path << "\n  family:  " << family_name(fam)
                  << (found.prefix.empty() ? "" : " (weights under '" + found.prefix + ".')")
                  << "\n  tensors: " << d.size() << " (" << numel / 1e6 << "M values)\n";
        if (const auto config = inferred_config(fam, d); !config.is_null())
            std::cout << "  config:  " << config.dump() << "\n";
        if (*list)
            for (const auto& [n, t] : all)
                std::cout << "  " << n << " " << t.sizes() << " " << t.scalar_type() << "\n";
        // How this process would run it (the VARSCOPE_* variables, docs/exec-policy.md).
        std::cout << "  exec:    " << describe(exec_policy()) << " "
                  << to_json(exec_policy()).dump() << "\n";
        if (fam != ModelFamily::Unknown) return 0;
        std::cerr << "error: " << *path
                  << ": no known model family in its tensors (VAR, VQVAE, "
                     "MAR, KL VAE, Infinity or BSQ VAE)\n";
        return 2;  // bad input, as the documented exit statuses say (it was 1)
    };
}

}  // namespace varscope::cli
