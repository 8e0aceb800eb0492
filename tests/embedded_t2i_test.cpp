// The embedded emoji text-to-image model (issue #33): found with its T5 folder, opened through
// open_runner as the embedded Infinity, sampling at its own size (64x64) from a free-text prompt,
// the same image for the same seed. Skips when the files are not in resources/models.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "core/io/state_dict.h"
#include "core/models/infinity_image_size.h"
#include "core/resources.h"
#include "core/runner/runner.h"
#include "tests/error_of.h"
#include "tests/test_util.h"

using namespace varscope;

namespace {
// Restores the resource folder override a test changed.
struct ResourceOverride {
    explicit ResourceOverride(const std::string& dir) { set_resource_dir_override(dir); }
    ~ResourceOverride() { set_resource_dir_override(""); }
};
}  // namespace

TEST(EmbeddedT2i, MissingFilesAreNamed) {
    varscope::testing::TempDir empty;
    std::filesystem::create_directories(empty.path() / "models" / "emoji-t2i-t5");
    ResourceOverride o(empty.path().string());
    EXPECT_FALSE(embedded_t2i_available());
    const auto msg = varscope::testing::error_of<CheckpointError>([] { embedded_t2i_files(); });
    EXPECT_NE(msg.find("emoji-t2i-infinity.safetensors"), std::string::npos) << msg;
    ModelSpec spec;
    spec.embedded = Family::Infinity;
    EXPECT_NE(varscope::testing::error_of<CheckpointError>([&] {
                  open_runner(spec, {});
              }).find("embedded emoji text-to-image model is missing"),
              std::string::npos);
}

TEST(EmbeddedT2i, APromptGivesTheSame64x64ImageForTheSameSeed) {
    if (!embedded_t2i_available())
        GTEST_SKIP() << "no embedded text-to-image model in " << resource_dir() << "/models";
    const T2iModelFiles files = embedded_t2i_files();
    EXPECT_TRUE(std::filesystem::is_directory(files.text_encoder_path));
    const auto size = read_infinity_image_size(files.model_path, files.vae_path);
    EXPECT_EQ(size.pixels, "0.06M");
    EXPECT_NE(size.source, "official");

    ModelSpec spec;
    spec.embedded = Family::Infinity;
    const auto runner = open_runner(spec, {});
    ASSERT_EQ(runner->family(), Family::Infinity);
    EXPECT_EQ(runner->model_path(), files.model_path);
    EXPECT_EQ(runner->shape().image_size, 64);
    EXPECT_EQ(runner->shape().step_sides.back(), 16);

    SampleSettings s = runner->defaults();
    EXPECT_EQ(s.pixels, "0.06M");  // nobody types --pixels
    EXPECT_EQ(runner->steps(s), 7);
    s.prompts = {"thumbs up, dark skin tone, twemoji style"};
    s.seed = 7;
    const RunResult a = runner->generate(s), b = runner->generate(s);
    ASSERT_EQ(a.images.sizes(), (at::IntArrayRef{1, 3, 64, 64}));
    EXPECT_TRUE(a.images.equal(b.images));
    EXPECT_GT(a.images.std().item<float>(), 0.01f);  // not a flat image
    s.prompts = {"red apple"};
    EXPECT_FALSE(runner->generate(s).images.equal(a.images));  // the text matters
}

// The shipped T5 folder lists its words (prompt_vocabulary.json): a word it never saw is left
// out with a notice naming it, the image is the one of the filtered prompt, and
// keep_unknown_words hands the prompt on as typed.
TEST(EmbeddedT2i, UnknownWordsAreLeftOutWithANotice) {
    if (!embedded_t2i_available())
        GTEST_SKIP() << "no embedded text-to-image model in " << resource_dir() << "/models";
    const auto vocabulary_file =
        std::filesystem::path(embedded_t2i_files().text_encoder_path) / "prompt_vocabulary.json";
    ASSERT_TRUE(std::filesystem::exists(vocabulary_file)) << vocabulary_file;
    ModelSpec spec;
    spec.embedded = Family::Infinity;
    const auto runner = open_runner(spec, {});
    SampleSettings s = runner->defaults();
    s.seed = 3;
    s.prompts = {"red apple"};
    const RunResult known = runner->generate(s);
    EXPECT_TRUE(known.notices.empty());
    s.prompts = {"a zorblat picture of red apple"};
    const RunResult filtered = runner->generate(s);
    ASSERT_EQ(filtered.notices.size(), 1u);
    EXPECT_NE(filtered.notices[0].find("(zorblat)"), std::string::npos) << filtered.notices[0];
    s.prompts = {"a picture of red apple"};  // the same text after the filter
    EXPECT_TRUE(runner->generate(s).images.equal(filtered.images));
    s.prompts = {"a zorblat picture of red apple"};
    s.keep_unknown_words = true;
    const RunResult kept = runner->generate(s);
    EXPECT_TRUE(kept.notices.empty());
    EXPECT_FALSE(kept.images.equal(filtered.images));
    s.prompts = {"zorblat quux"};
    s.keep_unknown_words = false;
    const RunResult none = runner->generate(s);
    ASSERT_EQ(none.notices.size(), 1u);
    EXPECT_NE(none.notices[0].find("no word"), std::string::npos) << none.notices[0];
}
