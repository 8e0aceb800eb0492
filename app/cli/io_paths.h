// No output of a run may be one of its inputs, --force or not: `--tokens-out` naming the
// `--var` checkpoint overwrote it and the command said done. main() records what the parsed
// command reads; every output check (check_output_file and the commands' own) asks here.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace varscope::cli {

// Whether an option of the command names a file it writes (--out, -o, --output, --json,
// --tokens-out, --timings-json, --forward-out, --classes-out, --trace).
bool is_output_option(const CLI::Option& opt);

// Records as inputs the values of the parsed command's options (and its parsed subcommands')
// that name existing files, except output options. main() calls it once after parsing.
void record_inputs(const CLI::App& cmd);
// Records `path` (when it exists) as an input that `flag` names, e.g. a data set's index file.
void record_input(const std::string& path, const std::string& flag);

// Throws std::invalid_argument "<flag>: '<path>' is also an input of this run (<input flag>)"
// when `path` is a recorded input: the same path after symlinks and "..", or the same file
// through a hard link.
void check_not_an_input(const std::string& path, const std::string& flag);

// Forgets the recorded inputs (tests).
void clear_inputs();

}  // namespace varscope::cli
