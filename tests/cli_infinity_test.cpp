// The CLI on an Infinity model (the tiny official-code fixture, CPU): text features or prompts
// as the condition, the family's own flags, and the errors a user meets first.
#include <gtest/gtest.h>

#include <string>

#include "core/io/checkpoint.h"
#include "tests/cli_run.h"
#include "tests/test_util.h"

namespace {

using varscope::testing::run_cli;

const std::string kFixtures = std::string(VARSCOPE_SOURCE_DIR) + "/tests/fixtures/";
const std::string kModel = "--infinity " + kFixtures + "infinity_tiny/infinity_tiny.pth ";
const std::string kText = "--text-features " + kFixtures + "infinity_tiny/teacher.safetensors ";

TEST(CliInfinity, GeneratesFromTextFeatures) {
    varscope::testing::TempDir dir;
    const auto out = dir.file("bits.safetensors");
    const auto r =
        run_cli("generate " + kModel + kText + "--pixels 0.06M --seed 3 -q --tokens-out " + out);
    ASSERT_EQ(r.code, 0) << r.out;
    const auto t = varscope::load_checkpoint(out);
    EXPECT_FALSE(t.empty());
    // The same seed draws the same bits.
    const auto again_path = dir.file("again.safetensors");
    ASSERT_EQ(run_cli("generate " + kModel + kText + "--pixels 0.06M --seed 3 -q --tokens-out " +
                      again_path)
                  .code,
              0);
    const auto again = varscope::load_checkpoint(again_path);
    ASSERT_EQ(again.size(), t.size());
    for (const auto& [name, v] : t) EXPECT_TRUE(v.equal(again.at(name))) << name;
}

TEST(CliInfinity, FlagsAndTextsAreChecked) {
    // A prompt needs the T5 encoder.
    auto r = run_cli("generate " + kModel + "--prompt 'a red fox' --tokens-out /tmp/x.st");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("prompts need the T5 text encoder"), std::string::npos) << r.out;
    // A T5 folder without spiece.model: named.
    r = run_cli("generate " + kModel + "--t5 " + kFixtures +
                "t5_tiny/model --prompt 'a red fox' --tokens-out /tmp/x.st");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("spiece.model"), std::string::npos) << r.out;
    // Class ids are for class-conditional models; Infinity's flags are Infinity's.
    r = run_cli("generate " + kModel + kText + "--class 3 --tokens-out /tmp/x.st");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("--class is a VAR/MAR setting"), std::string::npos) << r.out;
    r = run_cli("generate --random 2 --patch-nums 1,2 --tau 0.7 --tokens-out /tmp/x.st");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("--tau is an Infinity setting"), std::string::npos) << r.out;
    // No text at all.
    r = run_cli("generate " + kModel + "--tokens-out /tmp/x.st");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("Infinity needs a text"), std::string::npos) << r.out;
}

}  // namespace
