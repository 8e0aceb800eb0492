// Small helpers shared by the commands that time runs and write JSON reports.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/exec_policy.h"

namespace varscope::cli {

double median(std::vector<double> v);
std::string now_utc();  // ISO 8601, e.g. 2026-11-22T01:30:00Z
// Writes `j` to `path` atomically (temporary file + rename); refuses to overwrite unless asked.
void write_json(const nlohmann::json& j, const std::string& path, bool overwrite);
// Writes `text` to `path` atomically (temporary file + rename), replacing an existing file.
void write_text(const std::string& text, const std::string& path);
// Torch and CUDA versions, device name and the execution policy: what a benchmark result needs
// to be comparable.
nlohmann::json environment_json(const std::string& device);
// This run's execution policy: the VARSCOPE_* variables (app/exec_env), read on the first call
// (main makes it, so that a malformed value stops the program before any work). Every pipeline
// the CLI builds gets it (LoadOptions::exec), every JSON it writes records it.
const ExecPolicy& exec_policy();

}  // namespace varscope::cli
