// Training SentencePiece models (core/text/sentencepiece_trainer.h), the caption tokenizer built
// on it (core/text/caption_tokenizer.h), and the shipped emoji text-to-image tokenizer against
// ids from the Python `sentencepiece` package (tools/parity/emoji_spiece_parity.py).
#include "core/text/sentencepiece_trainer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/io/json_read.h"
#include "core/text/caption_tokenizer.h"
#include "core/text/sentencepiece_tokenizer.h"
#include "tests/error_of.h"
#include "tests/test_util.h"

namespace {

using json = nlohmann::json;
using varscope::EmojiCaptions;
using varscope::EmojiStyle;
using varscope::SentencePieceTokenizer;
using varscope::SentencePieceTrainOptions;
using varscope::TokenizerError;
using varscope::testing::error_of;

// The captions of a few emoji in both styles, as pack-emoji would make them.
EmojiCaptions small_captions() {
    const json entries = json::parse(R"([
        {"name": "THUMBS UP SIGN", "short_names": ["+1", "thumbsup"], "category": "People & Body",
         "subcategory": "hand-fingers-closed", "skin_variations": {"1F3FB": {}, "1F3FF": {}}},
        {"name": "RED APPLE", "short_names": ["apple"], "category": "Food & Drink",
         "subcategory": "food-fruit"},
        {"name": "GRINNING FACE", "short_names": ["grinning"], "category": "Smileys & Emotion",
         "subcategory": "face-smiling"},
        {"name": "Curaçao Flag", "short_names": ["flag-cw"], "category": "Flags",
         "subcategory": "country-flag"}
    ])");
    EmojiCaptions c;
    for (const auto& e : entries)
        for (const auto style : {EmojiStyle::kNoto, EmojiStyle::kTwemoji}) {
            std::vector<std::string> tones = {""};
            if (e.contains("skin_variations"))
                for (const auto& [t, v] : e["skin_variations"].items()) tones.push_back(t);
            for (const auto& tone : tones) {
                auto p = varscope::emoji_phrasings(
                    varscope::emoji_caption_source(e, json(), tone, style, "entry"));
                c.train.push_back(std::move(p.train));
                c.heldout.push_back(std::move(p.heldout));
            }
        }
    return c;
}

class SentencePieceTraining : public ::testing::Test {
  protected:
    void SetUp() override {
        if (!varscope::sentencepiece_training_available())
            GTEST_SKIP() << "built without SentencePiece's trainer";
    }
};

}  // namespace

TEST_F(SentencePieceTraining, GivesADeterministicT5Model) {
    const auto sentences = varscope::training_sentences(small_captions());
    SentencePieceTrainOptions o;
    o.vocab_size = 50;
    const std::string a = varscope::train_sentencepiece(sentences, o);
    const std::string b = varscope::train_sentencepiece(sentences, o);
    ASSERT_FALSE(a.empty());
    EXPECT_TRUE(a == b) << "two trainings on the same sentences gave different bytes";
    o.vocab_size = 56;
    EXPECT_FALSE(varscope::train_sentencepiece(sentences, o) == a);  // the options matter

    // T5's layout (the tokenizer refuses anything else), the requested size, EOS appended.
    const auto tok = SentencePieceTokenizer::from_bytes(a, "trained");
    EXPECT_EQ(tok.piece_size(), 50);
    const auto prompt = tok.encode("red apple");
    EXPECT_EQ(prompt.ids.back(), SentencePieceTokenizer::kEosId);
    for (const auto& s : sentences) EXPECT_EQ(tok.decode_pieces(tok.encode_pieces(s)), s);
    // Case folding: a prompt typed with capitals is the caption the model was trained on.
    EXPECT_EQ(tok.encode_pieces("Thumbs Up Sign"), tok.encode_pieces("thumbs up sign"));
    EXPECT_NE(error_of<TokenizerError>([&] {
                  tok.decode_pieces({5, 50});
              }).find("id 50"),
              std::string::npos);
    // A character the captions never had is <unk>.
    const auto unk = tok.encode_pieces("zzz \xe2\x9c\x93");
    EXPECT_NE(std::find(unk.begin(), unk.end(), SentencePieceTokenizer::kUnkId), unk.end());
}

TEST_F(SentencePieceTraining, ErrorsAreTokenizerErrors) {
    const auto sentences = varscope::training_sentences(small_captions());
    SentencePieceTrainOptions o;
    o.vocab_size = 3;
    EXPECT_NE(error_of<TokenizerError>([&] {
                  varscope::train_sentencepiece(sentences, o);
              }).find("at least 4"),
              std::string::npos);
    o.vocab_size = 50000;  // far more pieces than the sentences have
    EXPECT_NE(error_of<TokenizerError>([&] {
                  varscope::train_sentencepiece(sentences, o);
              }).find("SentencePiece training failed"),
              std::string::npos);
    o.vocab_size = 50;
    EXPECT_NE(error_of<TokenizerError>([&] {
                  varscope::train_sentencepiece({}, o);
              }).find("no sentences"),
              std::string::npos);
    o.model_type = "nonsense";
    EXPECT_NE(error_of<TokenizerError>([&] {
                  varscope::train_sentencepiece(sentences, o);
              }).find("SentencePiece training failed"),
              std::string::npos);
}

TEST_F(SentencePieceTraining, CaptionTokenizerTrainsOnTrainingPhrasingsOnly) {
    EmojiCaptions c = small_captions();
    const auto sentences = varscope::training_sentences(c);
    size_t train_count = 0;
    for (const auto& row : c.train) train_count += row.size();
    EXPECT_EQ(sentences.size(), train_count);
    for (const auto& row : c.heldout)
        for (const auto& h : row)
            EXPECT_EQ(std::count(sentences.begin(), sentences.end(), h), 0) << h;

    // A character only in a held-out phrasing cannot be in the model: it shows as <unk>.
    c.heldout[0].push_back("a picture of \xc3\xb8");  // U+00F8, in no training phrasing
    SentencePieceTrainOptions o;
    o.vocab_size = 50;
    const auto t = varscope::train_caption_tokenizer(c, o);
    EXPECT_EQ(t.stats.pieces, 50);
    EXPECT_EQ(t.stats.train_phrasings, static_cast<int64_t>(train_count));
    EXPECT_EQ(t.stats.train_round_trip_failures, 0);
    EXPECT_EQ(t.stats.heldout_with_unk, 1);
    EXPECT_EQ(t.stats.heldout_unk_tokens, 1);
    EXPECT_EQ(t.stats.heldout_round_trip_failures, 1);
    EXPECT_GT(t.stats.heldout_unk_rate(), 0.0);
    EXPECT_LT(t.stats.heldout_unk_rate(), 0.05);
    const json j = t.stats.to_json();
    EXPECT_EQ(j.at("heldout_phrasings_with_unk"), 1);
    EXPECT_GT(j.at("train_tokens_per_phrasing").get<double>(), 1.0);
}

// ---- the shipped tokenizer ------------------------------------------------------------------

TEST(EmojiT2ITokenizer, ShippedModelMatchesPythonSentencePiece) {
    if (!SentencePieceTokenizer::available()) GTEST_SKIP() << "built without SentencePiece";
    const std::string dir = varscope::testing::source_dir();
    const SentencePieceTokenizer tok(dir + "/resources/models/emoji-t2i-t5/spiece.model");
    const json f = varscope::read_json_file(dir + "/tests/fixtures/emoji_spiece/cases.json",
                                            "the parity fixture");
    ASSERT_EQ(f.at("pieces").get<int>(), tok.piece_size());
    size_t captions = 0;
    for (const auto& c : f.at("cases")) {
        const auto text = c.at("text").get<std::string>();
        const auto ids = c.at("ids").get<std::vector<int>>();
        EXPECT_EQ(tok.encode_pieces(text), ids) << text;
        EXPECT_EQ(tok.decode_pieces(ids), c.at("decoded").get<std::string>()) << text;
        if (c.at("kind") == "caption") {
            ++captions;
            EXPECT_EQ(tok.decode_pieces(tok.encode_pieces(text)), text);  // round trip
        }
    }
    EXPECT_GE(captions, 200u);
}
