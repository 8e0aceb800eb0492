#include "core/models/infinity_image_size.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/io/checkpoint.h"
#include "core/io/json_read.h"
#include "core/io/state_dict.h"  // CheckpointError
#include "core/models/infinity_schedule.h"

namespace varscope {

std::optional<std::string> pixels_for_latent_side(int64_t latent_side) {
    for (const auto& px : infinity_pixel_budgets()) {  // smallest first
        const auto last = infinity_schedule(1.0, px).scales.back();
        if (last[0] == latent_side && last[1] == latent_side) return px;
    }
    return std::nullopt;
}

InfinityImageSize infinity_image_size_from(const std::string& train_json,
                                           const std::string& vae_scales_json) {
    InfinityImageSize size;
    if (!train_json.empty()) {
        const std::string what = kInfinityTrainMetadataKey;
        const nlohmann::json j = parse_json(train_json, what);
        if (!j.is_object()) throw std::invalid_argument(what + ": must be a JSON object");
        if (j.contains("pixels")) {
            const auto& p = j["pixels"];
            if (!p.is_string())
                throw std::invalid_argument(what + ".pixels: must be a string such as \"0.06M\"");
            size.pixels = p.get<std::string>();
            if (j.contains("h_div_w")) {
                if (!j["h_div_w"].is_number() || j["h_div_w"].get<double>() <= 0)
                    throw std::invalid_argument(what + ".h_div_w: must be a number > 0");
                size.h_div_w = j["h_div_w"].get<double>();
            }
            try {
                infinity_schedule(size.h_div_w, size.pixels);  // a known budget and ratio
            } catch (const std::invalid_argument& e) {
                throw std::invalid_argument(what + ": " + e.what());
            }
            size.source = "metadata";
            return size;
        }
    }
    if (!vae_scales_json.empty()) {
        const std::string what = kBsqScalesMetadataKey;
        const nlohmann::json j = parse_json(vae_scales_json, what);
        if (!j.is_array() || j.empty() || !j.back().is_number_integer())
            throw std::invalid_argument(what + ": must be a list of scale sides such as [1, 2, 4]");
        if (const auto px = pixels_for_latent_side(j.back().get<int64_t>())) {
            size.pixels = *px;
            size.source = "vae scales";
            return size;
        }
    }
    size.source = "official";
    return size;
}

namespace {
// torch.save files (zip archives) carry no metadata; read_safetensors_metadata refuses them.
bool is_torch_save(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    char magic[2] = {};
    return in.read(magic, 2) && magic[0] == 'P' && magic[1] == 'K';
}

std::string metadata_entry(const std::string& path, const char* key) {
    if (path.empty() || is_torch_save(path)) return {};
    const auto metadata = read_safetensors_metadata(path);
    const auto it = metadata.find(key);
    return it == metadata.end() ? std::string() : it->second;
}
}  // namespace

InfinityImageSize read_infinity_image_size(const std::string& model_path,
                                           const std::string& vae_path) {
    const std::string train = metadata_entry(model_path, kInfinityTrainMetadataKey);
    const std::string scales = metadata_entry(vae_path, kBsqScalesMetadataKey);
    try {
        return infinity_image_size_from(train, scales);
    } catch (const std::invalid_argument& e) {
        throw CheckpointError((train.empty() ? vae_path : model_path) + ": " + e.what());
    }
}

}  // namespace varscope
