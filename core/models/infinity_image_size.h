// The image size an Infinity model was trained for, so that a small model (the embedded emoji
// text-to-image one: 7 scales up to a 16x16 latent, "0.06M") samples at its own size without the
// user naming it. `train infinity` writes the size in the export's "varscope.infinity_train"
// metadata ({"pixels": "0.06M", "h_div_w": 1, ...}); for files without it the BSQ VAE's
// "varscope.bsq_scales" (the schedule it was trained on) decides; official files have neither
// and get the official "1M". Torch-free header.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace varscope {

inline constexpr const char* kInfinityTrainMetadataKey = "varscope.infinity_train";
inline constexpr const char* kBsqScalesMetadataKey = "varscope.bsq_scales";

struct InfinityImageSize {
    std::string pixels = "1M";  // "0.06M", "0.25M", "0.60M", "1M"
    double h_div_w = 1.0;
    std::string source = "official";  // where it came from: "metadata", "vae scales", "official"
};

// The smallest pixel budget whose square (h_div_w 1) schedule ends at a latent_side x
// latent_side grid; nullopt when none does.
std::optional<std::string> pixels_for_latent_side(int64_t latent_side);

// From the metadata texts (empty = the entry is absent): `train_json` is the transformer's
// "varscope.infinity_train", `vae_scales_json` the VAE's "varscope.bsq_scales". A present but
// malformed entry throws std::invalid_argument naming the entry and the field.
InfinityImageSize infinity_image_size_from(const std::string& train_json,
                                           const std::string& vae_scales_json);

// Reads both entries (torch.save files have none); CheckpointError naming the file when an
// entry is malformed. `vae_path` may be "".
InfinityImageSize read_infinity_image_size(const std::string& model_path,
                                           const std::string& vae_path);

}  // namespace varscope
