#include "app/cli/run_report.h"

#include <ATen/ATen.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <stdexcept>

#include "app/exec_env/exec_env.h"
#include "core/io/atomic_file.h"
#include "core/pipeline.h"

namespace varscope::cli {

double median(std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

std::string now_utc() {
    auto t = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
    return buf;
}

void write_json(const nlohmann::json& j, const std::string& path, bool overwrite) {
    if (!overwrite && std::filesystem::exists(path))
        throw std::invalid_argument("'" + path + "' exists; pass --force to overwrite it");
    write_text(j.dump(2) + "\n", path);
}

void write_text(const std::string& text, const std::string& path) {
    write_file_atomic(path, text);
}

nlohmann::json environment_json(const std::string& device) {
    nlohmann::json j = {{"date", now_utc()},
                        {"torch", TORCH_VERSION},
                        {"device", device},
                        {"cuda_available", cuda_available()}};
    j["exec_policy"] = to_json(exec_policy());
    return j;
}

const ExecPolicy& exec_policy() {
    static const ExecPolicy policy = exec_env::policy_from_environment();
    return policy;
}

}  // namespace varscope::cli
