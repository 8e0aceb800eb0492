#include "tests/test_util.h"

#include <random>

namespace varscope::testing {

TempDir::TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("varscope-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
}

std::string source_dir() {
    return VARSCOPE_SOURCE_DIR;
}

}  // namespace varscope::testing

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "tests/tiny_models.h"

namespace varscope::testing {

void randomise(torch::nn::Module& m, uint64_t seed) {
    at::NoGradGuard g;
    auto gen = at::detail::createCPUGenerator(seed);
    for (auto& p : m.named_parameters()) {
        auto t = p.value();
        const double std = t.dim() >= 2 ? 1.0 / std::sqrt(double(t[0].numel())) : 0.05;
        auto r = at::empty(t.sizes(), at::kFloat).normal_(0.0, std, gen);
        if (p.key().find("norm") != std::string::npos && t.dim() == 1) r.add_(1.0);
        t.copy_(r);
    }
}

}  // namespace varscope::testing
