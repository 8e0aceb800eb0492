// The emoji models' own quality metrics in an eval job (issue #34; manifest "metrics": {"emoji":
// ...}): the emoji feature network (core/metrics/emoji_features.h) scores every image; the
// shard files carry its features and predicted classes, and per config the result gets the emoji
// Frechet distance against the data set's images (the statistics shipped in the network's file)
// and against the job's baseline images, the classification accuracy (predicted class = the
// requested one) and the agreement with the baseline image's predicted class.
//
// Which class an image should show: its class id for class-conditional models (-1,
// unconditional, is not counted); for text-to-image prompts, the class the prompt names
// (class_named_by_prompt), and a prompt that names none is not counted.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/data/emoji_classes.h"
#include "core/eval/manifest.h"
#include "core/metrics/emoji_features.h"

namespace varscope {

// The class a prompt names, or -1. Words are runs of ASCII letters and digits, lowercased. A
// prompt names class c when its words are exactly one of c's name, short name or aliases; else
// when the longest such phrase of at least two words that occurs in the prompt as consecutive
// words belongs to c alone ("a picture of thumbs up sign drawn in the twemoji style" -> THUMBS
// UP SIGN). One-word phrases inside longer prompts do not count ("a", "in" and "up" are
// aliases of some emoji), nor does a longest phrase that several classes share.
int64_t class_named_by_prompt(const std::string& prompt, const std::vector<ClassInfo>& classes);

// Per condition of the manifest (its classes or prompts, in order) the class its images should
// show, or -1 (not counted). `classes` is needed for prompts only.
std::vector<int64_t> emoji_targets(const EvalManifest& m, const std::vector<ClassInfo>& classes);

// The emoji scores of a shard's images per config, in generate order.
class ShardEmojiScores {
  public:
    // `targets`: the class each image should show (-1: not counted), one per row of f.
    void add(const std::string& config, const EmojiFeatures& f,
             const std::vector<int64_t>& targets);
    // {config: {"images": n, "dim": D, "features": b64 float32 (n x D), "predicted": [..],
    // "target": [..]}}
    nlohmann::json to_json() const;

  private:
    struct Part {
        at::Tensor features;
        std::vector<int64_t> predicted, target;
    };
    std::map<std::string, Part> parts_;
};

struct EmojiScores {
    at::Tensor features;  // (N, D) float32
    std::vector<int64_t> predicted, target;
};

// Every shard's "emoji_features" concatenated per config in shard order. ShardFileError naming
// the shard when missing or malformed.
std::map<std::string, EmojiScores> gather_emoji_scores(const std::vector<nlohmann::json>& shards);

// {config: {"images", "fid": {"dataset", "baseline"}, "accuracy": {"correct", "counted", "rate"},
// "baseline_agreement"}}: null where it does not apply (no reference statistics, the baseline
// against itself, fewer than 2 images, no counted image).
nlohmann::json emoji_quality_metrics(const std::map<std::string, EmojiScores>& scores,
                                     const at::Tensor& reference_mu,
                                     const at::Tensor& reference_sigma);

// The network a manifest names, its feature size and reference statistics, checked before any
// sampling: ManifestError naming metrics.emoji and the file.
EmojiFeatureNetwork load_emoji_network(const EvalMetricsSpec& spec);

}  // namespace varscope
