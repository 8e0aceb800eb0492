// Emoji captions (core/data/emoji_captions.h): the phrasings of a row, their held-out split, the
// packed metadata format, and `varscope-cli pack-emoji` / `train tokenizer` on a tiny dataset.
#include "core/data/emoji_captions.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/io/checkpoint.h"
#include "core/resources.h"
#include "core/text/prompt_vocabulary.h"
#include "core/text/sentencepiece_tokenizer.h"
#include "tests/cli_run.h"
#include "tests/error_of.h"
#include "tests/png_fixture.h"
#include "tests/test_util.h"

namespace {

using json = nlohmann::json;
using varscope::EmojiCaptions;
using varscope::EmojiCaptionSource;
using varscope::EmojiStyle;
using varscope::testing::error_of;
using varscope::testing::TempDir;

bool has(const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
}

std::string all(const std::vector<std::string>& v) {
    std::string out;
    for (const auto& s : v) out += "'" + s + "' ";
    return out;
}

const json kThumbs = json::parse(R"({
    "name": "THUMBS UP SIGN", "short_name": "+1", "short_names": ["+1", "thumbsup"],
    "category": "People & Body", "subcategory": "hand-fingers-closed", "image": "1f44d.png",
    "skin_variations": {"1F3FF": {"image": "1f44d-1f3ff.png"},
                        "1F3FB-1F3FF": {"image": "x.png"}}})");

EmojiCaptionSource thumbs(const std::string& tone, EmojiStyle style) {
    return varscope::emoji_caption_source(kThumbs, json(), tone, style, "thumbs");
}

std::string slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
}

void write_text(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
}

}  // namespace

// ---- phrasings -------------------------------------------------------------------------------

TEST(EmojiCaptions, PhrasingsNameTheEmojiStyleAndSkinTone) {
    const auto dark = varscope::emoji_phrasings(thumbs("1F3FF", EmojiStyle::kTwemoji));
    EXPECT_TRUE(has(dark.train, "thumbs up sign")) << all(dark.train);
    EXPECT_TRUE(has(dark.train, "thumbs up sign, dark skin tone, twemoji style"))
        << all(dark.train);
    EXPECT_TRUE(has(dark.train, "a twemoji emoji of thumbs up sign with dark skin tone"))
        << all(dark.train);
    // Short names as words, each its own phrasing; a leading sign stays.
    EXPECT_TRUE(has(dark.train, "+1 emoji, dark skin tone")) << all(dark.train);
    EXPECT_TRUE(has(dark.train, "thumbsup emoji, dark skin tone")) << all(dark.train);
    EXPECT_TRUE(has(dark.train, "thumbs up sign, hand fingers closed, people & body"))
        << all(dark.train);

    const auto base = varscope::emoji_phrasings(thumbs("", EmojiStyle::kNoto));
    EXPECT_TRUE(has(base.train, "a noto emoji of thumbs up sign")) << all(base.train);
    EXPECT_TRUE(has(base.train, "thumbs up sign, noto style")) << all(base.train);
    for (const auto& p : base.train) EXPECT_EQ(p.find("skin"), std::string::npos) << p;

    const auto pair = varscope::emoji_phrasings(thumbs("1F3FB-1F3FF", EmojiStyle::kNoto));
    EXPECT_TRUE(has(pair.train, "thumbs up sign, light and dark skin tones, noto style"))
        << all(pair.train);
}

TEST(EmojiCaptions, PhrasingsAreDeterministicAndLowerCase) {
    const auto a = varscope::emoji_phrasings(thumbs("1F3FF", EmojiStyle::kNoto));
    const auto b = varscope::emoji_phrasings(thumbs("1F3FF", EmojiStyle::kNoto));
    EXPECT_EQ(a.train, b.train);
    EXPECT_EQ(a.heldout, b.heldout);
    EXPECT_GE(a.train.size(), 5u);
    EXPECT_GE(a.heldout.size(), 1u);
    for (const auto* list : {&a.train, &a.heldout})
        for (const auto& p : *list) {
            EXPECT_EQ(
                std::count_if(p.begin(), p.end(), [](char c) { return c >= 'A' && c <= 'Z'; }), 0)
                << p;
            EXPECT_EQ(p.find("  "), std::string::npos) << p;
            EXPECT_EQ(p.find('_'), std::string::npos) << p;
            EXPECT_EQ(std::count(list->begin(), list->end(), p), 1) << "duplicate " << p;
        }
    // The style and the tone change the phrasings.
    EXPECT_NE(varscope::emoji_phrasings(thumbs("1F3FF", EmojiStyle::kTwemoji)).train, a.train);
    EXPECT_NE(varscope::emoji_phrasings(thumbs("", EmojiStyle::kNoto)).train, a.train);
}

TEST(EmojiCaptions, HeldOutPhrasingsAreDisjointFromAllTrainingPhrasings) {
    // Many rows: the held-out set may share no string with ANY row's training phrasings.
    const json entries = json::parse(R"([
        {"name": "THUMBS UP SIGN", "short_names": ["+1", "thumbsup"], "category": "People & Body",
         "subcategory": "hand-fingers-closed", "skin_variations": {"1F3FB": {}, "1F3FF": {}}},
        {"name": "FRAME WITH PICTURE", "short_names": ["frame_with_picture"],
         "category": "Activities", "subcategory": "arts & crafts"},
        {"name": "Åland Islands Flag", "short_names": ["flag-ax"], "category": "Flags",
         "subcategory": "country-flag"},
        {"name": "PICTURE", "short_names": ["a_picture_of_picture"], "category": "Objects"},
        {"name": "ICON", "short_names": ["icon"]}
    ])");
    std::set<std::string> train, heldout;
    for (size_t i = 0; i < entries.size(); ++i)
        for (const auto style : {EmojiStyle::kNoto, EmojiStyle::kTwemoji}) {
            std::vector<std::string> tones = {""};
            if (entries[i].contains("skin_variations"))
                for (const auto& [t, v] : entries[i]["skin_variations"].items()) tones.push_back(t);
            for (const auto& tone : tones) {
                const auto p = varscope::emoji_phrasings(varscope::emoji_caption_source(
                    entries[i], json(), tone, style, "entry " + std::to_string(i)));
                EXPECT_FALSE(p.train.empty());
                EXPECT_FALSE(p.heldout.empty()) << "entry " << i;
                train.insert(p.train.begin(), p.train.end());
                heldout.insert(p.heldout.begin(), p.heldout.end());
            }
        }
    for (const auto& h : heldout) EXPECT_EQ(train.count(h), 0u) << "held out and trained: " << h;
    EXPECT_GT(heldout.size(), 10u);
}

TEST(EmojiCaptions, TextIsNormalisedForPrompts) {
    const json flag = json::parse(
        R"({"name": "Åland Islands Flag", "short_names": ["flag-ax"], "category": "Flags",
            "subcategory": "country-flag"})");
    const auto p = varscope::emoji_phrasings(
        varscope::emoji_caption_source(flag, json(), "", EmojiStyle::kNoto, "flag"));
    EXPECT_EQ(p.train.at(0), "åland islands flag");  // Latin-1 capitals folded too
    EXPECT_TRUE(has(p.train, "flag ax emoji")) << all(p.train);
    const json helmet =
        json::parse(R"({"name": "RESCUE WORKER’S  HELMET", "short_names": ["minus-one", "-1"]})");
    const auto h = varscope::emoji_phrasings(
        varscope::emoji_caption_source(helmet, json(), "", EmojiStyle::kNoto, "helmet"));
    EXPECT_EQ(h.train.at(0), "rescue worker's helmet");
    EXPECT_TRUE(has(h.train, "minus one emoji")) << all(h.train);
    EXPECT_TRUE(has(h.train, "-1 emoji")) << all(h.train);
}

TEST(EmojiCaptions, SkinToneWords) {
    EXPECT_EQ(varscope::skin_tone_words("1F3FB"), "light skin tone");
    EXPECT_EQ(varscope::skin_tone_words("1F3FC"), "medium-light skin tone");
    EXPECT_EQ(varscope::skin_tone_words("1F3FD"), "medium skin tone");
    EXPECT_EQ(varscope::skin_tone_words("1F3FE"), "medium-dark skin tone");
    EXPECT_EQ(varscope::skin_tone_words("1F3FF-1F3FF"), "dark skin tone");
    EXPECT_EQ(varscope::skin_tone_words("1F3FC-1F3FE"), "medium-light and medium-dark skin tones");
    for (const char* bad : {"", "1F3FA", "1f3fb", "1F3FB-", "1F3FB-1F3FF-1F3FF"})
        EXPECT_NE(error_of<std::invalid_argument>([&] {
                      varscope::skin_tone_words(bad);
                  }).find("unknown skin tone"),
                  std::string::npos)
            << bad;
}

TEST(EmojiCaptions, SourceFromEntryAndCategories) {
    const json entry = json::parse(R"({"short_name": "red_apple", "category": "Food & Drink"})");
    const json categories = json::parse(R"({"Food & Drink": {"food-fruit": ["grapes", "red_apple"]},
                                            "Objects": {"x": ["y"]}})");
    const auto s = varscope::emoji_caption_source(entry, categories, "", EmojiStyle::kTwemoji, "e");
    EXPECT_EQ(s.name, "red apple");  // no "name": the short name as words
    EXPECT_EQ(s.category, "Food & Drink");
    EXPECT_EQ(s.subcategory, "food-fruit");  // from categories.json
    EXPECT_EQ(s.style, EmojiStyle::kTwemoji);
    // Without categories.json the subcategory stays empty and captions still work.
    const auto bare = varscope::emoji_caption_source(entry, json(), "", EmojiStyle::kNoto, "e");
    EXPECT_EQ(bare.subcategory, "");
    EXPECT_FALSE(varscope::emoji_phrasings(bare).train.empty());
}

TEST(EmojiCaptions, MalformedEntriesAreNamed) {
    auto err = [](const std::string& entry, const std::string& tone = "") {
        return error_of<std::invalid_argument>([&] {
            varscope::emoji_caption_source(json::parse(entry), json(), tone, EmojiStyle::kNoto,
                                           "emoji.json entry 7");
        });
    };
    EXPECT_NE(err("[1]").find("emoji.json entry 7 is not an object"), std::string::npos);
    EXPECT_NE(err(R"({"category": "x"})").find("no \"name\" or \"short_name\""), std::string::npos);
    EXPECT_NE(err(R"({"name": 3})").find("\"name\" must be a string"), std::string::npos);
    EXPECT_NE(err(R"({"name": "A", "short_names": "a"})").find("\"short_names\""),
              std::string::npos);
    EXPECT_NE(err(R"({"name": "A"})", "1F3FB").find("no skin variation '1F3FB'"),
              std::string::npos);
    EXPECT_NE(err(R"({"name": "A", "skin_variations": {"1F3FA": {}}})", "1F3FA")
                  .find("entry 7: unknown skin tone '1F3FA'"),
              std::string::npos);
}

// ---- the packed format ------------------------------------------------------------------------

TEST(EmojiCaptions, JsonRoundTripAndErrors) {
    EmojiCaptions c;
    c.train = {{"a", "b"}, {"c"}};
    c.heldout = {{"x"}, {"y", "z"}};
    const std::string text = varscope::emoji_captions_to_json(c);
    EXPECT_EQ(text, varscope::emoji_captions_to_json(c));  // same bytes
    const auto back = varscope::emoji_captions_from_json(text, "f");
    EXPECT_EQ(back.train, c.train);
    EXPECT_EQ(back.heldout, c.heldout);

    auto err = [](const std::string& t) {
        return error_of<std::invalid_argument>(
            [&] { varscope::emoji_captions_from_json(t, "packed data 'p'"); });
    };
    const std::string head = R"({"format": "varscope-emoji-captions", "version": 1, )";
    EXPECT_NE(err("{").find("packed data 'p': malformed captions (not JSON"), std::string::npos);
    EXPECT_NE(err(R"({"version": 1})").find("\"format\""), std::string::npos);
    EXPECT_NE(err(R"({"format": "varscope-emoji-captions", "version": 2})").find("version"),
              std::string::npos);
    EXPECT_NE(err(head + R"("train": [], "heldout": []})").find("\"rows\""), std::string::npos);
    EXPECT_NE(err(head + R"("rows": 1, "train": [["a"]], "heldout": []})")
                  .find("\"heldout\" has 0 rows, \"rows\" says 1"),
              std::string::npos);
    EXPECT_NE(err(head + R"("rows": 1, "train": [[]], "heldout": [["a"]]})").find("train row 0"),
              std::string::npos);
    EXPECT_NE(err(head + R"("rows": 1, "train": [["a"]], "heldout": [[""]]})")
                  .find("heldout row 0 has an empty"),
              std::string::npos);
    EmojiCaptions uneven;
    uneven.train = {{"a"}};
    EXPECT_NE(error_of<std::invalid_argument>([&] {
                  varscope::emoji_captions_to_json(uneven);
              }).find("1 train rows but 0 held-out rows"),
              std::string::npos);
}

TEST(EmojiCaptions, LoadFromPackedFile) {
    TempDir dir;
    EmojiCaptions c;
    c.train = {{"red thing"}, {"blue thing", "blue"}};
    c.heldout = {{"a picture of red thing"}, {"a picture of blue thing"}};
    const auto labels = at::arange(2, at::kLong);
    const std::string ok = dir.file("ok.safetensors");
    varscope::save_safetensors({{"labels", labels}}, ok,
                               {{"captions", varscope::emoji_captions_to_json(c)}});
    const auto back = varscope::load_emoji_captions(ok);
    EXPECT_EQ(back.train, c.train);
    EXPECT_EQ(back.heldout, c.heldout);

    auto err = [](const std::string& path) {
        return error_of<std::invalid_argument>([&] { varscope::load_emoji_captions(path); });
    };
    EXPECT_NE(err(dir.file("none.safetensors")).find("none.safetensors' not found"),
              std::string::npos);
    write_text(dir.file("text.safetensors"), "hello, not a tensor file");
    EXPECT_NE(err(dir.file("text.safetensors")).find("is not a packed safetensors file"),
              std::string::npos);
    varscope::save_safetensors({{"labels", labels}}, dir.file("old.safetensors"),
                               {{"dataset", "emoji64"}});
    EXPECT_NE(err(dir.file("old.safetensors")).find("has no captions"), std::string::npos);
    varscope::save_safetensors({{"labels", at::arange(3, at::kLong)}}, dir.file("rows.safetensors"),
                               {{"captions", varscope::emoji_captions_to_json(c)}});
    EXPECT_NE(err(dir.file("rows.safetensors")).find("2 caption rows for 3 packed rows"),
              std::string::npos);
    varscope::save_safetensors({{"images", labels}}, dir.file("nolabels.safetensors"),
                               {{"captions", varscope::emoji_captions_to_json(c)}});
    EXPECT_NE(err(dir.file("nolabels.safetensors")).find("no 1-D \"labels\""), std::string::npos);
}

// ---- varscope-cli on a tiny dataset ------------------------------------------------------------

namespace {

// Two emoji, one with a skin tone; RED THING's subcategory only in categories.json.
std::filesystem::path make_tiny_emoji64(const TempDir& dir) {
    using varscope::testing::solid;
    using varscope::testing::write_png;
    const auto root = dir.path() / "emoji64";
    std::filesystem::create_directories(root / "google");
    std::filesystem::create_directories(root / "twitter");
    write_text((root / "emoji.json").string(), R"([
      {"name": "RED THING", "short_name": "red_thing", "short_names": ["red_thing", "rouge"],
       "category": "C1", "image": "a.png", "skin_variations": {"1F3FB": {"image": "a-1.png"}}},
      {"name": "CLEAR THING", "short_name": "clear", "short_names": ["clear"], "category": "C2",
       "subcategory": "see-through", "image": "b.png"}
    ])");
    write_text((root / "categories.json").string(), R"({"C1": {"sub-one": ["red_thing"]}})");
    for (const char* style : {"google", "twitter"})
        for (const char* f : {"a.png", "a-1.png", "b.png"})
            write_png((root / style / f).string(), 64, 64, solid(64, 64, 200, 10, 10, 255));
    return root;
}

varscope::testing::CliRun pack(const std::filesystem::path& root, const std::string& out,
                               const std::string& classes, const std::string& extra = "") {
    return varscope::testing::run_cli("pack-emoji --dataset " + root.string() + " --out " + out +
                                      " --classes-out " + classes + extra);
}

// The tiny dataset packed into dir/p.safetensors; "" when this CLI cannot pack (no OpenCV).
std::string pack_tiny(const TempDir& dir) {
    const std::string packed = dir.file("p.safetensors");
    const auto r = pack(make_tiny_emoji64(dir), packed, dir.file("c.json"));
    if (r.code == 2 && r.out.find("needs a build with OpenCV") != std::string::npos) return {};
    EXPECT_EQ(r.code, 0) << r.out;
    return r.code == 0 ? packed : std::string();
}

}  // namespace

TEST(EmojiCaptions, PackEmojiWritesCaptionsDeterministically) {
    TempDir dir;
    const auto root = make_tiny_emoji64(dir);
    const std::string out = dir.file("p.safetensors"), classes = dir.file("c.json");
    auto r = pack(root, out, classes);
    if (r.code == 2 && r.out.find("needs a build with OpenCV") != std::string::npos)
        GTEST_SKIP() << "varscope-cli was built without OpenCV";
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("held-out phrasings"), std::string::npos) << r.out;

    // Rows: red (noto), red light (noto), red (twemoji), red light (twemoji), clear x2.
    const auto c = varscope::load_emoji_captions(out);
    ASSERT_EQ(c.train.size(), 6u);
    const auto t = varscope::load_safetensors(out);
    const at::Tensor styles = t.at("styles");
    for (size_t i = 0; i < 6; ++i) {
        const bool noto = styles[static_cast<int64_t>(i)].item<int>() == 0;
        const auto& p = c.train[i];
        EXPECT_TRUE(has(p, i < 4 ? "red thing" : "clear thing")) << i << ": " << all(p);
        EXPECT_TRUE(std::any_of(p.begin(), p.end(),
                                [&](const std::string& s) {
                                    return s.find(noto ? "noto" : "twemoji") != std::string::npos;
                                }))
            << i << ": " << all(p);
        const bool light = i == 1 || i == 3;
        EXPECT_EQ(has(p, std::string("red thing, light skin tone, ") + (noto ? "noto" : "twemoji") +
                             " style"),
                  light)
            << i << ": " << all(p);
        for (const auto& h : c.heldout[i]) EXPECT_FALSE(has(p, h)) << h;
    }
    EXPECT_TRUE(has(c.train[0], "red thing, sub one, c1")) << all(c.train[0]);  // categories.json
    EXPECT_TRUE(has(c.train[4], "clear thing, see through, c2")) << all(c.train[4]);

    // Same dataset, same bytes.
    const std::string out2 = dir.file("p2.safetensors"), classes2 = dir.file("c2.json");
    ASSERT_EQ(pack(root, out2, classes2).code, 0);
    EXPECT_TRUE(slurp(out) == slurp(out2)) << "two packs of the same dataset differ";

    // A broken categories.json is an input error naming the file.
    write_text((root / "categories.json").string(), "[1, 2]");
    r = pack(root, out, classes, " --force");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("categories.json"), std::string::npos) << r.out;
}

TEST(EmojiCaptions, TrainTokenizerCommand) {
    if (!varscope::SentencePieceTokenizer::available())
        GTEST_SKIP() << "built without SentencePiece";
    TempDir dir;
    const std::string packed = pack_tiny(dir);
    if (packed.empty()) GTEST_SKIP() << "varscope-cli was built without OpenCV (or pack failed)";

    const std::string model = dir.file("spiece.model");
    const std::string args = "train tokenizer --data " + packed + " --out " + model + " --vocab 40";
    auto r = varscope::testing::run_cli(args);
    if (r.code != 0 && r.out.find("no SentencePiece") != std::string::npos)
        GTEST_SKIP() << "varscope-cli was built without SentencePiece's trainer";
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("\"heldout_unk_rate\""), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\"train_round_trip_failures\": 0"), std::string::npos) << r.out;

    // The model is T5-shaped and gives the training captions back.
    const varscope::SentencePieceTokenizer tok(model);
    EXPECT_EQ(tok.piece_size(), 40);
    const auto c = varscope::load_emoji_captions(packed);
    for (const auto& row : c.train)
        for (const auto& p : row) EXPECT_EQ(tok.decode_pieces(tok.encode_pieces(p)), p);

    // Existing output needs --force; training again gives the same bytes.
    const std::string first = slurp(model);
    r = varscope::testing::run_cli(args);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("--force"), std::string::npos) << r.out;
    ASSERT_EQ(varscope::testing::run_cli(args + " --force").code, 0);
    EXPECT_TRUE(slurp(model) == first) << "two trainings gave different models";

    // The words of the same phrasings, alone: every training word in, a held-out-only word out.
    const std::string words = dir.file("prompt_vocabulary.json");
    r = varscope::testing::run_cli("train tokenizer --data " + packed + " --vocabulary-out " +
                                   words);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("\"vocabulary_words\""), std::string::npos) << r.out;
    const auto vocabulary = varscope::PromptVocabulary::load(words);
    for (const auto& row : c.train)
        for (const auto& p : row)
            for (const auto& w : varscope::prompt_words(p))
                EXPECT_TRUE(vocabulary.contains(w)) << w;
    EXPECT_FALSE(vocabulary.contains("showing"));  // held-out wording only
    EXPECT_EQ(slurp(model), first);                // --out not given: the model is untouched
    r = varscope::testing::run_cli("train tokenizer --data " + packed);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("nothing to write"), std::string::npos) << r.out;

    // Input errors are exit 2 with the file named.
    r = varscope::testing::run_cli("train tokenizer --data " + dir.file("c.json") + " --out " +
                                   dir.file("x.model"));
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("c.json"), std::string::npos) << r.out;
    r = varscope::testing::run_cli("train tokenizer --data " + packed + " --out " +
                                   dir.file("y.model") + " --vocab 100000");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("ocab"), std::string::npos) << r.out;
}

// eval-prompts on the tiny pack with the embedded class-conditional VAR (the reference path):
// every sample is scored, the files are written, bad requests are refused with exit 2.
TEST(EmojiCaptions, EvalPromptsCommand) {
    if (!varscope::embedded_model_available()) GTEST_SKIP() << "no embedded emoji VAR";
    TempDir dir;
    const std::string packed = pack_tiny(dir);
    if (packed.empty()) GTEST_SKIP() << "varscope-cli was built without OpenCV (or pack failed)";
    const std::string out = dir.file("pf");
    auto r = varscope::testing::run_cli(
        "eval-prompts --data " + packed +
        " --family var --count 3 --seeds 0,1 --prompts-per-batch 2 -o " + out);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("prompt following: "), std::string::npos) << r.out;
    const auto j = nlohmann::json::parse(slurp(out + "/prompt_following.json"));
    EXPECT_EQ(j.at("n_prompts").get<int>(), 3);
    EXPECT_EQ(j.at("n_samples").get<int>(), 6);
    for (const auto& s : j.at("samples")) {
        EXPECT_GE(s.at("nearest_row").get<int>(), 0);
        EXPECT_LT(s.at("nearest_row").get<int>(), 6);
    }
    EXPECT_EQ(j.at("class_of_prompt").size(), 3u);  // the reference: a class per phrasing
    EXPECT_TRUE(std::filesystem::exists(out + "/samples.csv"));
    // The outputs exist now: a second run needs --force.
    r = varscope::testing::run_cli("eval-prompts --data " + packed + " --family var --count 3 -o " +
                                   out);
    EXPECT_EQ(r.code, 2) << r.out;
    // The tiny pack has fewer distinct held-out phrasings than asked for.
    r = varscope::testing::run_cli("eval-prompts --data " + packed +
                                   " --family var --count 500 --force -o " + out);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("distinct phrasings"), std::string::npos) << r.out;
    // Prompts come from the data, not the command line.
    r = varscope::testing::run_cli("eval-prompts --data " + packed +
                                   " --family var --prompt heart --force -o " + out);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("held-out phrasings"), std::string::npos) << r.out;
}
