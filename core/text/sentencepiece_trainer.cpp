// SentencePiece's trainer (Debian libsentencepiece-dev: libsentencepiece_train). Only this file
// includes its header; CMake builds sentencepiece_trainer_none.cpp instead without it.
#include "core/text/sentencepiece_trainer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <mutex>
#include <string>
#include <unordered_map>

#include "core/text/sentencepiece_tokenizer.h"

namespace varscope {
namespace {

class VectorSentences : public sentencepiece::SentenceIterator {
  public:
    explicit VectorSentences(const std::vector<std::string>& s) : s_(s) {}
    bool done() const override { return i_ >= s_.size(); }
    void Next() override { ++i_; }
    const std::string& value() const override { return s_[i_]; }
    sentencepiece::util::Status status() const override { return {}; }

  private:
    const std::vector<std::string>& s_;
    size_t i_ = 0;
};

}  // namespace

std::string train_sentencepiece(const std::vector<std::string>& sentences,
                                const SentencePieceTrainOptions& options) {
    if (sentences.empty()) throw TokenizerError("cannot train a tokenizer on no sentences");
    if (options.vocab_size < 4)
        throw TokenizerError("tokenizer vocab_size must be at least 4, got " +
                             std::to_string(options.vocab_size));
    // No model_prefix: the model comes back as bytes, no file is written.
    const std::unordered_map<std::string, std::string> args = {
        {"model_type", options.model_type},
        {"vocab_size", std::to_string(options.vocab_size)},
        {"character_coverage", std::to_string(options.character_coverage)},
        {"normalization_rule_name", options.normalization},
        // T5's ids; SentencePieceTokenizer refuses others.
        {"pad_id", "0"},
        {"eos_id", "1"},
        {"unk_id", "2"},
        {"bos_id", "-1"},
        {"pad_piece", "<pad>"},
        {"eos_piece", "</s>"},
        {"unk_piece", "<unk>"},
        // Determinism: all sentences in the given order, one thread.
        {"input_sentence_size", "0"},
        {"shuffle_input_sentence", "false"},
        {"num_threads", "1"},
        {"minloglevel", options.quiet ? "1" : "0"},
    };
    // The library's random generator and log level are process-wide.
    static std::mutex mutex;
    std::lock_guard<std::mutex> lock(mutex);
    sentencepiece::SetRandomGeneratorSeed(options.seed);
    VectorSentences it(sentences);
    std::string model;
    const auto status = sentencepiece::SentencePieceTrainer::Train(args, &it, &model);
    if (!status.ok()) throw TokenizerError("SentencePiece training failed: " + status.ToString());
    return model;
}

bool sentencepiece_training_available() {
    return true;
}

}  // namespace varscope
