// The text-to-image emoji model's tokenizer: a SentencePiece model trained on the TRAINING
// phrasings of the packed captions only, and how well it covers the held-out phrasings.
// `varscope-cli train tokenizer` runs train_caption_tokenizer and writes its model.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/data/emoji_captions.h"
#include "core/text/sentencepiece_trainer.h"

namespace varscope {

class SentencePieceTokenizer;

struct CaptionTokenizerStats {
    int64_t pieces = 0;                     // the model's pieces (<pad>, </s>, <unk> included)
    int64_t train_phrasings = 0;            // sentences the trainer saw (repeats included)
    int64_t train_tokens = 0;               // SentencePiece ids of them, no EOS
    int64_t train_round_trip_failures = 0;  // decode(encode(p)) != p
    int64_t heldout_phrasings = 0;
    int64_t heldout_tokens = 0;
    int64_t heldout_unk_tokens = 0;  // ids equal to <unk>
    int64_t heldout_with_unk = 0;    // phrasings with at least one <unk>
    int64_t heldout_round_trip_failures = 0;
    double heldout_unk_rate() const;  // heldout_unk_tokens / heldout_tokens
    nlohmann::json to_json() const;
};

// Every training phrasing in row order (the trainer's input, repeats included).
std::vector<std::string> training_sentences(const EmojiCaptions& captions);

// Encodes all phrasings of `captions` with `tokenizer` and counts the above.
CaptionTokenizerStats evaluate_caption_tokenizer(const SentencePieceTokenizer& tokenizer,
                                                 const EmojiCaptions& captions);

struct TrainedCaptionTokenizer {
    std::string model;  // spiece.model bytes (T5 ids: pad 0, eos 1, unk 2)
    CaptionTokenizerStats stats;
};

// Trains on the training phrasings only (deterministic: see train_sentencepiece) and evaluates
// the result. Throws TokenizerError (e.g. a vocab size the captions cannot fill).
TrainedCaptionTokenizer train_caption_tokenizer(const EmojiCaptions& captions,
                                                const SentencePieceTrainOptions& options);

}  // namespace varscope
