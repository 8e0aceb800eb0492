// varscope-cli: headless generation, inspection and benchmarks on the VARScope core.
#include <c10/util/Exception.h>

#include <iostream>
#include <map>

#include "app/cli/commands.h"
#include "app/cli/io_paths.h"
#include "app/cli/run_report.h"
#include "app/exec_env/exec_env.h"
#include "core/io/state_dict.h"
#include "core/text/sentencepiece_tokenizer.h"

int main(int argc, char** argv) {
    CLI::App app{"VARScope command line: generate with VAR and MAR models, inspect checkpoints"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "varscope-cli 0.1.0");
    app.footer(
        "Exit status: 0 done, 2 bad input (flags, files, configs), 3 a failure while running "
        "(LibTorch, CUDA, I/O).");
    std::map<CLI::App*, varscope::cli::Command> runners;
    auto add = [&](varscope::cli::Command (*fn)(CLI::App&), const char* name) {
        auto runner = fn(app);
        runners[app.get_subcommand(name)] = std::move(runner);
    };
    add(varscope::cli::add_info, "info");
    add(varscope::cli::add_generate, "generate");
    add(varscope::cli::add_generate_mar, "generate-mar");
    add(varscope::cli::add_teacher_forward, "teacher-forward");
    add(varscope::cli::add_pack_emoji, "pack-emoji");
    add(varscope::cli::add_shard, "shard");
    add(varscope::cli::add_train, "train");
    add(varscope::cli::add_compare, "compare");
    add(varscope::cli::add_compare_mar, "compare-mar");
    add(varscope::cli::add_methods, "methods");
    add(varscope::cli::add_analyze, "analyze");
    add(varscope::cli::add_eval_prompts, "eval-prompts");
    add(varscope::cli::add_bench, "bench");
    add(varscope::cli::add_eval, "eval");
    add(varscope::cli::add_sweep, "sweep");

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        // app.exit prints the help or the message; its own codes (105, 109, ...) mean no more
        // than bad usage, which is 2 here as for every other bad input.
        return app.exit(e) == 0 ? 0 : 2;
    }
    try {
        // The environment, once: a malformed VARSCOPE_* value is a usage error (exit 2).
        varscope::cli::exec_policy();
        varscope::exec_env::apply_resource_dir_from_environment();
        // Before any output check: what the command reads may never be overwritten.
        for (auto* sub : app.get_subcommands()) varscope::cli::record_inputs(*sub);
        for (auto* sub : app.get_subcommands()) return runners.at(sub)();
    } catch (const varscope::TokenizerError& e) {  // a user's spiece.model: bad input
        std::cerr << "error: " << e.what() << "\n";
        return 2;
    } catch (const varscope::CheckpointError& e) {
        std::cerr << "error: " << e.what() << "\n";
        return 2;
    } catch (const std::invalid_argument& e) {
        std::cerr << "error: " << e.what() << "\n";
        return 2;
    } catch (const c10::Error& e) {
        std::cerr << "error (LibTorch): " << e.what_without_backtrace() << "\n";
        return 3;
    } catch (const std::exception& e) {
        std::cerr << "error: " << e.what() << "\n";
        return 3;
    }
    return 0;
}
