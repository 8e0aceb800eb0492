// Built instead of sentencepiece_backend.cpp when VARSCOPE_WITH_SENTENCEPIECE is OFF (e.g. the
// GPU machine, which lacks libsentencepiece-dev): every load fails with a clear message.
#include "core/text/sentencepiece_backend.h"
#include "core/text/sentencepiece_tokenizer.h"

namespace varscope::detail {

struct SentencePieceModel::Impl {};

SentencePieceModel::SentencePieceModel(std::string_view, const std::string& what) {
    throw TokenizerError(what +
                         ": this build has no SentencePiece (configure with "
                         "-DVARSCOPE_WITH_SENTENCEPIECE=ON after installing libsentencepiece-dev)");
}
SentencePieceModel::~SentencePieceModel() = default;
std::vector<int> SentencePieceModel::encode(std::string_view) const {
    return {};
}
std::string SentencePieceModel::decode(const std::vector<int>&) const {
    return {};
}
int SentencePieceModel::piece_size() const {
    return 0;
}
int SentencePieceModel::piece_to_id(std::string_view) const {
    return 0;
}
int SentencePieceModel::unk_id() const {
    return 0;
}
int SentencePieceModel::eos_id() const {
    return 0;
}
int SentencePieceModel::pad_id() const {
    return 0;
}
int SentencePieceModel::bos_id() const {
    return -1;
}
bool SentencePieceModel::available() {
    return false;
}

}  // namespace varscope::detail
