#include "core/metrics/emoji_features.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <filesystem>
#include <stdexcept>
#include <type_traits>

#include "core/io/checkpoint.h"
#include "core/io/json_fields.h"
#include "core/io/json_read.h"
#include "core/io/module_binding.h"
#include "core/resources.h"

namespace varscope {
namespace {

namespace nn = torch::nn;

nn::Conv2d conv3x3(int64_t in, int64_t out, int64_t stride) {
    return nn::Conv2d(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1));
}

nn::GroupNorm group_norm(int64_t groups, int64_t channels) {
    return nn::GroupNorm(nn::GroupNormOptions(groups, channels));
}

// One residual block: x + conv2(silu(norm2(conv1(silu(norm1(x)))))).
struct ResidualBlockImpl : nn::Module {
    ResidualBlockImpl(int64_t channels, int64_t groups)
        : norm1(register_module("norm1", group_norm(groups, channels))),
          conv1(register_module("conv1", conv3x3(channels, channels, 1))),
          norm2(register_module("norm2", group_norm(groups, channels))),
          conv2(register_module("conv2", conv3x3(channels, channels, 1))) {}
    at::Tensor forward(const at::Tensor& x) {
        auto h = conv1(at::silu(norm1(x)));
        return x + conv2(at::silu(norm2(h)));
    }
    nn::GroupNorm norm1;
    nn::Conv2d conv1;
    nn::GroupNorm norm2;
    nn::Conv2d conv2;
};
TORCH_MODULE(ResidualBlock);

// Stage entry: stride-2 conv, GroupNorm, SiLU.
struct DownsampleImpl : nn::Module {
    DownsampleImpl(int64_t in, int64_t out, int64_t groups)
        : conv(register_module("conv", conv3x3(in, out, 2))),
          norm(register_module("norm", group_norm(groups, out))) {}
    at::Tensor forward(const at::Tensor& x) { return at::silu(norm(conv(x))); }
    nn::Conv2d conv;
    nn::GroupNorm norm;
};
TORCH_MODULE(Downsample);

bool is_reference(const std::string& name) {
    return name == kEmojiReferenceMu || name == kEmojiReferenceSigma;
}

}  // namespace

void EmojiFeatureConfig::validate() const {
    auto need = [](bool ok, const std::string& msg) {
        if (!ok) throw std::invalid_argument("emoji feature config: " + msg);
    };
    need(!channels.empty() && channels.size() <= 6, "'channels' needs 1 to 6 stages");
    need(groups >= 1, "'groups' must be >= 1");
    for (int64_t c : channels)
        need(c >= 1 && c <= 4096 && c % groups == 0,
             "every entry of 'channels' must be in [1, 4096] and divisible by 'groups' (" +
                 std::to_string(groups) + "), got " + std::to_string(c));
    need(blocks >= 0 && blocks <= 8, "'blocks' must be in [0, 8]");
    need(num_classes >= 1, "'num_classes' must be >= 1");
}

nlohmann::json EmojiFeatureConfig::to_json() const {
    return {{"architecture", kEmojiFeaturesKind},
            {"channels", channels},
            {"blocks", blocks},
            {"groups", groups},
            {"num_classes", num_classes},
            {"image_size", kEmojiFeatureImageSize}};
}

EmojiFeatureConfig EmojiFeatureConfig::from_json(const nlohmann::json& j) {
    EmojiFeatureConfig c;
    if (!j.is_object()) throw std::invalid_argument("emoji feature config: expected an object");
    require_known_fields(j, c.to_json(), "emoji feature config");
    static const char* const kNotWhole =
        "emoji feature config: 'channels' must be a list of whole numbers and 'blocks', "
        "'groups', 'num_classes' whole numbers";
    if (j.contains("architecture") && j["architecture"] != kEmojiFeaturesKind)
        throw std::invalid_argument("emoji feature config: 'architecture' must be \"" +
                                    std::string(kEmojiFeaturesKind) + "\", got " +
                                    j["architecture"].dump());
    if (j.contains("image_size") && j["image_size"] != kEmojiFeatureImageSize)
        throw std::invalid_argument("emoji feature config: 'image_size' must be 64");
    // Checked before they are read: the library would cast 2.5 to 2 (and 1e40 is undefined
    // behaviour), and what fits converts without an exception.
    auto whole = [&](const char* key, auto& v) {
        if (!j.contains(key)) return;
        if (!json_value_fits<std::decay_t<decltype(v)>>(j[key]))
            throw std::invalid_argument(kNotWhole);
        j[key].get_to(v);
    };
    whole("channels", c.channels);
    whole("blocks", c.blocks);
    whole("groups", c.groups);
    whole("num_classes", c.num_classes);
    c.validate();
    return c;
}

EmojiFeatureNetImpl::EmojiFeatureNetImpl(const EmojiFeatureConfig& config) : config_(config) {
    config_.validate();
    const auto& ch = config_.channels;
    stem_ = register_module("stem", conv3x3(3, ch[0], 2));
    down_ = register_module("down", nn::ModuleList());
    blocks_ = register_module("blocks", nn::ModuleList());
    for (size_t s = 0; s < ch.size(); ++s) {
        if (s > 0) down_->push_back(Downsample(ch[s - 1], ch[s], config_.groups));
        for (int64_t b = 0; b < config_.blocks; ++b)
            blocks_->push_back(ResidualBlock(ch[s], config_.groups));
    }
    norm_out_ = register_module("norm_out", group_norm(config_.groups, ch.back()));
    head_ = register_module("head", nn::Linear(ch.back(), config_.num_classes));
}

at::Tensor EmojiFeatureNetImpl::features(const at::Tensor& input) {
    auto x = stem_(input);
    size_t block = 0;
    for (size_t s = 0; s < config_.channels.size(); ++s) {
        if (s > 0) x = down_[s - 1]->as<DownsampleImpl>()->forward(x);
        for (int64_t b = 0; b < config_.blocks; ++b)
            x = blocks_[block++]->as<ResidualBlockImpl>()->forward(x);
    }
    return at::silu(norm_out_(x)).mean({2, 3});
}

at::Tensor EmojiFeatureNetImpl::logits_of(const at::Tensor& features) {
    return head_(features);
}

at::Tensor emoji_feature_input(const at::Tensor& images) {
    if (!images.defined() || images.dim() != 4 || images.size(1) != 3 || images.size(0) < 1 ||
        images.size(2) < 1 || images.size(3) < 1)
        throw std::invalid_argument(
            "emoji features: images must be (N, 3, H, W) uint8 or float in [0, 1]");
    at::Tensor x = images.scalar_type() == at::kByte
                       ? images.to(at::kFloat)
                       : images.to(at::kFloat).mul(255).round().clamp(0, 255);
    if (x.size(2) != kEmojiFeatureImageSize || x.size(3) != kEmojiFeatureImageSize)
        x = at::_upsample_bilinear2d_aa(x, {kEmojiFeatureImageSize, kEmojiFeatureImageSize},
                                        /*align_corners=*/false);
    return x.div(127.5).sub(1.0);
}

EmojiFeatureNetwork::EmojiFeatureNetwork(const EmojiFeatureConfig& config, const StateDict& weights,
                                         const std::string& source)
    : net_(config) {
    StateDict model;
    for (const auto& [name, t] : weights)
        if (!is_reference(name)) model[name] = t;
    BindOptions options;
    options.what = source;
    bind_state_dict(*net_, model, options);
    const auto mu = weights.find(kEmojiReferenceMu), sigma = weights.find(kEmojiReferenceSigma);
    if ((mu == weights.end()) != (sigma == weights.end()))
        throw CheckpointError(source + ": '" + kEmojiReferenceMu + "' and '" +
                              kEmojiReferenceSigma + "' come together; one is missing");
    if (mu != weights.end()) {
        const int64_t d = config.feature_dim();
        if (mu->second.sizes() != at::IntArrayRef{d} ||
            sigma->second.sizes() != at::IntArrayRef{d, d} || !mu->second.is_floating_point() ||
            !sigma->second.is_floating_point())
            throw CheckpointError(source + ": reference statistics must be float (" +
                                  std::to_string(d) + ") and (" + std::to_string(d) + ", " +
                                  std::to_string(d) + "), the network's feature size");
        reference_mu_ = mu->second.to(at::kCPU, at::kDouble);
        reference_sigma_ = sigma->second.to(at::kCPU, at::kDouble);
    }
    net_->eval();
}

EmojiFeatureNetwork EmojiFeatureNetwork::load(const std::string& path) {
    const auto meta = read_safetensors_metadata(path);
    const auto kind = meta.find("varscope.kind");
    if (kind == meta.end() || kind->second != kEmojiFeaturesKind)
        throw CheckpointError(
            path + ": not an emoji feature network (metadata 'varscope.kind' " +
            (kind == meta.end() ? std::string("missing") : "is '" + kind->second + "'") +
            ", expected '" + kEmojiFeaturesKind + "')");
    const auto cfg = meta.find("varscope.config");
    if (cfg == meta.end())
        throw CheckpointError(path + ": metadata 'varscope.config' (the architecture) missing");
    EmojiFeatureConfig config;
    try {
        config = EmojiFeatureConfig::from_json(parse_json(cfg->second, "'varscope.config'"));
    } catch (const std::exception& e) {
        throw CheckpointError(path + ": metadata 'varscope.config': " + e.what());
    }
    return EmojiFeatureNetwork(config, load_safetensors(path), path);
}

void EmojiFeatureNetwork::to(const at::Device& device) {
    net_->to(device);
    device_ = device;
}

std::string shipped_emoji_features_path() {
    return (std::filesystem::path(resource_dir()) / "models" / "emoji-features.safetensors")
        .string();
}

EmojiFeatures EmojiFeatureNetwork::features(const at::Tensor& images) const {
    c10::InferenceMode guard;
    const auto input = emoji_feature_input(images.to(device_));
    EmojiFeatures out;
    out.features = net_->features(input);
    out.logits = net_->logits_of(out.features);
    return out;
}

}  // namespace varscope
