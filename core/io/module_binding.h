// Copies a StateDict into a torch::nn::Module whose parameter and buffer names follow the
// official layout, reporting every missing, unexpected or mis-shaped tensor by name.
#pragma once

#include <string>
#include <vector>

#include "core/io/state_dict.h"

namespace torch::nn {
class Module;
}

namespace varscope {

struct BindOptions {
    // Names present in official checkpoints that our modules deliberately do not hold.
    std::vector<std::string> ignore_unexpected;
    // Buffers our modules compute themselves when a checkpoint omits them.
    std::vector<std::string> optional_buffers;
    std::string what = "checkpoint";  // used in messages, e.g. the file name
};

// Throws CheckpointError listing all problems at once (up to a readable limit).
void bind_state_dict(torch::nn::Module& module, const StateDict& dict, const BindOptions& options);

// Parameters and buffers of `module` as a StateDict (shared storage, not copies).
StateDict module_state_dict(const torch::nn::Module& module);

}  // namespace varscope
