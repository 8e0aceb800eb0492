// The embedded models' own feature network (issue #34): a small CNN trained by the project on
// emoji64 (`varscope-cli train emoji-features`), so that a fresh machine has a Frechet distance
// and a classification accuracy for the emoji models without the 95 MB FID Inception. Its
// numbers are comparable only with each other (same file), never with Inception FID.
//
// Architecture (stated in the export's "varscope.config"): a stride-2 3x3 stem conv (64 -> 32
// px), then one stage per entry of `channels`, each but the first opening with a stride-2 3x3
// conv + GroupNorm + SiLU, followed by `blocks` residual blocks (GroupNorm, SiLU, 3x3 conv,
// twice); a last GroupNorm + SiLU, global average pool -> the feature (channels.back() values),
// and a linear head -> the class logits (emoji64's classes, resources/models/emoji-classes.json).
//
// Preprocessing (emoji_feature_input): uint8 (N, 3, H, W), or float in [0, 1] quantised to uint8
// first (round half to even, clamped: what a PNG written and read back holds); other sizes than
// 64x64 are resized to 64x64 with antialiased bilinear interpolation (align_corners false, aspect
// ratio not kept); then x / 127.5 - 1, the training data's [-1, 1].
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/io/state_dict.h"

namespace varscope {

inline constexpr int64_t kEmojiFeatureImageSize = 64;
// The export's "varscope.kind" metadata: tells this network's file from the other models'.
inline constexpr const char* kEmojiFeaturesKind = "emoji-features";

struct EmojiFeatureConfig {
    std::vector<int64_t> channels = {32, 64, 128, 256};
    int64_t blocks = 1;  // residual blocks per stage
    int64_t groups = 8;  // GroupNorm groups (every channel count divisible by it)
    int64_t num_classes = 1911;

    int64_t feature_dim() const { return channels.back(); }
    // std::invalid_argument naming the field.
    void validate() const;
    nlohmann::json to_json() const;
    // Missing keys keep defaults; unknown keys and wrong types throw std::invalid_argument.
    static EmojiFeatureConfig from_json(const nlohmann::json& j);
};

class EmojiFeatureNetImpl : public torch::nn::Module {
  public:
    explicit EmojiFeatureNetImpl(const EmojiFeatureConfig& config);
    // Input as emoji_feature_input gives it; returns the pooled features (N, feature_dim).
    at::Tensor features(const at::Tensor& input);
    at::Tensor logits_of(const at::Tensor& features);
    const EmojiFeatureConfig& config() const { return config_; }

  private:
    EmojiFeatureConfig config_;
    torch::nn::Conv2d stem_{nullptr};
    torch::nn::ModuleList down_;    // stages 1..: stride-2 conv, GroupNorm
    torch::nn::ModuleList blocks_;  // per stage `blocks`: norm1, conv1, norm2, conv2
    torch::nn::GroupNorm norm_out_{nullptr};
    torch::nn::Linear head_{nullptr};
};
TORCH_MODULE(EmojiFeatureNet);

// See the file comment. std::invalid_argument for a tensor that is not (N, 3, H, W).
at::Tensor emoji_feature_input(const at::Tensor& images);

struct EmojiFeatures {
    at::Tensor features;  // (N, feature_dim) float32
    at::Tensor logits;    // (N, num_classes) float32
};

// Frechet reference statistics of the training images, stored in the export as
// "reference.mu" (D) and "reference.sigma" (D, D), float64.
inline constexpr const char* kEmojiReferenceMu = "reference.mu";
inline constexpr const char* kEmojiReferenceSigma = "reference.sigma";

// Where the shipped network lives: resources/models/emoji-features.safetensors under
// resource_dir() (the file need not exist).
std::string shipped_emoji_features_path();

// A trained network, ready for scoring (eval mode, float32, no gradients).
class EmojiFeatureNetwork {
  public:
    // Strict: every tensor of the config's network with its shape, nothing else but the
    // optional reference statistics (CheckpointError naming `source` and the tensors).
    EmojiFeatureNetwork(const EmojiFeatureConfig& config, const StateDict& weights,
                        const std::string& source);
    // An export of `train emoji-features`: needs "varscope.kind" = "emoji-features" and
    // "varscope.config" metadata. CheckpointError naming the file otherwise.
    static EmojiFeatureNetwork load(const std::string& path);

    const EmojiFeatureConfig& config() const { return net_->config(); }
    const at::Device& device() const { return device_; }
    void to(const at::Device& device);
    // Images as emoji_feature_input takes them, on any device (moved to the network's).
    EmojiFeatures features(const at::Tensor& images) const;
    // The shipped reference statistics (undefined tensors when the file has none).
    const at::Tensor& reference_mu() const { return reference_mu_; }
    const at::Tensor& reference_sigma() const { return reference_sigma_; }

  private:
    mutable EmojiFeatureNet net_;  // scoring runs the module's (non-const) forward
    at::Device device_ = at::kCPU;
    at::Tensor reference_mu_, reference_sigma_;
};

}  // namespace varscope
