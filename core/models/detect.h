// The one place that tells model families apart, from tensor names alone.
#pragma once

#include <string>

#include "core/io/state_dict.h"

namespace varscope {

enum class ModelFamily { Unknown, VarTransformer, MultiScaleVqvae, MarTransformer, KlVae };

ModelFamily detect_family(const StateDict& dict);
std::string family_name(ModelFamily f);

}  // namespace varscope
