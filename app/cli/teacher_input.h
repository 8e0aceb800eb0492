// The input of `varscope-cli teacher-forward`: a safetensors/.pth file with 'labels' (B) and one
// token map 'tokens.<si>' (B, pn*pn) per scale of the model. Checked before the model sees it
// (and fuzzed: fuzz/fuzz_teacher_input.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "core/io/state_dict.h"
#include "core/models/var.h"

namespace varscope::cli {

struct TeacherInput {
    at::Tensor labels;               // (B) int64, -1 or num_classes = unconditional
    std::vector<at::Tensor> tokens;  // per scale (B, pn*pn) int64
};

// Throws std::invalid_argument("<path>: ...") naming the tensor and the rule it breaks.
TeacherInput check_teacher_input(const StateDict& input, const VarConfig& c,
                                 const std::string& path);

}  // namespace varscope::cli
