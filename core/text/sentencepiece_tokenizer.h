// T5's tokenizer as Hugging Face's T5Tokenizer applies it (legacy mode, the one Infinity uses
// with flan-t5): SentencePiece piece ids from the real SentencePiece library, HF's added tokens
// ("</s>", "<pad>", "<unk>", "<extra_id_N>") recognised in the text, truncation that keeps room
// for EOS, EOS (id 1) appended, padding with id 0 and an attention mask. Torch-free, so the GUI
// can tell the user that a prompt was truncated.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace varscope {

namespace detail {
class SentencePieceModel;
}

// A missing or corrupt spiece.model, or a build without SentencePiece. The message names the file.
class TokenizerError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

struct T5TokenizerOptions {
    int max_length = 512;  // tokens per prompt including EOS (Infinity: 512)
    // HF's T5Tokenizer maps these strings in the prompt to their ids instead of spelling them
    // out piece by piece. Off: the prompt is plain text (what `sentencepiece` alone does).
    bool parse_special_tokens = true;
    int extra_ids = 100;  // "<extra_id_0>" .. "<extra_id_{n-1}>", ids piece_size()+n-1 .. down
};

struct TokenizedPrompt {
    std::vector<int64_t> ids;        // with EOS, at most max_length
    bool truncated = false;          // tokens were dropped to fit max_length
    int64_t untruncated_length = 0;  // ids before truncation, EOS included
};

enum class Padding { kLongest, kMaxLength };

// A padded batch, row-major (rows × length).
struct TokenBatch {
    int64_t rows = 0, length = 0;
    std::vector<int64_t> input_ids;       // pad id 0 after each prompt
    std::vector<int64_t> attention_mask;  // 1 on tokens, 0 on padding
    std::vector<int64_t> lengths;         // tokens per prompt (= the mask's row sums)
    std::vector<bool> truncated;
    bool any_truncated() const;
};

class SentencePieceTokenizer {
  public:
    // Reads `spiece_model_path`; throws TokenizerError naming the file when it is missing, not a
    // SentencePiece model, lacks T5's ids (pad 0, eos 1, unk 2), or SentencePiece is not built in.
    explicit SentencePieceTokenizer(const std::string& spiece_model_path,
                                    T5TokenizerOptions options = {});
    // The same from the file's bytes; `what` names the source in messages.
    static SentencePieceTokenizer from_bytes(std::string_view serialized, const std::string& what,
                                             T5TokenizerOptions options = {});
    ~SentencePieceTokenizer();
    SentencePieceTokenizer(SentencePieceTokenizer&&) noexcept;
    SentencePieceTokenizer& operator=(SentencePieceTokenizer&&) noexcept;

    // SentencePiece ids of `text` alone: no added tokens, no EOS, no truncation.
    std::vector<int> encode_pieces(std::string_view text) const;
    // The text of SentencePiece ids (the reverse of encode_pieces up to the model's
    // normalisation); throws TokenizerError for an id outside [0, piece_size()).
    std::string decode_pieces(const std::vector<int>& ids) const;
    // One prompt the way HF's T5Tokenizer(text, max_length, truncation=True) encodes it.
    TokenizedPrompt encode(std::string_view text) const;
    // Prompts padded to the longest one or to max_length.
    TokenBatch encode_batch(const std::vector<std::string>& prompts,
                            Padding padding = Padding::kLongest) const;

    int piece_size() const;  // pieces in spiece.model (the model's vocab may be larger)
    const T5TokenizerOptions& options() const { return options_; }
    static constexpr int64_t kPadId = 0, kEosId = 1, kUnkId = 2;

    static bool available();  // false in a build without SentencePiece

  private:
    SentencePieceTokenizer(std::unique_ptr<detail::SentencePieceModel> model,
                           T5TokenizerOptions options, const std::string& what);
    std::unique_ptr<detail::SentencePieceModel> model_;
    T5TokenizerOptions options_;
};

}  // namespace varscope
