// The T5 tokenizer against ids written by the Python `sentencepiece` package and Hugging Face's
// T5Tokenizer (tools/parity/t5_parity.py --make-fixture tests/fixtures/t5_tiny).
#include "core/text/sentencepiece_tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "core/io/json_read.h"
#include "tests/error_of.h"
#include "tests/test_util.h"

namespace {

using varscope::Padding;
using varscope::SentencePieceTokenizer;
using varscope::T5TokenizerOptions;
using varscope::TokenizerError;
using varscope::testing::error_of;
using varscope::testing::TempDir;

std::string fixture(const std::string& name) {
    return varscope::testing::source_dir() + "/tests/fixtures/t5_tiny/" + name;
}

struct Case {
    std::string text, kind;
    std::vector<int64_t> sp_ids, hf_ids, hf_fast_ids;
};

std::vector<Case> load_cases() {
    const auto j = varscope::read_json_file(fixture("prompts.json"), "prompts.json");
    std::vector<Case> out;
    for (const auto& p : j.at("prompts")) {
        Case c;
        c.text = p.at("text").get<std::string>();
        c.kind = p.at("kind").get<std::string>();
        c.sp_ids = p.at("sp_ids").get<std::vector<int64_t>>();
        c.hf_ids = p.at("hf_ids").get<std::vector<int64_t>>();
        if (p.contains("hf_fast_ids"))
            c.hf_fast_ids = p.at("hf_fast_ids").get<std::vector<int64_t>>();
        out.push_back(std::move(c));
    }
    return out;
}

bool ends_with(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

class Tokenizer : public ::testing::Test {
  protected:
    void SetUp() override {
        if (!SentencePieceTokenizer::available())
            GTEST_SKIP() << "built without SentencePiece (VARSCOPE_WITH_SENTENCEPIECE=OFF)";
    }
};

// The fixture covers what it claims, so a regenerated one cannot silently lose its hard cases.
TEST_F(Tokenizer, FixtureCoversTheHardCases) {
    const auto cases = load_cases();
    ASSERT_GE(cases.size(), 200u);
    std::map<std::string, int> kinds;
    int truncated = 0, unknown = 0;
    bool empty = false;
    for (const auto& c : cases) {
        ++kinds[c.kind];
        truncated += c.sp_ids.size() + 1 > 512;
        empty = empty || c.text.empty();
        for (auto id : c.sp_ids) unknown += id == SentencePieceTokenizer::kUnkId;
    }
    for (const char* k : {"ordinary", "unicode", "whitespace", "long", "special"})
        EXPECT_GT(kinds[k], 0) << k;
    EXPECT_GE(truncated, 3);
    EXPECT_GT(unknown, 0) << "no prompt has characters outside the tiny vocabulary";
    EXPECT_TRUE(empty);
}

// Plain SentencePiece ids equal the Python package's for every prompt.
TEST_F(Tokenizer, PiecesMatchPythonSentencePiece) {
    const SentencePieceTokenizer tok(fixture("spiece.model"));
    EXPECT_EQ(tok.piece_size(), 400);
    int checked = 0;
    for (const auto& c : load_cases()) {
        const auto ids = tok.encode_pieces(c.text);
        ASSERT_EQ(std::vector<int64_t>(ids.begin(), ids.end()), c.sp_ids) << "prompt: " << c.text;
        ++checked;
    }
    EXPECT_GE(checked, 200);
}

// T5 ids (added tokens, truncation to 512 with EOS) equal HF's slow T5Tokenizer for every prompt.
TEST_F(Tokenizer, IdsMatchHuggingFaceT5Tokenizer) {
    const SentencePieceTokenizer tok(fixture("spiece.model"));
    int truncated = 0, special_differs = 0;
    for (const auto& c : load_cases()) {
        const auto got = tok.encode(c.text);
        ASSERT_EQ(got.ids, c.hf_ids) << "prompt: " << c.text;
        EXPECT_LE(got.ids.size(), 512u);
        EXPECT_EQ(got.ids.back(), SentencePieceTokenizer::kEosId);
        // Only prompts that spell an added token differ from plain SentencePiece + EOS.
        std::vector<int64_t> plain(c.sp_ids.begin(),
                                   c.sp_ids.begin() + std::min<size_t>(c.sp_ids.size(), 511));
        plain.push_back(1);
        if (plain != got.ids) {
            EXPECT_EQ(c.kind, "special") << c.text;
            ++special_differs;
        }
        EXPECT_EQ(got.truncated, c.sp_ids.size() + 1 > 512 && c.kind != "special") << c.text;
        truncated += got.truncated;
        if (got.truncated) {
            EXPECT_GT(got.untruncated_length, 512);
        }
    }
    EXPECT_GE(truncated, 3);
    EXPECT_GE(special_differs, 5);
}

// HF's fast tokenizer (what Infinity loads) agrees too, except that it appends EOS even when the
// prompt itself ends in "</s>" (the slow one does not; we follow the slow one).
TEST_F(Tokenizer, FastTokenizerDiffersOnlyOnATrailingEosText) {
    const SentencePieceTokenizer tok(fixture("spiece.model"));
    int compared = 0;
    for (const auto& c : load_cases()) {
        if (c.hf_fast_ids.empty()) continue;
        ++compared;
        if (ends_with(c.text, "</s>")) {
            auto ids = tok.encode(c.text).ids;
            ids.push_back(1);
            EXPECT_EQ(ids, c.hf_fast_ids) << c.text;
        } else {
            EXPECT_EQ(tok.encode(c.text).ids, c.hf_fast_ids) << c.text;
        }
    }
    if (compared == 0) GTEST_SKIP() << "fixture has no fast-tokenizer ids";
}

TEST_F(Tokenizer, SpecialTokensCanBePlainText) {
    T5TokenizerOptions o;
    o.parse_special_tokens = false;
    const SentencePieceTokenizer tok(fixture("spiece.model"), o);
    for (const auto& c : load_cases()) {
        std::vector<int64_t> plain(c.sp_ids.begin(),
                                   c.sp_ids.begin() + std::min<size_t>(c.sp_ids.size(), 511));
        plain.push_back(1);
        ASSERT_EQ(tok.encode(c.text).ids, plain) << c.text;
    }
}

TEST_F(Tokenizer, ShortMaxLengthKeepsRoomForEos) {
    T5TokenizerOptions o;
    o.max_length = 4;
    const SentencePieceTokenizer tok(fixture("spiece.model"), o);
    const auto full = tok.encode_pieces("a photo of a cat on a white background");
    ASSERT_GT(full.size(), 3u);
    const auto got = tok.encode("a photo of a cat on a white background");
    EXPECT_TRUE(got.truncated);
    EXPECT_EQ(got.untruncated_length, static_cast<int64_t>(full.size()) + 1);
    EXPECT_EQ(got.ids, (std::vector<int64_t>{full[0], full[1], full[2], 1}));
    // Exactly max_length - 1 pieces fit without truncation.
    o.max_length = static_cast<int>(full.size()) + 1;
    const SentencePieceTokenizer exact(fixture("spiece.model"), o);
    EXPECT_FALSE(exact.encode("a photo of a cat on a white background").truncated);
    EXPECT_EQ(tok.encode("").ids, std::vector<int64_t>{1});
}

TEST_F(Tokenizer, BatchPadsAndMasks) {
    const SentencePieceTokenizer tok(fixture("spiece.model"));
    const std::vector<std::string> prompts = {"a cat", "", "an emoji of a smiling face",
                                              std::string(2000, 'a')};
    for (Padding pad : {Padding::kLongest, Padding::kMaxLength}) {
        const auto b = tok.encode_batch(prompts, pad);
        ASSERT_EQ(b.rows, 4);
        EXPECT_EQ(b.length, 512);  // the long prompt fills max_length either way
        EXPECT_TRUE(b.any_truncated());
        EXPECT_EQ(b.truncated, (std::vector<bool>{false, false, false, true}));
        for (int64_t r = 0; r < b.rows; ++r) {
            const auto ids = tok.encode(prompts[size_t(r)]).ids;
            EXPECT_EQ(b.lengths[size_t(r)], int64_t(ids.size()));
            int64_t mask_sum = 0;
            for (int64_t t = 0; t < b.length; ++t) {
                const size_t k = size_t(r * b.length + t);
                mask_sum += b.attention_mask[k];
                EXPECT_EQ(b.input_ids[k], t < int64_t(ids.size()) ? ids[size_t(t)] : 0);
            }
            EXPECT_EQ(mask_sum, b.lengths[size_t(r)]);
        }
    }
    const auto shortb = tok.encode_batch({"a cat", "a dog on a white background"});
    EXPECT_EQ(shortb.length, *std::max_element(shortb.lengths.begin(), shortb.lengths.end()));
    EXPECT_FALSE(shortb.any_truncated());
    EXPECT_EQ(tok.encode_batch({"a cat"}, Padding::kMaxLength).length, 512);
}

TEST_F(Tokenizer, BadModelFilesNameTheFile) {
    TempDir dir;
    const std::string missing = dir.file("nope/spiece.model");
    std::string e = error_of<TokenizerError>([&] { SentencePieceTokenizer t(missing); });
    EXPECT_NE(e.find(missing), std::string::npos) << e;

    // Corrupt: the real model cut in half, and bytes that are no model at all.
    std::ifstream in(fixture("spiece.model"), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_GT(bytes.size(), 1000u);
    for (const std::string& content :
         {bytes.substr(0, bytes.size() / 2), std::string("not a sentencepiece model at all"),
          std::string()}) {
        const std::string path = dir.file("spiece.model");
        std::ofstream(path, std::ios::binary) << content;
        e = error_of<TokenizerError>([&] { SentencePieceTokenizer t(path); });
        EXPECT_NE(e.find(path), std::string::npos) << e;
        EXPECT_NE(e.find("not a valid SentencePiece model"), std::string::npos) << e;
    }
    // A folder, and a valid model with other special ids.
    e = error_of<TokenizerError>([&] { SentencePieceTokenizer t(dir.path().string()); });
    EXPECT_NE(e.find(dir.path().string()), std::string::npos) << e;
    e = error_of<TokenizerError>([&] { SentencePieceTokenizer t(fixture("not_t5.model")); });
    EXPECT_NE(e.find("not_t5.model"), std::string::npos) << e;
    EXPECT_NE(e.find("not a T5 tokenizer"), std::string::npos) << e;

    T5TokenizerOptions o;
    o.max_length = 0;
    e = error_of<TokenizerError>([&] { SentencePieceTokenizer t(fixture("spiece.model"), o); });
    EXPECT_NE(e.find("max_length"), std::string::npos) << e;
}

}  // namespace
