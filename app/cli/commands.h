// varscope-cli subcommands. Each registers its options on the CLI11 app and runs on the public
// library API only (core/pipeline.h and friends).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace varscope::cli {

using Command = std::function<int()>;

Command add_info(CLI::App& app);
Command add_generate(CLI::App& app);
Command add_generate_mar(CLI::App& app);  // cmd_generate.cpp (alias of generate)
Command add_teacher_forward(CLI::App& app);
Command add_pack_emoji(CLI::App& app);
Command add_shard(CLI::App& app);  // cmd_shard.cpp: split a file under the 16 MiB cap
Command add_train(CLI::App& app);
Command add_compare(CLI::App& app);
Command add_compare_mar(CLI::App& app);  // cmd_compare.cpp (alias of compare)
Command add_methods(CLI::App& app);
Command add_analyze(CLI::App& app);       // cmd_analyze.cpp: attention analysis (issue #35)
Command add_eval_prompts(CLI::App& app);  // cmd_eval_prompts.cpp: prompt following (#33)
Command add_bench(CLI::App& app);         // parent of the bench subcommands below
Command add_eval(CLI::App& app);          // cmd_eval.cpp: evaluation jobs (issue #34)
Command add_sweep(CLI::App& app);         // cmd_eval.cpp: Pareto sweeps over accelerator settings

// A subcommand registered on a parent app, and what runs it.
struct TrainSubcommand {
    CLI::App* app;
    Command run;
};
// `train` subcommands in their own files; `train` is their parent app.
TrainSubcommand add_train_tokenizer(CLI::App& train);  // cmd_train_tokenizer.cpp

// `bench` subcommands, each in its own file; `bench` is their parent app.
Command add_bench_attention(CLI::App& bench);  // cmd_bench_kernels.cpp
Command add_bench_cs4a(CLI::App& bench);       // cmd_bench_kernels.cpp
Command add_bench_e2e(CLI::App& bench);        // cmd_bench_e2e.cpp
Command add_bench_mar(CLI::App& bench);        // cmd_bench_mar.cpp
Command add_bench_eval(CLI::App& bench);       // cmd_bench_eval.cpp: eval scoring overlap (#34)

}  // namespace varscope::cli
