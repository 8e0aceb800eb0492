// varscope-cli subcommands. Each registers its options on the CLI11 app and runs on the public
// library API only (core/pipeline.h and friends).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace varscope::cli {

using Runner = std::function<int()>;

Runner add_info(CLI::App& app);
Runner add_generate(CLI::App& app);
Runner add_generate_mar(CLI::App& app);  // cmd_generate_mar.cpp
Runner add_teacher_forward(CLI::App& app);
Runner add_pack_emoji(CLI::App& app);
Runner add_train(CLI::App& app);
Runner add_compare(CLI::App& app);
Runner add_compare_mar(CLI::App& app);  // cmd_compare_mar.cpp
Runner add_methods(CLI::App& app);
Runner add_bench(CLI::App& app);  // parent of the bench subcommands below

// `bench` subcommands, each in its own file; `bench` is their parent app.
Runner add_bench_attention(CLI::App& bench);  // cmd_bench_kernels.cpp
Runner add_bench_cs4a(CLI::App& bench);       // cmd_bench_kernels.cpp
Runner add_bench_e2e(CLI::App& bench);        // cmd_bench_e2e.cpp
Runner add_bench_mar(CLI::App& bench);        // cmd_bench_mar.cpp

}  // namespace varscope::cli
