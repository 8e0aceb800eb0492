#include "app/cli/commands.h"
namespace varscope::cli {
Runner add_compare(CLI::App& app) {
    app.add_subcommand("compare", "Baseline vs accelerated (not yet)");
    return [] { return 2; };
}
}  // namespace varscope::cli
