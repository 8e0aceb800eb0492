// Training a SentencePiece model with the SentencePiece library's own trainer
// (libsentencepiece_train), laid out as T5 expects it (pad 0, eos 1, unk 2, no bos), so that
// SentencePieceTokenizer loads it. Built from sentencepiece_trainer.cpp, or from
// sentencepiece_trainer_none.cpp (training throws TokenizerError) when VARSCOPE_WITH_SENTENCEPIECE
// is OFF.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace varscope {

struct SentencePieceTrainOptions {
    int vocab_size = 1000;  // pieces including <pad>, </s>, <unk>
    // "unigram" (T5's), "bpe", "char" or "word".
    std::string model_type = "unigram";
    // nmt_nfkc_cf = T5's nmt_nfkc plus case folding: "Thumbs Up" encodes as "thumbs up" does.
    std::string normalization = "nmt_nfkc_cf";
    double character_coverage = 1.0;  // every character of the training text gets a piece
    uint32_t seed = 0;                // the library's random generator (sentence sampling)
    bool quiet = true;                // the library's INFO log on stderr off
};

// Trains on `sentences` in their order with one thread, so the same sentences and options give
// the same model bytes. Returns the serialized model (the bytes of an spiece.model file). Throws
// TokenizerError with the library's message for bad options (e.g. a vocab_size the text cannot
// fill), or when the build has no SentencePiece.
std::string train_sentencepiece(const std::vector<std::string>& sentences,
                                const SentencePieceTrainOptions& options);

bool sentencepiece_training_available();  // false in a build without SentencePiece

}  // namespace varscope
