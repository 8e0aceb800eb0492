// Sampling settings a model file recommends, so first use gives its best images without the user
// knowing its quirks (the small emoji VAR needs a tighter top-k than the official models' 900).
// Stored as the safetensors metadata entry "varscope.sampling", a JSON object with any of
// {"cfg": 3, "top_k": 40, "top_p": 0.8}; official .pth checkpoints carry none. Torch-free header
// (the GUI includes it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace varscope {

inline constexpr const char* kSamplingMetadataKey = "varscope.sampling";

struct SamplingRecommendation {
    std::optional<double> cfg;
    std::optional<int64_t> top_k;
    std::optional<double> top_p;

    bool empty() const { return !cfg && !top_k && !top_p; }
    std::string describe() const;  // "cfg 3, top-k 40, top-p 0.8" ("" when empty)
};

// Parses and range-checks the JSON text; throws std::invalid_argument naming the field, e.g.
// "varscope.sampling.top_p: must be a number in [0, 1], got 1.5".
SamplingRecommendation parse_sampling_recommendation(const std::string& json_text);

// Reads the recommendation of a model file: empty for files without one (and for .pth files);
// throws CheckpointError (file and field named) when the entry is malformed. Front ends warn and
// use no recommendation then: the weights are fine.
SamplingRecommendation read_sampling_recommendation(const std::string& model_path);

// MAR's counterpart, metadata entry "varscope.mar_sampling" (written by `train mar` from the
// config's "sampling"): {"num_iter": 16, "cfg": 3, "cfg_schedule": "linear", "temperature": 1,
// "num_sampling_steps": "250"}. The small emoji MAR needs more diffusion steps than the
// official 100, which a user could not guess.
inline constexpr const char* kMarSamplingMetadataKey = "varscope.mar_sampling";

struct MarSamplingRecommendation {
    std::optional<int64_t> num_iter;
    std::optional<double> cfg;
    std::optional<std::string> cfg_schedule;  // "linear" | "constant"
    std::optional<double> temperature;
    std::optional<std::string> num_sampling_steps;  // diffusion respacing, e.g. "250"

    bool empty() const {
        return !num_iter && !cfg && !cfg_schedule && !temperature && !num_sampling_steps;
    }
    std::string describe() const;  // "16 steps, cfg 3 (linear), ..." ("" when empty)
};

// Same rules as above: unknown keys and out-of-range values name the field.
MarSamplingRecommendation parse_mar_sampling_recommendation(const std::string& json_text);
MarSamplingRecommendation read_mar_sampling_recommendation(const std::string& model_path);

}  // namespace varscope
