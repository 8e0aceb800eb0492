// The model families that sample images. Torch-free (the GUI's Qt side includes it).
#pragma once

#include <string>

namespace varscope {

// VAR (next-scale prediction) or MAR (masked autoregression with a diffusion head).
enum class Family { Var, Mar };
const char* family_id(Family f);               // "var" | "mar"
Family family_from_id(const std::string& id);  // anything but "mar" is VAR
const char* family_title(Family f);            // "VAR" | "MAR"

}  // namespace varscope
