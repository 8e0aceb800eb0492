// `varscope-cli train infinity`: a text-to-image Infinity transformer and a small T5 encoder
// trained together on captioned images, on the bit labels of a frozen BSQ VAE (issue #33).
//
// One step, as the official trainer.py with use_bit_label (no bitwise self-correction noise):
// the cached VAE encoder features of the batch -> bsq::teacher_forcing over the schedule (bit
// labels per scale, next-scale inputs from the trilinear-up running sum) -> one random caption
// per image -> tokenizer + T5 with autograd -> packed text (compact_text_features) -> cond drop
// (a dropped row's features become cfg_uncond[:len], as the official Infinity.forward does, so
// CFG at inference — InfinityTransformerImpl::with_unconditional — sees what training taught)
// -> forward_teacher -> per-bit cross-entropy averaged over bits and tokens -> one AdamW over
// both modules.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/models/infinity.h"
#include "core/models/t5_encoder.h"
#include "core/training/train_common.h"

namespace varscope {

// Caption noise (issue #33): the first trained model followed its six training wordings and
// little else (6 % of held-out phrasings). With probability `prob` a caption gets 1..max_words
// filler words at random places, and each of its words is dropped with `word_dropout` (one word
// always stays), so the text encoder learns to read the emoji's name among words it does not
// know. The fillers (kCaptionFillers) avoid every word of the held-out templates ("picture",
// "drawn", "icon", "showing", "from", "category", "the"), so the evaluation stays unseen wording.
//
// `pseudo_words`: the share of fillers that are random lower-case strings of 3..9 letters instead
// of kCaptionFillers words. A held-out phrasing's words are outside the caption tokenizer's
// vocabulary and split into single characters (28.6 tokens per held-out phrasing against 9.9 per
// training one, model card), which the fillers above never look like; such strings do. Never one
// of kHeldOutWords. 0 draws nothing extra (earlier runs' noise is unchanged).
//
// `join`: the share of captions that become two different training phrasings of their row,
// joined by ", " (before any fillers). The training templates name an emoji's short name and its
// category in different phrasings, and are about a third as long as the held-out ones; joined,
// a short name meets its category and a caption gets as long, with training words only. 0 draws
// nothing extra.
struct CaptionNoise {
    double prob = 0;  // 0 = off (captions as written; the random draws of a run are unchanged)
    int64_t max_words = 3;
    double word_dropout = 0;
    double pseudo_words = 0;
    double join = 0;
    // Share of captions recombined from the row's phrasings (pick_captions): the drawn
    // phrasing's first ", "-segment (the one naming the emoji in every training template), then
    // each later segment of it and of another phrasing of the row kept with probability 1/2 (a
    // skin tone always: the image has it).
    // "moon emoji" + "crescent moon, sky & weather, travel & places" can give "moon emoji,
    // travel & places". Not together with join.
    double mix = 0;
    bool enabled() const { return prob > 0 || word_dropout > 0; }
};
extern const std::vector<std::string> kCaptionFillers;
// The words of the held-out caption templates (core/data/emoji_captions.cpp): no filler is one.
extern const std::vector<std::string> kHeldOutWords;
// `caption` with noise from `gen` (a pure function of the caption and the generator's state).
std::string noisy_caption(const std::string& caption, const CaptionNoise& noise,
                          at::Generator& gen);

struct InfinityTrainJob {
    InfinityConfig model;
    T5EncoderConfig t5;  // vocab_size must cover the tokenizer (pieces + extra ids)
    TrainConfig train;
    std::string data_path;       // packed images (pack-emoji), rows = captions' rows
    std::string vae_path;        // the frozen BSQ VAE
    std::string tokenizer_path;  // spiece.model, shipped in the T5 folder
    std::string run_dir;
    // Optional fine-tuning start (a fresh run only; a resumed one continues its own weights): a
    // transformer file (e.g. the shipped int8 export, restored to fp32) and a T5 folder, each with
    // exactly the job's configs. The EMA starts from them too.
    std::string init_path;
    std::string init_t5_path;
    // Captions per packed row (at least one each); one is drawn per image and step.
    std::vector<std::vector<std::string>> captions;
    // The schedule: the official one of this template and pixel budget (the runner's
    // --h-div-w / --pixels); its last scale must be the VAE's latent grid (0.06M at 1:1 is
    // 1,2,4,6,8,12,16: 64 px images with a 4x VAE).
    double h_div_w = 1.0;
    std::string pixels = "0.06M";
    double cond_drop = 0.1;               // probability that a row trains unconditionally (CFG)
    bool reweight_loss_by_scale = false;  // official option: weight ~ 1/sqrt(scale tokens)
    double grad_clip = 5.0;               // max global gradient norm, 0 = off
    double ema_rate = 0;                  // 0 = off; when on, the exports hold the EMA
    bool bf16_autocast = false;           // CUDA only; fp32 weights
    bool export_int8 = false;             // the transformer's large 2-D weights as int8
    // --init with fewer blocks (otherwise the job's config): grown to the job's depth
    // (core/training/grow_depth.h), the new blocks adding nothing at the start.
    bool grow_depth = false;
    CaptionNoise caption_noise;  // off unless the config's "caption_noise" sets it
    // Weight of the text-identity loss (0 = off): a linear head on each caption's mean T5 feature
    // is asked the class label of its row (cross-entropy), added to the bitwise loss. Why: the
    // embedded model reads its own wordings and misses unseen ones of the same emoji, although a
    // bag-of-words reader finds the class in 98 % of them (bench/results/2026-12-02-h200/
    // session46); this asks the text encoder for every wording of one emoji to carry its identity.
    // Training only: the head is checkpointed for resuming, never exported.
    double text_identity = 0;
};

// Each caption's mean feature over its tokens, (B, C), from packed text (kv_compact rows in
// caption order, lens[b] each).
at::Tensor mean_text_features(const InfinityText& text);

// The job's settings from a training config (resources/training/emoji-infinity.json): "model"
// (InfinityConfig fields), "t5" (HF config.json fields; vocab_size defaults to `tokenizer_ids`,
// the tokenizer's pieces + extra ids), and the top-level keys cond_drop, ema_rate,
// bf16_autocast, export_int8, grow_depth, grad_clip, reweight_loss_by_scale, pixels, h_div_w,
// text_identity and caption_noise ({"prob", "max_words", "word_dropout", "pseudo_words", "join",
// "mix"}). "train" and "comment" are left to the caller. Unknown keys, wrong types and bad ranges
// throw std::invalid_argument naming the key.
void apply_infinity_config(const nlohmann::json& config, int64_t tokenizer_ids,
                           InfinityTrainJob& job);
// The config's top-level keys apply_infinity_config reads.
const std::vector<std::string>& infinity_config_keys();

// The caption of each row for one step: uniform over the row's captions, from `gen`, then
// `noise`'s join or mix (when > 0) and fillers/dropout (when enabled); their draws come after the
// picks, so an off setting draws nothing more.
std::vector<std::string> pick_captions(const std::vector<std::vector<std::string>>& captions,
                                       const at::Tensor& rows, at::Generator& gen,
                                       const CaptionNoise& noise = {});

// Official cond drop: rows with drop[b] get cfg_uncond[:lens[b]] instead of their features.
InfinityText drop_conditions(const InfinityText& text, const at::Tensor& cfg_uncond,
                             const std::vector<bool>& drop);

// Per-bit cross-entropy of logits (B, L, 2d) against bits (B, L, d): mean over bits, then the
// official token weighting (1/L, or by scale with `reweight`), mean over the batch.
at::Tensor bitwise_loss(const at::Tensor& logits, const at::Tensor& bits,
                        const InfinitySchedule& schedule, bool reweight);

// Bit accuracy per scale (fractions in [0, 1]) and the whole-token accuracy.
struct BitAccuracy {
    std::vector<double> per_scale;
    double mean = 0, token = 0;
};
BitAccuracy bit_accuracy(const at::Tensor& logits, const at::Tensor& bits,
                         const InfinitySchedule& schedule);

// Returns a JSON report. Writes in run_dir: last.safetensors / optimizer.pt / state.json
// (resume), ema.safetensors (with EMA), log.jsonl, final.safetensors (fp32 transformer),
// t5-final/ (fp32 T5 folder), and what ships: export-fp16.safetensors (the transformer in the
// official names, InfinityPipeline / the runner load it) and t5-fp16/ (config.json,
// model.safetensors, spiece.model: the runner's --t5 folder).
nlohmann::json train_infinity(const InfinityTrainJob& job, std::ostream& out);

}  // namespace varscope
