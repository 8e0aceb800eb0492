// `varscope-cli train emoji-features`: trains the emoji feature network
// (core/metrics/emoji_features.h) as a classifier of emoji64's classes on the packed data set,
// with augmentation that keeps an emoji recognisable, and exports it with the data set's own
// Frechet reference statistics. Training on one style only and testing on the other (the
// "cross-style" check, `train_styles`) tells how far its features generalise beyond the
// drawings it has seen.
#pragma once

#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/metrics/emoji_features.h"
#include "core/training/train_common.h"

namespace varscope {

// Random per-image changes of a training batch. Geometry: scale by a factor in
// [scale_min, scale_max] about the centre and shift by up to shift_px pixels in x and y, new
// border white (the packed images are composited on white). Colour: brightness, contrast and
// saturation each times 1 + u * amount, u uniform in [-1, 1]. No flips (arrows and text would
// change meaning).
struct EmojiAugment {
    double shift_px = 4;
    double scale_min = 0.85, scale_max = 1.1;
    double brightness = 0.1, contrast = 0.1, saturation = 0.1;
    nlohmann::json to_json() const;
    static EmojiAugment from_json(const nlohmann::json& j);  // std::invalid_argument naming keys
};

// Images in [-1, 1] (N, 3, H, W), on any device; the draws come from `gen` (CPU).
at::Tensor augment_emoji_batch(const at::Tensor& images, const EmojiAugment& a, at::Generator& gen);

struct EmojiFeatureTrainJob {
    EmojiFeatureConfig model;
    TrainConfig train;
    EmojiAugment augment;
    double label_smoothing = 0.1;
    // Draw training rows with probability 1 / (images of their class) instead of uniformly: the
    // 310 classes with skin tones have 12 images each and took half of the uniform draws (a
    // CPU run of 450 uniform steps: 66 % accuracy on them, 8 % on the 1,588 two-image classes).
    bool balance_classes = true;
    // The styles trained on ("google" = packed style 0, "twitter" = 1); rows of the other
    // style are only evaluated (held-out accuracy).
    std::vector<std::string> train_styles = {"google", "twitter"};
    std::string data_path;  // packed images (pack-emoji): images, labels, styles
    std::string run_dir;
};

// The config file's sections other than "train": "model", "augment", "label_smoothing",
// "balance_classes", "train_styles" (missing ones keep defaults). std::invalid_argument naming
// the key.
void apply_emoji_feature_config(const nlohmann::json& j, EmojiFeatureTrainJob& job);

// Writes <run_dir>/final.safetensors (fp32) and <run_dir>/export-fp16.safetensors (what ships:
// fp16 weights, float64 "reference.mu" / "reference.sigma" over every packed image, metadata
// "varscope.kind", "varscope.config", "varscope.classes", "varscope.preprocessing",
// "varscope.training"). Returns the report: "train", "by_style" and "heldout" (the styles not
// trained on) each {"images", "accuracy" over images, "class_mean_accuracy" over classes}, no
// augmentation.
nlohmann::json train_emoji_features(const EmojiFeatureTrainJob& job, std::ostream& out);

}  // namespace varscope
