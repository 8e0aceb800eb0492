// The teacher-forced input of a VAR model (`varscope-cli teacher-forward`, Runner::
// teacher_forward): 'labels' (B) and one token map 'tokens.<si>' (B, pn*pn) per scale, read from
// a user's safetensors/.pth file. Checked before the model sees it (and fuzzed:
// fuzz/fuzz_teacher_input.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "core/io/state_dict.h"
#include "core/models/var.h"

namespace varscope {

struct VarTeacherInput {
    at::Tensor labels;               // (B) int64, -1 or num_classes = unconditional
    std::vector<at::Tensor> tokens;  // per scale (B, pn*pn) int64
};

// Throws std::invalid_argument("<path>: ...") naming the tensor and the rule it breaks.
VarTeacherInput check_var_teacher_input(const StateDict& input, const VarConfig& c,
                                        const std::string& path);

}  // namespace varscope
