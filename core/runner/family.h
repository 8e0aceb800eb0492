// The model families that sample images. Torch-free (the GUI's Qt side includes it).
#pragma once

#include <string>

namespace varscope {

// VAR (next-scale prediction), MAR (masked autoregression with a diffusion head) or Infinity
// (text-to-image next-scale prediction of bits).
enum class Family { Var, Mar, Infinity };
const char* family_id(Family f);               // "var" | "mar" | "infinity"
Family family_from_id(const std::string& id);  // anything but "mar" / "infinity" is VAR
const char* family_title(Family f);            // "VAR" | "MAR" | "Infinity"

}  // namespace varscope
