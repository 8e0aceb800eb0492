// `varscope-cli bench`: benchmarks that print ratios measured side by side in one run.
#include <map>

#include "app/cli/commands.h"

namespace varscope::cli {

Command add_bench(CLI::App& app) {
    auto* bench = app.add_subcommand(
        "bench", "Benchmarks: kernels vs torch backends, end to end, eval throughput");
    bench->require_subcommand(1);
    auto runners = std::make_shared<std::map<CLI::App*, Command>>();
    auto add = [&](Command (*fn)(CLI::App&), const char* name) {
        auto r = fn(*bench);
        (*runners)[bench->get_subcommand(name)] = std::move(r);
    };
    add(add_bench_attention, "attention");
    add(add_bench_cs4a, "cs4a");
    add(add_bench_e2e, "e2e");
    add(add_bench_mar, "mar");
    add(add_bench_eval, "eval");
    return [bench, runners]() -> int {
        for (auto* sub : bench->get_subcommands()) return runners->at(sub)();
        return 2;
    };
}

}  // namespace varscope::cli
