// SentencePiece through its C++ library (Debian libsentencepiece-dev). Only this file includes
// the library's header; CMake builds sentencepiece_backend_none.cpp instead without it.
#include "core/text/sentencepiece_backend.h"

#include <sentencepiece_processor.h>

#include <exception>

#include "core/text/sentencepiece_tokenizer.h"

namespace varscope::detail {

struct SentencePieceModel::Impl {
    sentencepiece::SentencePieceProcessor processor;
};

SentencePieceModel::SentencePieceModel(std::string_view serialized, const std::string& what)
    : impl_(std::make_unique<Impl>()) {
    sentencepiece::util::Status status;
    try {
        status = impl_->processor.LoadFromSerializedProto(
            absl::string_view(serialized.data(), serialized.size()));
    } catch (const std::exception& e) {
        // The library's own parts throw past its Status: darts-clone's trie builder on a model
        // with an empty piece ("failed to insert key: zero-length key", found by fuzz_t5).
        throw TokenizerError(what + ": not a valid SentencePiece model (" + e.what() + ")");
    }
    if (!status.ok())
        throw TokenizerError(what + ": not a valid SentencePiece model (" + status.ToString() +
                             ")");
}

SentencePieceModel::~SentencePieceModel() = default;

std::vector<int> SentencePieceModel::encode(std::string_view text) const {
    std::vector<int> ids;
    const auto status = impl_->processor.Encode(absl::string_view(text.data(), text.size()), &ids);
    if (!status.ok()) throw TokenizerError("SentencePiece encode failed: " + status.ToString());
    return ids;
}

std::string SentencePieceModel::decode(const std::vector<int>& ids) const {
    std::string text;
    const auto status = impl_->processor.Decode(ids, &text);
    if (!status.ok()) throw TokenizerError("SentencePiece decode failed: " + status.ToString());
    return text;
}

int SentencePieceModel::piece_size() const {
    return impl_->processor.GetPieceSize();
}
int SentencePieceModel::piece_to_id(std::string_view piece) const {
    return impl_->processor.PieceToId(absl::string_view(piece.data(), piece.size()));
}
int SentencePieceModel::unk_id() const {
    return impl_->processor.unk_id();
}
int SentencePieceModel::eos_id() const {
    return impl_->processor.eos_id();
}
int SentencePieceModel::pad_id() const {
    return impl_->processor.pad_id();
}
int SentencePieceModel::bos_id() const {
    return impl_->processor.bos_id();
}
bool SentencePieceModel::available() {
    return true;
}

}  // namespace varscope::detail
