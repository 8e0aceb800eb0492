// Small helpers shared by the commands that time runs and write JSON reports.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace varscope::cli {

double median(std::vector<double> v);
std::string now_utc();  // ISO 8601, e.g. 2026-11-22T01:30:00Z
// Writes `j` to `path` atomically (temporary file + rename); refuses to overwrite unless asked.
void write_json(const nlohmann::json& j, const std::string& path, bool overwrite);
// Torch and CUDA versions, device name: what a benchmark result needs to be comparable.
nlohmann::json environment_json(const std::string& device);

}  // namespace varscope::cli
