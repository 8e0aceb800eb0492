// The CLI on an Infinity model (the tiny official-code fixture, CPU): text features or prompts
// as the condition, the family's own flags, and the errors a user meets first.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
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
    // The same seed draws the same bits; so does the low-memory mode's block streaming, with a
    // fixed count and with auto (streaming only where a run would not fit the device: here the
    // host, so nothing moves).
    for (const std::string extra : {"", "--stream-blocks 1 ", "--stream-blocks auto "}) {
        SCOPED_TRACE(extra);
        const auto path = dir.file("again.safetensors");
        const auto again = run_cli("generate " + kModel + kText + "--pixels 0.06M --seed 3 -q " +
                                   extra + "--force --tokens-out " + path);
        ASSERT_EQ(again.code, 0) << again.out;
        const auto bits = varscope::load_checkpoint(path);
        ASSERT_EQ(bits.size(), t.size());
        for (const auto& [name, v] : t) EXPECT_TRUE(v.equal(bits.at(name))) << name;
    }
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
    // Block streaming is Infinity's, and counts no more blocks than the model has.
    r = run_cli("generate --random 2 --patch-nums 1,2 --stream-blocks 1 --tokens-out /tmp/x.st");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("--stream-blocks is an Infinity setting"), std::string::npos) << r.out;
    r = run_cli("generate " + kModel + kText + "--stream-blocks 99 --tokens-out /tmp/x.st");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("is not a block count"), std::string::npos) << r.out;
    for (const std::string bad : {"many", "-1", "2048", "1.5"}) {
        r = run_cli("generate " + kModel + kText + "--stream-blocks " + bad +
                    " --tokens-out /tmp/x.st");
        EXPECT_EQ(r.code, 2) << bad << ": " << r.out;
        EXPECT_NE(r.out.find("--stream-blocks"), std::string::npos) << bad << ": " << r.out;
    }
    // No text at all.
    r = run_cli("generate " + kModel + "--tokens-out /tmp/x.st");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("Infinity needs a text"), std::string::npos) << r.out;
}

// bench e2e's cost model on Infinity (core/sampling/step_cost.h): per method a step entry per
// step run with FLOPs per part, the attention over the text among them, the table with its
// column, and each method's work ceiling. On the CPU the parts are timed by the host clock in one
// extra run; no launches.
TEST(CliInfinity, BenchE2eReportsTheCostModel) {
    varscope::testing::TempDir dir;
    const auto json = dir.file("e2e.json");
    const auto r = run_cli("bench e2e " + kModel + kText +
                           "--pixels 0.06M --repeat 1 --warmup 0 --methods "
                           "'baseline;infinity-fastvar;infinity-sparvar' --json " +
                           json);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("baseline: per-step cost"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("xattn"), std::string::npos) << r.out;
    std::ifstream f(json);
    const auto j = nlohmann::json::parse(f);
    EXPECT_EQ(j["family"], "infinity");
    ASSERT_EQ(j["methods"].size(), 3u);
    for (const auto& m : j["methods"]) {
        SCOPED_TRACE(m["name"].get<std::string>());
        ASSERT_TRUE(m.contains("cost_model")) << m.dump();
        const auto& cm = m["cost_model"];
        const auto& steps = cm["steps"];
        // The steps cover the scales run, in order (FastVAR's preset skips the last two).
        int64_t next = 0;
        for (const auto& st : steps) {
            EXPECT_EQ(st["scale"].get<int64_t>(), next);
            next += st["scales"].get<int64_t>();
            EXPECT_EQ(st["launches"].get<int64_t>(), -1);
            ASSERT_TRUE(st.contains("part_ms")) << st.dump();
            EXPECT_GT(st["part_ms"]["projection"].get<double>(), 0.0);
            EXPECT_GE(st["outside_ms"].get<double>(), 0.0);
            for (const char* part :
                 {"input", "projection", "attention", "cross_attention", "ffn", "overhead", "head"})
                EXPECT_TRUE(st["flops"].contains(part)) << part;
            EXPECT_GT(st["flops"]["cross_attention"].get<double>(), 0.0);
        }
        const int64_t run = m["name"] == "infinity-fastvar" ? 5 : 7;
        EXPECT_EQ(next, run);
        EXPECT_GT(cm["flops"]["cross_attention"].get<double>(), 0.0);
        EXPECT_DOUBLE_EQ(cm["flops"]["attention"].get<double>(),
                         m["attention_flops"].get<double>());
        EXPECT_TRUE(cm.contains("part_ms"));
        // The work ceiling over the dense run (work_ceiling.h): the dense run is its own; FastVAR
        // runs two scales fewer.
        ASSERT_TRUE(m.contains("work_ceiling")) << m.dump();
        const double ceiling = m["work_ceiling"]["speedup"].get<double>();
        if (m["name"] == "baseline") {
            EXPECT_NEAR(ceiling, 1.0, 1e-9);
        } else if (m["name"] == "infinity-fastvar") {
            EXPECT_GT(ceiling, 1.0);
        }
        EXPECT_GT(ceiling, 0.0);
    }
    EXPECT_NE(r.out.find("ceiling"), std::string::npos) << r.out;
}

}  // namespace
