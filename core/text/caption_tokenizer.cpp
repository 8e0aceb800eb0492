#include "core/text/caption_tokenizer.h"

#include "core/text/sentencepiece_tokenizer.h"

namespace varscope {
namespace {

// Counts one phrasing into the totals of its split.
void count(const SentencePieceTokenizer& tok, const std::string& text, int64_t& phrasings,
           int64_t& tokens, int64_t& round_trip_failures, int64_t* unk_tokens, int64_t* with_unk) {
    const std::vector<int> ids = tok.encode_pieces(text);
    ++phrasings;
    tokens += static_cast<int64_t>(ids.size());
    int64_t unk = 0;
    for (int id : ids) unk += id == SentencePieceTokenizer::kUnkId ? 1 : 0;
    if (unk_tokens) *unk_tokens += unk;
    if (with_unk && unk > 0) ++*with_unk;
    if (tok.decode_pieces(ids) != text) ++round_trip_failures;
}

}  // namespace

double CaptionTokenizerStats::heldout_unk_rate() const {
    return heldout_tokens > 0 ? static_cast<double>(heldout_unk_tokens) / heldout_tokens : 0.0;
}

nlohmann::json CaptionTokenizerStats::to_json() const {
    auto per = [](int64_t a, int64_t b) { return b > 0 ? static_cast<double>(a) / b : 0.0; };
    return {{"pieces", pieces},
            {"train_phrasings", train_phrasings},
            {"train_tokens_per_phrasing", per(train_tokens, train_phrasings)},
            {"train_round_trip_failures", train_round_trip_failures},
            {"heldout_phrasings", heldout_phrasings},
            {"heldout_tokens_per_phrasing", per(heldout_tokens, heldout_phrasings)},
            {"heldout_unk_rate", heldout_unk_rate()},
            {"heldout_phrasings_with_unk", heldout_with_unk},
            {"heldout_round_trip_failures", heldout_round_trip_failures}};
}

std::vector<std::string> training_sentences(const EmojiCaptions& captions) {
    std::vector<std::string> out;
    for (const auto& row : captions.train) out.insert(out.end(), row.begin(), row.end());
    return out;
}

CaptionTokenizerStats evaluate_caption_tokenizer(const SentencePieceTokenizer& tokenizer,
                                                 const EmojiCaptions& captions) {
    CaptionTokenizerStats s;
    s.pieces = tokenizer.piece_size();
    for (const auto& row : captions.train)
        for (const auto& p : row)
            count(tokenizer, p, s.train_phrasings, s.train_tokens, s.train_round_trip_failures,
                  nullptr, nullptr);
    for (const auto& row : captions.heldout)
        for (const auto& p : row)
            count(tokenizer, p, s.heldout_phrasings, s.heldout_tokens,
                  s.heldout_round_trip_failures, &s.heldout_unk_tokens, &s.heldout_with_unk);
    return s;
}

TrainedCaptionTokenizer train_caption_tokenizer(const EmojiCaptions& captions,
                                                const SentencePieceTrainOptions& options) {
    TrainedCaptionTokenizer t;
    t.model = train_sentencepiece(training_sentences(captions), options);
    const auto tok = SentencePieceTokenizer::from_bytes(t.model, "the trained tokenizer");
    t.stats = evaluate_caption_tokenizer(tok, captions);
    return t;
}

}  // namespace varscope
