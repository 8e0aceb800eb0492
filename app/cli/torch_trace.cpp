#include "app/cli/torch_trace.h"

#include <torch/csrc/autograd/profiler_kineto.h>

#include <cctype>
#include <cstdio>
#include <fstream>
#include <set>
#include <stdexcept>

namespace varscope::cli {

namespace prof = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

void run_traced(const std::string& path, bool cuda, const std::function<void()>& fn) {
    // Input shapes on: they give each attention call's key count (and so its FLOP rate).
    const ProfilerConfig config(ProfilerState::KINETO, /*report_input_shapes=*/true);
    std::set<ActivityType> activities{ActivityType::CPU};
    if (cuda) activities.insert(ActivityType::CUDA);
    try {
        prof::prepareProfiler(config, activities);
        prof::enableProfiler(config, activities);
    } catch (const std::exception& e) {
        throw std::runtime_error(std::string("--trace: the profiler did not start: ") + e.what());
    }
    try {
        fn();
    } catch (...) {
        prof::disableProfiler();
        throw;
    }
    const auto result = prof::disableProfiler();
    if (!result) throw std::runtime_error("--trace: the profiler returned no result");
    result->save(path);
    std::ifstream written(path);
    if (!written || written.peek() == std::ifstream::traits_type::eof())
        throw std::runtime_error("--trace: nothing was written to '" + path + "'");
}

std::string trace_file_name(int index, const std::string& method) {
    std::string s;
    for (const char c : method)
        s += std::isalnum(static_cast<unsigned char>(c)) ||
                     std::string("-_.+@").find(c) != std::string::npos
                 ? c
                 : '_';
    if (s.size() > 80) s.resize(80);
    char prefix[16];
    std::snprintf(prefix, sizeof prefix, "%02d-", index);
    return prefix + s + ".trace.json";
}

}  // namespace varscope::cli
