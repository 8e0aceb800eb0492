// The one seam to the SentencePiece C++ library (libsentencepiece): loading a model and encoding
// text to piece ids. Built from sentencepiece_backend.cpp, or from sentencepiece_backend_none.cpp
// when VARSCOPE_WITH_SENTENCEPIECE is OFF (every load then throws), so no other file needs the
// library's headers or a build switch.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace varscope::detail {

class SentencePieceModel {
  public:
    // Throws TokenizerError naming `what` (e.g. the file) for bytes that are not a model.
    SentencePieceModel(std::string_view serialized, const std::string& what);
    ~SentencePieceModel();
    SentencePieceModel(const SentencePieceModel&) = delete;
    SentencePieceModel& operator=(const SentencePieceModel&) = delete;

    // Piece ids of `text` (the model's normalisation applied; no BOS/EOS added).
    std::vector<int> encode(std::string_view text) const;
    // The text of piece ids (SentencePiece's decoding: "▁" back to spaces, unk as " ⁇ ").
    std::string decode(const std::vector<int>& ids) const;
    int piece_size() const;
    int piece_to_id(std::string_view piece) const;  // unk id when absent
    int unk_id() const;
    int eos_id() const;
    int pad_id() const;
    int bos_id() const;  // -1 when the model has none

    static bool available();  // false in a build without SentencePiece

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace varscope::detail
