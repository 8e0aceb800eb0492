// `varscope-cli shard`: splits a safetensors file into shards of at most --max-mib each under a
// Hugging Face index (core/io/checkpoint.h), so a model larger than the project's 16 MiB file
// cap can ship; the tensors are copied as stored (int8 weights stay int8), every shard keeps the
// file's metadata. The loaders open the index wherever they open a file.
#include <filesystem>
#include <iostream>

#include "app/cli/commands.h"
#include "app/cli/io_paths.h"
#include "app/cli/mar_cli_common.h"  // check_output_file
#include "core/io/checkpoint.h"

namespace varscope::cli {

namespace {
struct ShardOptions {
    std::string in, out;
    double max_mib = 16;
    bool force = false;
};
}  // namespace

Command add_shard(CLI::App& app) {
    auto o = std::make_shared<ShardOptions>();
    auto* cmd = app.add_subcommand(
        "shard", "split a .safetensors file into shards of at most --max-mib under an index");
    cmd->add_option("input", o->in, "the .safetensors file")->required()->check(CLI::ExistingFile);
    cmd->add_option("-o,--out", o->out,
                    "the output path, ending in .safetensors: written as it is when the file "
                    "fits, otherwise as <stem>-0000i-of-0000n.safetensors + <out>.index.json")
        ->required();
    cmd->add_option("--max-mib", o->max_mib, "largest file, MiB (1 MiB = 1,048,576 bytes)")
        ->check(CLI::Range(0.01, 1e6))
        ->capture_default_str();
    cmd->add_flag("--force", o->force, "overwrite the output files");
    return [o]() {
        check_output_file(o->out, o->force, "--out");
        check_output_file(o->out + ".index.json", o->force, "--out");
        std::map<std::string, std::string> metadata;
        const StateDict tensors = load_safetensors_stored(o->in, &metadata);
        const auto max_bytes = static_cast<uint64_t>(o->max_mib * 1024 * 1024);
        const std::string written = save_safetensors_sharded(tensors, o->out, metadata, max_bytes);
        if (written == o->out) {
            std::cout << "fits in one file: wrote " << written << "\n";
        } else {
            // The loader checks every shard against the index; do it once here too.
            const auto names = load_safetensors_index(written).size();
            std::cout << "wrote " << written << " (" << names << " tensors as loaded)\n";
        }
        return 0;
    };
}

}  // namespace varscope::cli
