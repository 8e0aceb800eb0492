// The one place that tells model families apart, from tensor names alone.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/io/state_dict.h"

namespace varscope {

enum class ModelFamily {
    Unknown,
    VarTransformer,
    MultiScaleVqvae,
    MarTransformer,
    KlVae,
    InfinityTransformer,
    BsqVae  // Infinity's BSQ multi-scale VAE (either naming; the official files nest it in "vae")
};

// From the top-level names only (see detect_family_nested for training checkpoints).
ModelFamily detect_family(const StateDict& dict);

// The family and, for training checkpoints that nest the weights ({"model_ema": ...},
// {"model": ...}, {"state_dict": ...}, Infinity's {"vae": ...}), the wrapper prefix to
// select_prefix() ("" = top level; the first wrapper that holds a known family wins, EMA first).
struct DetectedFamily {
    ModelFamily family = ModelFamily::Unknown;
    std::string prefix;
};
DetectedFamily detect_family_nested(const StateDict& dict);
std::string family_name(ModelFamily f);

// The architecture `dict` (the family's own tensors, wrapper prefix removed) describes, as the
// family's config JSON read off tensor names and shapes; null for an unknown family. What `info`
// prints: a new family adds its case here, beside its detection.
nlohmann::json inferred_config(ModelFamily f, const StateDict& dict);

}  // namespace varscope
