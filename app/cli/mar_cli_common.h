// Helpers shared by the subcommands: MAR configs for random weights (--random of generate and
// compare, bench mar) and the output checks every command that writes files makes before any
// work. Implementation: mar_cli_common.cpp.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "core/mar_pipeline.h"

namespace varscope::cli {

// "mar_base" | "mar_large" | "mar_huge" | inline JSON | a JSON file.
MarConfig mar_config_argument(const std::string& spec);

// Output checks before any work is done, so a bad path fails in a second, not after sampling:
// the folder of `path` exists and is writable (probed by creating a file), `path` does not
// exist unless `force`, it is not an input of the run (io_paths.h), and, with `image`, its
// extension is a supported image format.
// `flag` names the option in messages. std::invalid_argument on failure.
void check_output_file(const std::string& path, bool force, const std::string& flag,
                       bool image = false);
// Throws std::invalid_argument when two of a run's outputs ({flag, path}, empty paths ignored)
// are one file: "-o x.png --tokens-out x.png" wrote the tokens over the image and said done.
void check_distinct_outputs(const std::vector<std::pair<std::string, std::string>>& outputs);
// generate / generate-mar once the batch of n images is known: each numbered image (--out) is
// checked, and no two outputs name one file.
void check_generate_outputs(const std::string& out, int64_t n, const std::string& tokens_out,
                            const std::string& timings_json, bool force);
// Creates `dir` (and parents) and checks that files can be written in it.
void prepare_output_dir(const std::string& dir, const std::string& flag);

}  // namespace varscope::cli
