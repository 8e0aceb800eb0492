// Sampling from the shipped emoji VAR (core/resources.h: embedded_model_files) as the tests do.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/pipeline.h"

namespace varscope::testing {

// Seed 3 and CFG 3, which draw recognisable emoji (red heart 1891, cat 581); no per-scale
// device syncs.
inline VarSampleOptions emoji_options(std::vector<int64_t> classes) {
    VarSampleOptions o;
    o.class_ids = std::move(classes);
    o.seed = 3;
    o.cfg = 3.0;
    o.time_scales = false;
    return o;
}

}  // namespace varscope::testing
