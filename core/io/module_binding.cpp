#include "core/io/module_binding.h"

#include <torch/nn/module.h>

#include <algorithm>
#include <sstream>

namespace varscope {
namespace {

bool contains(const std::vector<std::string>& list, const std::string& name) {
    return std::find(list.begin(), list.end(), name) != list.end();
}

std::string shape_str(at::IntArrayRef s) {
    std::ostringstream os;
    os << '[';
    for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
    os << ']';
    return os.str();
}

}  // namespace

StateDict module_state_dict(const torch::nn::Module& module) {
    StateDict out;
    for (const auto& p : module.named_parameters(/*recurse=*/true)) out[p.key()] = p.value();
    for (const auto& b : module.named_buffers(/*recurse=*/true)) out[b.key()] = b.value();
    return out;
}

void bind_state_dict(torch::nn::Module& module, const StateDict& dict, const BindOptions& options) {
    StateDict targets = module_state_dict(module);
    std::vector<std::string> problems;
    for (const auto& [name, target] : targets) {
        auto it = dict.find(name);
        if (it == dict.end()) {
            if (!contains(options.optional_buffers, name))
                problems.push_back("missing tensor '" + name + "' (expected shape " +
                                   shape_str(target.sizes()) + ")");
            continue;
        }
        if (it->second.sizes() != target.sizes())
            problems.push_back("tensor '" + name + "' has shape " + shape_str(it->second.sizes()) +
                               ", expected " + shape_str(target.sizes()));
        else if (!it->second.is_floating_point() && target.is_floating_point())
            problems.push_back("tensor '" + name + "' has non-float dtype " +
                               std::string(c10::toString(it->second.scalar_type())));
    }
    for (const auto& [name, value] : dict)
        if (!targets.count(name) && !contains(options.ignore_unexpected, name))
            problems.push_back("unexpected tensor '" + name + "' " + shape_str(value.sizes()));

    if (!problems.empty()) {
        std::ostringstream os;
        os << options.what << ": " << problems.size() << " problem(s) binding weights:";
        const size_t shown = std::min<size_t>(problems.size(), 12);
        for (size_t i = 0; i < shown; ++i) os << "\n  - " << problems[i];
        if (shown < problems.size()) os << "\n  ... and " << problems.size() - shown << " more";
        throw CheckpointError(os.str());
    }

    at::NoGradGuard no_grad;
    for (auto& [name, target] : targets) {
        auto it = dict.find(name);
        if (it == dict.end()) continue;
        target.copy_(it->second.to(target.device(), target.scalar_type()));
    }
}

}  // namespace varscope
