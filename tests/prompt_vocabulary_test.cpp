// The prompt vocabulary (core/text/prompt_vocabulary.h): the words of the training phrasings,
// the filter that leaves out the others, its file format and errors, and the CLI's
// `train tokenizer --vocabulary-out` on a tiny dataset.
#include "core/text/prompt_vocabulary.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "fuzz/t5_contract.h"
#include "tests/error_of.h"
#include "tests/test_util.h"

namespace {

using varscope::PromptVocabulary;
using varscope::testing::error_of;
using varscope::testing::TempDir;

PromptVocabulary emoji_words() {
    return PromptVocabulary::from_phrasings({
        "thumbs up sign, dark skin tone, twemoji style",
        "a noto emoji of crescent moon",
        "moon emoji",
        "crescent moon, sky & weather, travel & places",
        "twemoji +1 dark skin tone",
    });
}

TEST(PromptVocabulary, WordsAreCaptionTextSplitAtSpacesWithoutEdgePunctuation) {
    EXPECT_EQ(varscope::prompt_words("Thumbs  up, (dark skin tone)!"),
              (std::vector<std::string>{"thumbs", "up", "dark", "skin", "tone"}));
    EXPECT_EQ(varscope::prompt_words("sky & weather"),
              (std::vector<std::string>{"sky", "&", "weather"}));
    EXPECT_EQ(varscope::prompt_words(" , ; "), std::vector<std::string>{});
    const auto v = emoji_words();
    EXPECT_TRUE(v.contains("+1"));
    EXPECT_TRUE(v.contains("&"));
    EXPECT_TRUE(v.contains("style"));
    EXPECT_FALSE(v.contains("style,"));  // punctuation is not part of a word
    EXPECT_FALSE(v.contains("Moon"));    // words are stored in caption_text's lower case
}

TEST(PromptVocabulary, FilterLeavesOutUnknownWordsAndKeepsSeparators) {
    const auto v = emoji_words();
    auto f = v.filter("an icon showing moon, from the travel & places category");
    EXPECT_EQ(f.text, "moon, travel & places");  // "the" is not among these phrasings' words
    EXPECT_EQ(f.dropped,
              (std::vector<std::string>{"an", "icon", "showing", "from", "the", "category"}));
    EXPECT_TRUE(f.changed());
    EXPECT_FALSE(f.no_known_word);

    // Case folds as the captions do; an unknown word's comma survives once, not twice.
    f = v.filter("A PICTURE of Crescent Moon drawn, in twemoji style, dark skin tone");
    EXPECT_EQ(f.text, "a of crescent moon, twemoji style, dark skin tone");
    EXPECT_EQ(f.dropped, (std::vector<std::string>{"picture", "drawn", "in"}));
}

TEST(PromptVocabulary, NothingToDropGivesThePromptExactlyAsTyped) {
    const auto v = emoji_words();
    // Same bytes (capitals and double spaces included): the tokens do not change.
    const std::string typed = "Thumbs Up Sign,  dark skin tone";
    const auto f = v.filter(typed);
    EXPECT_EQ(f.text, typed);
    EXPECT_FALSE(f.changed());
    EXPECT_FALSE(f.no_known_word);
    EXPECT_EQ(v.filter("").text, "");
}

TEST(PromptVocabulary, NoKnownWordKeepsThePromptAndSaysSo) {
    const auto v = emoji_words();
    const auto f = v.filter("zebra galloping");
    EXPECT_EQ(f.text, "zebra galloping");
    EXPECT_TRUE(f.no_known_word);
    EXPECT_TRUE(f.dropped.empty());
    EXPECT_FALSE(f.changed());
    // Punctuation alone has no word to know.
    EXPECT_FALSE(v.filter("!!").no_known_word);
}

TEST(PromptVocabulary, JsonRoundTripIsSortedAndDeterministic) {
    const auto v = emoji_words();
    const auto j = v.to_json();
    EXPECT_EQ(j["format"], "varscope-prompt-vocabulary");
    EXPECT_EQ(j["version"], 1);
    auto words = j["words"].get<std::vector<std::string>>();
    EXPECT_TRUE(std::is_sorted(words.begin(), words.end()));
    EXPECT_EQ(static_cast<int64_t>(words.size()), v.size());
    const auto back = PromptVocabulary::from_json(j, "t");
    EXPECT_EQ(back.to_json().dump(), j.dump());
    // The same phrasings in another order: the same file.
    const auto w = PromptVocabulary::from_phrasings(
        {"moon emoji", "twemoji +1 dark skin tone", "a noto emoji of crescent moon",
         "crescent moon, sky & weather, travel & places",
         "thumbs up sign, dark skin tone, twemoji style"});
    EXPECT_EQ(w.to_json().dump(), j.dump());
}

TEST(PromptVocabulary, BadFilesAreNamed) {
    TempDir dir;
    const std::string missing = dir.file("missing.json");
    EXPECT_NE(error_of([&] { PromptVocabulary::load(missing); }).find("missing.json"),
              std::string::npos);
    const auto write = [&](const std::string& name, const std::string& text) {
        std::ofstream(dir.file(name)) << text;
        return dir.file(name);
    };
    const std::string not_json = write("a.json", "{words");
    EXPECT_NE(error_of([&] { PromptVocabulary::load(not_json); }).find("is not JSON"),
              std::string::npos);
    const std::string other = write("b.json", R"({"format": "x", "version": 1, "words": []})");
    EXPECT_NE(error_of([&] { PromptVocabulary::load(other); }).find("b.json"), std::string::npos);
    const std::string version =
        write("c.json", R"({"format": "varscope-prompt-vocabulary", "version": 2, "words": []})");
    EXPECT_NE(error_of([&] { PromptVocabulary::load(version); }).find("version"),
              std::string::npos);
    const std::string bad_word =
        write("d.json", R"({"format": "varscope-prompt-vocabulary", "version": 1, "words": [3]})");
    EXPECT_NE(error_of([&] { PromptVocabulary::load(bad_word); }).find("non-string"),
              std::string::npos);
    const std::string good = write(
        "e.json", R"({"format": "varscope-prompt-vocabulary", "version": 1, "words": ["moon"]})");
    EXPECT_EQ(PromptVocabulary::load(good).filter("a moon").text, "moon");
}

}  // namespace

namespace {

// fuzz_t5's roles 3 and 4 (fuzz/t5_contract.h) on inputs a fuzzer would try first: the contract
// holds (no other exception escapes, a changed prompt keeps only known words, an unchanged one
// is given back as typed).
TEST(PromptVocabulary, TheFuzzContractHoldsForOddInput) {
    TempDir dir;
    const std::string folder = dir.path().string();
    for (const std::string& prompt :
         {std::string(""), std::string(" "), std::string(",,,"), std::string("a & b,"),
          std::string("thumbs\tup\n, zz"), std::string("\xc3"), std::string("x \xc3\x85 \xc3"),
          std::string("\xe2\x80\x99\xe2\x80"), std::string("zz, (thumbs) zz!"),
          std::string("a\0b up", 6), std::string(300, ',') + " up"}) {
        EXPECT_NO_THROW(varscope::fuzz::check_t5("\x04" + prompt, folder)) << prompt;
        EXPECT_NO_THROW(varscope::fuzz::check_t5(
            "\x03{\"format\": \"varscope-prompt-vocabulary\", \"version\": 1, \"words\": [\"" +
                std::string(prompt.empty() ? "x" : "up") + "\"]}",
            folder));
    }
    EXPECT_NO_THROW(varscope::fuzz::check_t5("\x03{\"words\": 3}", folder));  // refused, not thrown
}

}  // namespace
