#include "app/cli/commands.h"
namespace varscope::cli {
Runner add_bench_e2e(CLI::App& bench) {
    bench.add_subcommand("e2e", "End-to-end (not yet)");
    return [] { return 2; };
}
}  // namespace varscope::cli
