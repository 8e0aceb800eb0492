// Built instead of sentencepiece_trainer.cpp when VARSCOPE_WITH_SENTENCEPIECE is OFF.
#include "core/text/sentencepiece_tokenizer.h"
#include "core/text/sentencepiece_trainer.h"

namespace varscope {

std::string train_sentencepiece(const std::vector<std::string>&, const SentencePieceTrainOptions&) {
    throw TokenizerError(
        "cannot train a tokenizer: this build has no SentencePiece (configure with "
        "-DVARSCOPE_WITH_SENTENCEPIECE=ON after installing libsentencepiece-dev)");
}

bool sentencepiece_training_available() {
    return false;
}

}  // namespace varscope
