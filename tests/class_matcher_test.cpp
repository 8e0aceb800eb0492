// Class lists (load_class_list), the prompt -> class matcher, and `varscope-cli pack-emoji`.
#include "core/text/class_matcher.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "core/data/emoji_classes.h"
#include "core/io/checkpoint.h"
#include "tests/cli_run.h"
#include "tests/png_fixture.h"
#include "tests/test_util.h"

namespace {

using varscope::ClassInfo;
using varscope::ClassMatcher;
using varscope::Match;

const std::vector<ClassInfo>& emoji_classes() {
    static const auto list = varscope::load_class_list(varscope::testing::source_dir() +
                                                       "/resources/models/emoji-classes.json");
    return list;
}

const std::vector<ClassInfo>& imagenet_classes() {
    static const auto list = varscope::load_class_list(varscope::testing::source_dir() +
                                                       "/resources/imagenet-classes.json");
    return list;
}

int64_t top(const ClassMatcher& m, const std::string& prompt) {
    const auto r = m.rank(prompt, 5);
    return r.empty() ? -1 : r[0].class_id;
}

std::vector<int64_t> ids(const std::vector<Match>& r) {
    std::vector<int64_t> out;
    for (const auto& m : r) out.push_back(m.class_id);
    return out;
}

size_t position(const std::vector<Match>& r, int64_t id) {
    for (size_t i = 0; i < r.size(); ++i)
        if (r[i].class_id == id) return i;
    return r.size();
}

void write_text(const std::string& path, const std::string& text) {
    std::ofstream f(path, std::ios::binary);
    f << text;
}

}  // namespace

// ---- the shipped lists ----------------------------------------------------------------------

TEST(EmojiClasses, ShippedEmojiListMatchesEmojiJson) {
    const auto& c = emoji_classes();
    ASSERT_EQ(c.size(), 1911u);
    EXPECT_EQ(c[0].name, "HASH KEY");
    EXPECT_EQ(c[0].short_name, "hash");
    EXPECT_EQ(c[0].aliases, std::vector<std::string>{"hash"});
    EXPECT_EQ(c[0].category, "Symbols");
    EXPECT_EQ(c[625].name, "CAT FACE");
    EXPECT_EQ(c[1891].name, "HEAVY BLACK HEART");
    EXPECT_EQ(c[1891].short_name, "heart");
    for (const auto& ci : c) EXPECT_FALSE(ci.name.empty());
}

TEST(EmojiClasses, ShippedImagenetList) {
    const auto& c = imagenet_classes();
    ASSERT_EQ(c.size(), 1000u);
    EXPECT_EQ(c[0].name, "tench");
    EXPECT_EQ(c[1].name, "goldfish");
    EXPECT_EQ(c[207].name, "golden retriever");
    EXPECT_EQ(c[281].name, "tabby");
    EXPECT_EQ(c[999].name, "toilet tissue");
}

TEST(EmojiClasses, LoaderErrorsNameTheProblem) {
    varscope::testing::TempDir dir;
    auto expect_error = [&](const std::string& text, const std::string& needle) {
        const std::string path = dir.file("list.json");
        write_text(path, text);
        try {
            varscope::load_class_list(path);
            ADD_FAILURE() << "no error for: " << text;
        } catch (const std::invalid_argument& e) {
            const std::string msg = e.what();
            EXPECT_NE(msg.find(path), std::string::npos) << msg;
            EXPECT_NE(msg.find(needle), std::string::npos) << msg;
        }
    };
    expect_error("{\"classes\": [{\"id\": 0, \"name\": \"a\"}", "not valid JSON");
    expect_error("[1, 2]", "\"classes\"");
    expect_error("{\"source\": \"x\"}", "\"classes\"");
    expect_error("{\"classes\": []}", "empty");
    expect_error("{\"classes\": [{\"id\": 1, \"name\": \"a\"}]}", "ids must be 0, 1, 2");
    expect_error("{\"classes\": [{\"name\": \"a\"}]}", "\"id\"");
    expect_error("{\"classes\": [{\"id\": 0}]}", "\"name\"");
    expect_error("{\"classes\": [{\"id\": 0, \"name\": \"a\", \"aliases\": \"b\"}]}",
                 "\"aliases\"");
    expect_error("{\"classes\": [{\"id\": 0, \"name\": \"a\", \"aliases\": [1]}]}", "\"aliases\"");
    expect_error("{\"classes\": [{\"id\": 0, \"name\": 5}]}", "\"name\"");
    expect_error("{\"classes\": [7]}", "entry 0");

    EXPECT_THROW(varscope::load_class_list(dir.file("absent.json")), std::invalid_argument);

    write_text(dir.file("ok.json"),
               "{\"classes\": [{\"id\": 0, \"name\": \"A\"}, {\"id\": 1, \"name\": \"B\", "
               "\"short_name\": \"b\", \"aliases\": [\"bee\"], \"category\": \"x\"}]}");
    const auto ok = varscope::load_class_list(dir.file("ok.json"));
    ASSERT_EQ(ok.size(), 2u);
    EXPECT_TRUE(ok[0].aliases.empty());
    EXPECT_EQ(ok[1].aliases, std::vector<std::string>{"bee"});
    EXPECT_EQ(ok[1].category, "x");
}

// ---- matching on the real lists ---------------------------------------------------------------

TEST(ClassMatcher, EmojiPromptsFindWhatAUserMeans) {
    const ClassMatcher m(emoji_classes());
    const auto cat = m.rank("cat", 10);
    ASSERT_GE(cat.size(), 3u);
    EXPECT_EQ(cat[0].class_id, 581);  // CAT (exact name)
    EXPECT_EQ(cat[0].label, "CAT");
    EXPECT_EQ(cat[1].class_id, 625);       // CAT FACE (short name "cat")
    EXPECT_EQ(cat[2].class_id, 580);       // BLACK CAT: every word, longer name
    EXPECT_EQ(top(m, "red heart"), 1891);  // HEAVY BLACK HEART, short name "heart"
    EXPECT_EQ(top(m, "pizza"), 390);       // SLICE OF PIZZA, short name "pizza"
    EXPECT_EQ(top(m, "thumbs up"), 655);   // THUMBS UP SIGN, short name "thumbsup"
    EXPECT_EQ(top(m, "Thumbs-Up"), 655);
    EXPECT_EQ(top(m, "+1"), 655);
    EXPECT_EQ(top(m, "-1"), 656);  // THUMBS DOWN SIGN: the exact short name beats "+1"
    EXPECT_EQ(top(m, "  SLICE of pizza "), 390);
    EXPECT_EQ(top(m, "cats"), 581);  // plural
}

TEST(ClassMatcher, ImagenetPrompts) {
    const ClassMatcher m(imagenet_classes());
    EXPECT_EQ(top(m, "goldfish"), 1);
    EXPECT_EQ(top(m, "tabby cat"), 281);
    EXPECT_EQ(top(m, "golden retriever"), 207);
    EXPECT_EQ(top(m, "crane"), 517);  // the machine's name is exactly "crane"; 134 is "crane bird"
    const auto cat = m.rank("cat", 1000);
    EXPECT_LT(position(cat, 282), position(cat, 484));  // "tiger cat" before "catamaran"
    EXPECT_LT(position(cat, 484), cat.size());
}

TEST(ClassMatcher, IntegerPrompts) {
    const ClassMatcher m(imagenet_classes());
    auto r = m.rank("207", 5);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].class_id, 207);
    EXPECT_EQ(r[0].label, "golden retriever");
    EXPECT_EQ(ids(m.rank(" 0 ", 5)), std::vector<int64_t>{0});
    EXPECT_EQ(ids(m.rank("999", 5)), std::vector<int64_t>{999});
    EXPECT_TRUE(m.rank("1000", 5).empty());  // out of range, and no name has the word
    EXPECT_TRUE(m.rank("99999999999999999999999", 5).empty());
}

TEST(ClassMatcher, EmptyPromptsAndK) {
    const ClassMatcher m(emoji_classes());
    EXPECT_TRUE(m.rank("", 5).empty());
    EXPECT_TRUE(m.rank("   ", 5).empty());
    EXPECT_TRUE(m.rank("?!-", 5).empty());
    EXPECT_TRUE(m.rank("cat", 0).empty());
    EXPECT_TRUE(m.rank("qqqqzzzz", 5).empty());
    EXPECT_EQ(m.rank("face", 3).size(), 3u);
}

// ---- ranking rules on a small list --------------------------------------------------------

TEST(ClassMatcher, RankingRules) {
    std::vector<ClassInfo> list = {
        {"CATERPILLAR", "bug", {"bug"}, ""},     // 0: prefix only
        {"BLACK CAT", "black_cat", {}, ""},      // 1: the word, longer name
        {"Cat", "", {}, ""},                     // 2: exact name
        {"CAT FACE", "kitty", {"kitty"}, ""},    // 3: the word
        {"DOG", "", {}, ""},                     // 4: unrelated
        {"RED APPLE", "apple", {"apple"}, ""},   // 5
        {"GREEN APPLE", "green_apple", {}, ""},  // 6
        {"APPLE", "", {}, ""},                   // 7
    };
    const ClassMatcher m(list);
    // Exact full name first, then whole words (shorter names first), then prefixes; no DOG.
    EXPECT_EQ(ids(m.rank("CAT", 10)), (std::vector<int64_t>{2, 1, 3, 0}));
    EXPECT_EQ(ids(m.rank("cat", 2)), (std::vector<int64_t>{2, 1}));
    // An alias counts like a name: "kitty" finds CAT FACE only.
    EXPECT_EQ(ids(m.rank("Kitty", 10)), std::vector<int64_t>{3});
    // Every prompt word present beats some of them; an exact name beats an exact alias.
    const auto r = ids(m.rank("red apple", 10));
    ASSERT_GE(r.size(), 3u);
    EXPECT_EQ(r[0], 5);
    EXPECT_EQ(ids(m.rank("apple", 10)), (std::vector<int64_t>{7, 5, 6}));
    // Ties go to the lower class id, and the order is the same every time.
    std::vector<ClassInfo> twins = {{"B A", "", {}, ""}, {"A B", "", {}, ""}, {"A C", "", {}, ""}};
    const ClassMatcher t(twins);
    EXPECT_EQ(ids(t.rank("a", 10)), (std::vector<int64_t>{0, 1, 2}));
    EXPECT_EQ(t.rank("a", 10)[0].score, t.rank("a", 10)[1].score);
    EXPECT_EQ(ids(t.rank("b a", 10)), (std::vector<int64_t>{0, 1, 2}));
}

// ---- varscope-cli pack-emoji on a tiny generated dataset -----------------------------------

namespace {

using varscope::testing::CliRun;
using varscope::testing::solid;
using varscope::testing::write_png;

CliRun cli(const std::string& args) {
    return varscope::testing::run_cli(args);
}

}  // namespace

TEST(EmojiClasses, PackEmojiCommand) {
    varscope::testing::TempDir dir;
    const auto root = dir.path() / "emoji64";
    std::filesystem::create_directories(root / "google");
    std::filesystem::create_directories(root / "twitter");
    write_text((root / "emoji.json").string(), R"([
      {"name": "RED THING", "short_name": "red", "short_names": ["red", "rouge"], "category": "C1",
       "image": "a.png", "skin_variations": {"1F3FB": {"image": "a-1.png"}}},
      {"name": "CLEAR THING", "short_name": "clear", "short_names": ["clear"], "category": "C2",
       "image": "b.png"}
    ])");
    // Half-transparent red on white -> (255, 127, 127); opaque stays; transparent -> white.
    auto a = solid(64, 64, 255, 0, 0, 128);
    a[0] = 10, a[1] = 20, a[2] = 30, a[3] = 255;  // pixel (0, 0) opaque
    write_png((root / "google" / "a.png").string(), 64, 64, a);
    write_png((root / "google" / "a-1.png").string(), 64, 64, solid(64, 64, 0, 0, 255, 255));
    write_png((root / "google" / "b.png").string(), 64, 64, solid(64, 64, 9, 9, 9, 0));
    write_png((root / "twitter" / "a.png").string(), 64, 64, solid(64, 64, 0, 255, 0, 255));
    // twitter/a-1.png and twitter/b.png are missing.

    const std::string out = dir.file("packed.safetensors"), classes = dir.file("classes.json");
    const std::string args =
        "pack-emoji --dataset " + root.string() + " --out " + out + " --classes-out " + classes;
    auto r = cli(args);
    if (r.code == 2 && r.out.find("needs a build with OpenCV") != std::string::npos)
        GTEST_SKIP() << "varscope-cli was built without OpenCV";
    ASSERT_EQ(r.code, 0) << r.out;

    const auto t = varscope::load_safetensors(out);
    const at::Tensor images = t.at("images"), labels = t.at("labels"), styles = t.at("styles");
    ASSERT_EQ(images.sizes().vec(), (std::vector<int64_t>{4, 3, 64, 64}));
    EXPECT_EQ(images.scalar_type(), at::kByte);
    EXPECT_EQ(labels.scalar_type(), at::kLong);
    EXPECT_EQ(styles.scalar_type(), at::kByte);
    // class-major, then style, base image before skin tones
    EXPECT_EQ(std::vector<int64_t>(labels.data_ptr<int64_t>(), labels.data_ptr<int64_t>() + 4),
              (std::vector<int64_t>{0, 0, 0, 1}));
    EXPECT_EQ(std::vector<int>({styles[0].item<int>(), styles[1].item<int>(), styles[2].item<int>(),
                                styles[3].item<int>()}),
              (std::vector<int>{0, 0, 1, 0}));
    auto px = [&](int64_t n, int64_t y, int64_t x) {
        return std::vector<int>{images[n][0][y][x].item<int>(), images[n][1][y][x].item<int>(),
                                images[n][2][y][x].item<int>()};
    };
    EXPECT_EQ(px(0, 0, 0), (std::vector<int>{10, 20, 30}));
    EXPECT_EQ(px(0, 5, 7), (std::vector<int>{255, 127, 127}));
    EXPECT_EQ(px(1, 63, 63), (std::vector<int>{0, 0, 255}));
    EXPECT_EQ(px(2, 1, 1), (std::vector<int>{0, 255, 0}));
    EXPECT_EQ(px(3, 2, 2), (std::vector<int>{255, 255, 255}));
    const auto meta = varscope::read_safetensors_metadata(out);
    EXPECT_EQ(meta.at("dataset"), "emoji64");
    EXPECT_EQ(meta.at("classes"), "2");
    EXPECT_EQ(meta.at("missing"), "2");

    const auto list = varscope::load_class_list(classes);
    ASSERT_EQ(list.size(), 2u);
    EXPECT_EQ(list[0].name, "RED THING");
    EXPECT_EQ(list[0].short_name, "red");
    EXPECT_EQ(list[0].aliases, (std::vector<std::string>{"red", "rouge"}));
    EXPECT_EQ(list[1].category, "C2");

    // Existing outputs need --force.
    r = cli(args);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("--force"), std::string::npos) << r.out;
    EXPECT_EQ(cli(args + " --force").code, 0);

    // Wrong size and unreadable images are errors naming the file.
    write_png((root / "twitter" / "b.png").string(), 32, 32, solid(32, 32, 1, 2, 3, 255));
    r = cli(args + " --force");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("b.png"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("expected 64x64"), std::string::npos) << r.out;
    write_text((root / "twitter" / "b.png").string(), "not a png");
    r = cli(args + " --force");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("b.png"), std::string::npos) << r.out;
}
