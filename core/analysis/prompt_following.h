// Prompt following of an emoji text-to-image model (issue #33): does an image generated from a
// held-out caption phrasing look like the emoji the phrasing describes?
//
// The measure (docs/training/emoji-t2i.md says why): each generated 64x64 image's nearest
// neighbour among all packed emoji64 images by pixel distance (mean squared error over RGB in
// [0, 1], reported as PSNR). A sample FOLLOWS its prompt when that neighbour is one of the
// images the phrasing describes: the rows whose own held-out phrasings contain the same text.
// So "a picture of thumbs up sign drawn in the twemoji style, dark skin tone" asks for exactly
// one image (that emoji, tone and style), and "an icon showing +1 with dark skin tone, from the
// people & body category" (no style named) for both styles' images. A looser CLASS match (the
// neighbour's class label equals the intended one: skin tone and style ignored) is reported too.
// Pixel nearest neighbours suit this data: 7,572 flat-shaded icons at one size, where two
// different emoji rarely come closer than a redraw of the same one.
//
// A second judge, when the emoji feature network (core/metrics/emoji_features.h) is given: the
// nearest packed image in its 256-d feature space (Euclidean) judged the same two ways
// (`feature_follows`, `feature_class_match`), and the network's own prediction
// (`classifier_match`: argmax of its logits = the intended class). Features forgive what pixels
// punish (a shifted or recoloured drawing of the right emoji) and the reverse (a blurry image
// can sit nearest a flat-coloured one in pixels whatever it shows).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/data/emoji_captions.h"

namespace varscope::analysis {

struct HeldOutPrompt {
    std::string text;                    // a held-out phrasing
    int64_t row = 0;                     // the packed row it was taken from
    int64_t label = 0;                   // that row's class label
    int64_t template_index = 0;          // which phrasing of the row (held-out: 0 names the style)
    std::vector<int64_t> intended_rows;  // every row whose phrasings (same list) contain `text`
};

// `count` phrasings of `phrasings` (one list per packed row: EmojiCaptions::heldout, or ::train
// to see what training wording gives), deterministic: rows evenly spaced over the pack (so every
// category is drawn from), cycling through each row's phrasings; a phrasing already picked is
// skipped. Throws std::invalid_argument when count < 1, when the phrasings and labels disagree
// in length, or when the pack has fewer distinct phrasings.
std::vector<HeldOutPrompt> pick_prompts(const std::vector<std::vector<std::string>>& phrasings,
                                        const at::Tensor& labels, int64_t count);
inline std::vector<HeldOutPrompt> pick_heldout_prompts(const EmojiCaptions& captions,
                                                       const at::Tensor& labels, int64_t count) {
    return pick_prompts(captions.heldout, labels, count);
}

struct NearestRows {
    at::Tensor rows;  // (B) int64: the nearest packed row of each image
    at::Tensor psnr;  // (B) double: PSNR in dB of each image to that row ([0, 1] range)
};

// Nearest packed image of each of `images` ((B, 3, H, W) float in [0, 1]) among `dataset`
// ((N, 3, H, W) uint8) by mean squared error. Sizes must agree (std::invalid_argument).
// Computed in chunks of `chunk` dataset rows; ties go to the lowest row.
NearestRows nearest_rows(const at::Tensor& images, const at::Tensor& dataset, int64_t chunk = 1024);

// Nearest row of each of `features` ((B, D)) among `dataset_features` ((N, D)) by Euclidean
// distance; ties go to the lowest row. std::invalid_argument when D differs.
at::Tensor nearest_feature_rows(const at::Tensor& features, const at::Tensor& dataset_features);

// The feature judge's inputs for one batch (see the file comment).
struct FeatureJudgeBatch {
    at::Tensor features;          // (B, D) of the generated images
    at::Tensor predicted;         // (B) int64: the network's class for each image
    at::Tensor dataset_features;  // (N, D) of the packed images (computed once)
};

// One sample: a prompt, a seed, its neighbour and whether it follows the prompt.
struct PromptSample {
    int64_t prompt = 0;  // index into the prompts
    uint64_t seed = 0;
    int64_t nearest_row = 0;
    double nearest_psnr = 0;
    bool follows = false;      // nearest_row is one of the prompt's intended rows
    bool class_match = false;  // the nearest row has the intended class label
    // The feature judge (all false, feature_row -1, predicted -1 without it).
    int64_t feature_row = -1;
    int64_t predicted_class = -1;
    bool feature_follows = false;
    bool feature_class_match = false;
    bool classifier_match = false;
};

struct PromptFollowing {
    std::vector<HeldOutPrompt> prompts;
    std::vector<PromptSample> samples;
    bool judged_by_features = false;     // the feature judge scored the samples
    double follow_rate() const;          // share of samples that follow
    double class_rate() const;           // share whose class label matches
    double feature_follow_rate() const;  // the feature judge's rates
    double feature_class_rate() const;
    double classifier_rate() const;
    double classifier_rate_of_template(int64_t) const;
    double follow_rate_of_template(int64_t) const;  // follow_rate of one phrasing template
    int64_t template_count() const;                 // 1 + the largest template index of prompts
    double mean_psnr() const;
    // Prompts with every seed following / with none.
    int64_t prompts_always() const;
    int64_t prompts_never() const;
};

// Adds the samples of one batch: images[i] was generated from prompts[prompt_index[i]] with
// `seed`. `labels` are the pack's class labels. With `judge`, also the feature judge (every
// batch of a result must then have one: std::invalid_argument otherwise).
void score_batch(PromptFollowing& result, const at::Tensor& images,
                 const std::vector<int64_t>& prompt_index, uint64_t seed, const at::Tensor& dataset,
                 const at::Tensor& labels, const FeatureJudgeBatch* judge = nullptr);

// Summary and every sample (the prompts' texts and intended rows included).
nlohmann::json to_json(const PromptFollowing& result);
// One line per sample: prompt index, template, seed, text, row, nearest row, PSNR, follows,
// class match.
std::string to_csv(const PromptFollowing& result);

}  // namespace varscope::analysis
