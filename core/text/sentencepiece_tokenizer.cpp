#include "core/text/sentencepiece_tokenizer.h"

#include <algorithm>
#include <optional>

#include "core/io/json_read.h"
#include "core/text/sentencepiece_backend.h"

namespace varscope {
namespace {

// T5's spiece.model is ~800 KB; anything near this is not a tokenizer.
constexpr uint64_t kMaxModelBytes = 64ull << 20;

struct AddedToken {
    size_t length = 0;  // bytes of the token's text
    int64_t id = 0;
    bool strip = false;  // HF's lstrip/rstrip: whitespace beside it belongs to the token
};

bool is_ascii_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// HF's added tokens of T5Tokenizer that start at text[i]: "</s>", "<pad>", "<unk>" (no
// stripping) and "<extra_id_N>" for N < extra_ids (stripping, id piece_size - 1 + extra_ids - N).
std::optional<AddedToken> added_token_at(std::string_view text, size_t i, int piece_size,
                                         int extra_ids) {
    const std::string_view rest = text.substr(i);
    static constexpr std::pair<std::string_view, int64_t> kFixed[] = {
        {"</s>", SentencePieceTokenizer::kEosId},
        {"<pad>", SentencePieceTokenizer::kPadId},
        {"<unk>", SentencePieceTokenizer::kUnkId}};
    for (const auto& [s, id] : kFixed)
        if (rest.substr(0, s.size()) == s) return AddedToken{s.size(), id, false};
    constexpr std::string_view kExtra = "<extra_id_";
    if (rest.substr(0, kExtra.size()) != kExtra) return std::nullopt;
    size_t j = kExtra.size();
    int64_t n = 0;
    const size_t digits_begin = j;
    while (j < rest.size() && rest[j] >= '0' && rest[j] <= '9' && j - digits_begin < 9)
        n = n * 10 + (rest[j++] - '0');
    const size_t digits = j - digits_begin;
    // The token strings are "<extra_id_0>".."<extra_id_99>": no sign, no leading zeros.
    if (digits == 0 || (digits > 1 && rest[digits_begin] == '0')) return std::nullopt;
    if (j >= rest.size() || rest[j] != '>' || n >= extra_ids) return std::nullopt;
    return AddedToken{j + 1, int64_t(piece_size) - 1 + extra_ids - n, true};
}

std::string read_model_file(const std::string& path, const std::string& what) {
    try {
        return read_regular_file(path, what, kMaxModelBytes);
    } catch (const std::exception& e) {
        throw TokenizerError(e.what());
    }
}

}  // namespace

bool TokenBatch::any_truncated() const {
    return std::find(truncated.begin(), truncated.end(), true) != truncated.end();
}

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& spiece_model_path,
                                               T5TokenizerOptions options)
    : SentencePieceTokenizer(
          std::make_unique<detail::SentencePieceModel>(
              read_model_file(spiece_model_path, "tokenizer '" + spiece_model_path + "'"),
              "tokenizer '" + spiece_model_path + "'"),
          options, "tokenizer '" + spiece_model_path + "'") {}

SentencePieceTokenizer SentencePieceTokenizer::from_bytes(std::string_view serialized,
                                                          const std::string& what,
                                                          T5TokenizerOptions options) {
    return SentencePieceTokenizer(std::make_unique<detail::SentencePieceModel>(serialized, what),
                                  options, what);
}

SentencePieceTokenizer::SentencePieceTokenizer(std::unique_ptr<detail::SentencePieceModel> model,
                                               T5TokenizerOptions options, const std::string& what)
    : model_(std::move(model)), options_(options) {
    // T5's conventions; a model trained for another network would give ids the encoder misreads.
    if (model_->pad_id() != kPadId || model_->eos_id() != kEosId || model_->unk_id() != kUnkId)
        throw TokenizerError(what + ": not a T5 tokenizer (pad/eos/unk ids are " +
                             std::to_string(model_->pad_id()) + "/" +
                             std::to_string(model_->eos_id()) + "/" +
                             std::to_string(model_->unk_id()) + ", expected 0/1/2)");
    if (options_.max_length < 1)
        throw TokenizerError(what + ": max_length must be at least 1, got " +
                             std::to_string(options_.max_length));
    if (options_.extra_ids < 0 || options_.extra_ids > 100000)
        throw TokenizerError(what + ": extra_ids must be in [0, 100000], got " +
                             std::to_string(options_.extra_ids));
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;
SentencePieceTokenizer::SentencePieceTokenizer(SentencePieceTokenizer&&) noexcept = default;
SentencePieceTokenizer& SentencePieceTokenizer::operator=(SentencePieceTokenizer&&) noexcept =
    default;

bool SentencePieceTokenizer::available() {
    return detail::SentencePieceModel::available();
}
int SentencePieceTokenizer::piece_size() const {
    return model_->piece_size();
}

std::vector<int> SentencePieceTokenizer::encode_pieces(std::string_view text) const {
    return model_->encode(text);
}

std::string SentencePieceTokenizer::decode_pieces(const std::vector<int>& ids) const {
    for (int id : ids)
        if (id < 0 || id >= piece_size())
            throw TokenizerError("cannot decode id " + std::to_string(id) + ": the model has " +
                                 std::to_string(piece_size()) + " pieces");
    return model_->decode(ids);
}

TokenizedPrompt SentencePieceTokenizer::encode(std::string_view text) const {
    std::vector<int64_t> ids;
    auto append = [&](std::string_view segment) {
        for (int id : model_->encode(segment)) ids.push_back(id);
    };
    if (!options_.parse_special_tokens) {
        append(text);
    } else {
        // Split at added tokens like HF's trie; a stripping token takes the ASCII whitespace
        // beside it (HF strips Unicode whitespace, but SentencePiece's normaliser drops
        // whitespace at segment ends anyway, so only ids of whitespace-only segments could
        // differ, and those encode to nothing either way).
        size_t begin = 0, i = 0;
        bool strip_next = false;
        while (i < text.size()) {
            const auto tok = text[i] == '<'
                                 ? added_token_at(text, i, piece_size(), options_.extra_ids)
                                 : std::nullopt;
            if (!tok) {
                ++i;
                continue;
            }
            std::string_view before = text.substr(begin, i - begin);
            if (strip_next)
                while (!before.empty() && is_ascii_space(before.front())) before.remove_prefix(1);
            if (tok->strip)
                while (!before.empty() && is_ascii_space(before.back())) before.remove_suffix(1);
            append(before);
            ids.push_back(tok->id);
            strip_next = tok->strip;
            i += tok->length;
            begin = i;
        }
        std::string_view tail = text.substr(begin);
        if (strip_next)
            while (!tail.empty() && is_ascii_space(tail.front())) tail.remove_prefix(1);
        append(tail);
    }

    // HF: truncate to leave room for one special token, then add EOS unless the ids already end
    // with it (a prompt ending in "</s>").
    TokenizedPrompt out;
    const bool ends_with_eos = !ids.empty() && ids.back() == kEosId;
    out.untruncated_length = static_cast<int64_t>(ids.size()) + (ends_with_eos ? 0 : 1);
    const size_t keep = static_cast<size_t>(options_.max_length - 1);
    if (ids.size() > keep) {
        ids.resize(keep);
        out.truncated = true;
    }
    if (ids.empty() || ids.back() != kEosId) ids.push_back(kEosId);
    out.ids = std::move(ids);
    return out;
}

TokenBatch SentencePieceTokenizer::encode_batch(const std::vector<std::string>& prompts,
                                                Padding padding) const {
    std::vector<TokenizedPrompt> rows;
    rows.reserve(prompts.size());
    int64_t longest = 0;
    for (const std::string& p : prompts) {
        rows.push_back(encode(p));
        longest = std::max<int64_t>(longest, static_cast<int64_t>(rows.back().ids.size()));
    }
    TokenBatch b;
    b.rows = static_cast<int64_t>(rows.size());
    b.length = padding == Padding::kMaxLength ? options_.max_length : longest;
    b.input_ids.assign(static_cast<size_t>(b.rows * b.length), kPadId);
    b.attention_mask.assign(b.input_ids.size(), 0);
    for (size_t r = 0; r < rows.size(); ++r) {
        const auto& ids = rows[r].ids;
        std::copy(ids.begin(), ids.end(),
                  b.input_ids.begin() + static_cast<ptrdiff_t>(r) * b.length);
        std::fill_n(b.attention_mask.begin() + static_cast<ptrdiff_t>(r) * b.length, ids.size(), 1);
        b.lengths.push_back(static_cast<int64_t>(ids.size()));
        b.truncated.push_back(rows[r].truncated);
    }
    return b;
}

}  // namespace varscope
