// Prompts -> Infinity's text condition: the T5 tokenizer (spiece.model), the T5 encoder
// (config.json + weights) of one Hugging Face folder such as google/flan-t5-xl, and the compact
// form the transformer consumes. The encoder can leave the GPU between uses (low-memory mode).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/models/t5_encoder.h"
#include "core/text/prompt_vocabulary.h"
#include "core/text/sentencepiece_tokenizer.h"

namespace varscope {

struct T5TextEncoderOptions {
    T5EncoderOptions encoder;      // device and dtype the encoder computes in
    T5TokenizerOptions tokenizer;  // max_length 512 like Infinity
    std::string tokenizer_path;    // default: <folder>/spiece.model
    // Infinity pads to max_length; padding to the longest prompt gives the same valid rows (the
    // mask removes padded keys exactly) at a fraction of the work.
    Padding padding = Padding::kLongest;
    bool offload_after_encode = false;  // move the weights to the CPU after each encode()
    // The words the encoder was trained on (PromptVocabulary); default: <folder>/
    // prompt_vocabulary.json when it exists (the embedded emoji model's), else none.
    std::string vocabulary_path;
};

class T5TextEncoder {
  public:
    // Throws (naming the file): TokenizerError for spiece.model, std::invalid_argument for
    // config.json, CheckpointError for the weights.
    explicit T5TextEncoder(const std::string& folder, T5TextEncoderOptions options = {});

    // Tokenizes, encodes on options.encoder.device (moving the weights back there when they
    // were offloaded) and compacts. TextCondition::truncated says which prompts were cut. With a
    // prompt vocabulary and !keep_unknown_words, each prompt loses the words outside it first
    // (TextCondition::filtered says what happened).
    TextCondition encode(const std::vector<std::string>& prompts, bool keep_unknown_words = false);

    void offload();  // weights to the CPU; the next encode() brings them back
    bool offloaded() const;

    const SentencePieceTokenizer& tokenizer() const { return tokenizer_; }
    const T5Encoder& encoder() const { return encoder_; }
    const PromptVocabulary* vocabulary() const { return vocabulary_ ? &*vocabulary_ : nullptr; }
    const T5TextEncoderOptions& options() const { return options_; }

  private:
    T5TextEncoderOptions options_;
    SentencePieceTokenizer tokenizer_;
    T5Encoder encoder_;
    std::optional<PromptVocabulary> vocabulary_;
};

}  // namespace varscope
