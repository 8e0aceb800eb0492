// `varscope-cli generate` without a checkpoint runs the embedded emoji text-to-image model (issue
// #33) when it is shipped: free text through its T5, at its own size (64x64, no --pixels), the same
// image for the same seed; --class or --family var pick the class-conditional VAR. Skips when the
// model's files are not in resources/models.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "core/resources.h"
#include "tests/cli_run.h"
#include "tests/test_util.h"

namespace {

using varscope::testing::run_cli;

std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool contains(const std::string& s, const std::string& part) {
    return s.find(part) != std::string::npos;
}

class CliT2i : public ::testing::Test {
  protected:
    void SetUp() override {
        if (!varscope::embedded_t2i_available())
            GTEST_SKIP() << "the embedded text-to-image model is not in "
                         << varscope::resource_dir() << "/models";
    }
};

TEST_F(CliT2i, NoCheckpointRunsTheTextToImageModelDeterministically) {
    varscope::testing::TempDir dir;
    const std::string prompt = "--prompt \"thumbs up, dark skin tone, twemoji style\" ";
    const auto a = run_cli("generate " + prompt + "--seed 5 --batch 1 --device cpu -q -o " +
                           dir.file("a.ppm"));
    ASSERT_EQ(a.code, 0) << a.out;
    EXPECT_TRUE(contains(a.out, "using the embedded emoji text-to-image model (" +
                                    varscope::embedded_t2i_files().model_path))
        << a.out;
    EXPECT_FALSE(contains(a.out, "prompt '")) << a.out;  // no class matching
    const auto b = run_cli("generate " + prompt + "--seed 5 --batch 1 --device cpu -q -o " +
                           dir.file("b.ppm"));
    ASSERT_EQ(b.code, 0) << b.out;
    const std::string img = read_bytes(dir.file("a.ppm"));
    ASSERT_EQ(img.rfind("P6\n64 64\n255\n", 0), 0u) << img.substr(0, 16);
    EXPECT_EQ(img.size(), 13u + 64 * 64 * 3);
    EXPECT_EQ(img, read_bytes(dir.file("b.ppm")));
    // Another text draws another image.
    const auto c = run_cli("generate --prompt \"red apple\" --seed 5 -q -o " + dir.file("c.ppm"));
    ASSERT_EQ(c.code, 0) << c.out;
    EXPECT_NE(read_bytes(dir.file("c.ppm")), img);
}

TEST_F(CliT2i, ClassRequestsPickTheVarAndTextIsRequired) {
    varscope::testing::TempDir dir;
    // --class asks for a class-conditional model: the embedded VAR, not an error.
    if (varscope::embedded_model_available()) {
        const auto v = run_cli("generate --class 1891 --seed 1 -q -o " + dir.file("v.ppm"));
        ASSERT_EQ(v.code, 0) << v.out;
        EXPECT_TRUE(contains(v.out, "using the embedded emoji VAR")) << v.out;
    }
    // No text: said, with the way to the class-conditional model.
    const auto none = run_cli("generate -o " + dir.file("n.ppm"));
    EXPECT_EQ(none.code, 2) << none.out;
    EXPECT_TRUE(contains(none.out, "Infinity needs a text")) << none.out;
    EXPECT_TRUE(contains(none.out, "--family var")) << none.out;
    // --class on the text-to-image model named explicitly: refused, naming the families.
    const auto cls =
        run_cli("generate --family t2i --class 3 --prompt cat -o " + dir.file("x.ppm"));
    EXPECT_EQ(cls.code, 2) << cls.out;
    EXPECT_TRUE(contains(cls.out, "--class is a VAR/MAR setting; the model is Infinity"))
        << cls.out;
    // compare without a checkpoint: the same default (baseline vs skip on the last scale).
    const auto cmp = run_cli(
        "compare --prompt \"red apple\" --accel '{\"skip\": {\"enabled\": "
        "true, \"last_n\": 1}}' --seed 2 -o " +
        dir.file("cmp"));
    ASSERT_EQ(cmp.code, 0) << cmp.out;
    EXPECT_TRUE(contains(cmp.out, "embedded emoji text-to-image model")) << cmp.out;
}

}  // namespace

// `shard` splits the shipped transformer under an index; the index then draws the same image as
// the file, given by path and as the embedded model of a resources folder that holds only shards.
TEST_F(CliT2i, ShardedTransformerDrawsTheSameImage) {
    namespace fs = std::filesystem;
    varscope::testing::TempDir dir;
    const auto files = varscope::embedded_t2i_files();
    const fs::path models = fs::path(dir.file("res")) / "models";
    fs::create_directories(models);
    const std::string out = (models / "emoji-t2i-infinity.safetensors").string();
    const auto s = run_cli("shard " + files.model_path + " -o " + out + " --max-mib 4");
    ASSERT_EQ(s.code, 0) << s.out;
    const std::string index = out + ".index.json";
    EXPECT_TRUE(contains(s.out, "wrote " + index)) << s.out;
    int shards = 0;
    for (const auto& e : fs::directory_iterator(models)) {
        if (e.path().extension() != ".safetensors") continue;
        ++shards;
        EXPECT_LE(fs::file_size(e.path()), 4u << 20) << e.path();
    }
    EXPECT_GE(shards, 4);  // 15 MB in 4 MiB files
    // Refuses to overwrite without --force.
    const auto again = run_cli("shard " + files.model_path + " -o " + out + " --max-mib 4");
    EXPECT_EQ(again.code, 2) << again.out;

    const std::string args = "--prompt \"red heart\" --seed 3 --batch 1 --device cpu -q ";
    const std::string given = "--vae " + files.vae_path + " --t5 " + files.text_encoder_path + " ";
    const auto a = run_cli("generate --infinity " + files.model_path + " " + given + args + "-o " +
                           dir.file("a.ppm"));
    ASSERT_EQ(a.code, 0) << a.out;
    const auto b =
        run_cli("generate --infinity " + index + " " + given + args + "-o " + dir.file("b.ppm"));
    ASSERT_EQ(b.code, 0) << b.out;
    EXPECT_EQ(read_bytes(dir.file("a.ppm")), read_bytes(dir.file("b.ppm")));

    // The embedded lookup opens the index where the single file is absent.
    fs::copy_file(files.vae_path, models / "emoji-t2i-bsq-vae.safetensors");
    fs::copy(files.text_encoder_path, models / "emoji-t2i-t5", fs::copy_options::recursive);
    const auto e = run_cli("generate " + args + "-o " + dir.file("e.ppm"),
                           "VARSCOPE_RESOURCES=" + dir.file("res"));
    ASSERT_EQ(e.code, 0) << e.out;
    EXPECT_TRUE(contains(e.out, index)) << e.out;
    EXPECT_EQ(read_bytes(dir.file("a.ppm")), read_bytes(dir.file("e.ppm")));
}
