// Inputs that once broke a reader (tests/fixtures/fuzz/<harness>/, README.md there says what
// each found), replayed through their harness's own check (fuzz/reader_contracts.h) in the normal
// suite: builds without clang or sanitizers keep the findings fixed too. The fuzz step of
// packaging/run-tests.sh replays the same files under ASan + UBSan + LeakSanitizer.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "core/io/checkpoint.h"
#include "core/io/json_read.h"
#include "core/text/sentencepiece_tokenizer.h"
#include "fuzz/reader_contracts.h"
#include "fuzz/t5_contract.h"
#include "tests/error_of.h"
#include "tests/test_util.h"

namespace varscope {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

fs::path regressions() {
    return fs::path(testing::source_dir()) / "tests/fixtures/fuzz";
}

std::string fixture(const std::string& harness, const std::string& name) {
    return (regressions() / harness / name).string();
}

TEST(FuzzRegressions, EveryInputKeepsItsReadersContract) {
    int inputs = 0;
    for (const auto& dir : fs::directory_iterator(regressions())) {
        if (!dir.is_directory()) continue;  // README.md
        const std::string harness = dir.path().filename().string();
        // Not a reader harness (it needs all of core): JsonFields.TheFuzzFindingsAre... name them.
        if (harness == "fuzz_config_json") continue;
        const auto& known = fuzz::reader_harnesses();
        const bool t5 = harness == "fuzz_t5";  // its own check (fuzz/t5_contract.h)
        ASSERT_TRUE(t5 || std::find(known.begin(), known.end(), harness) != known.end())
            << dir.path() << " does not name a reader harness";
        for (const auto& input : fs::directory_iterator(dir.path())) {
            ++inputs;
            try {
                if (t5) {
                    testing::TempDir folder;
                    std::ifstream in(input.path(), std::ios::binary);
                    fuzz::check_t5({std::istreambuf_iterator<char>(in), {}},
                                   folder.path().string());
                    continue;
                }
                fuzz::check_reader(harness, input.path().string());
            } catch (const std::exception& e) {
                ADD_FAILURE() << input.path() << ": " << e.what();
            }
        }
    }
    EXPECT_GE(inputs, 3);  // the inputs committed with this test
}

TEST(FuzzRegressions, ChecksRefuseWhatIsNotAReaderHarness) {
    EXPECT_NE(error_of<std::invalid_argument>([] {
                  fuzz::check_reader("fuzz_nothing", fixture("fuzz_json", "x"));
              }).find("not a reader harness: 'fuzz_nothing'"),
              std::string::npos);
}

// fuzz_pth, 2026-11-28: a zip that miniz reads but whose layout LibTorch's PyTorchStreamReader
// refuses (a record outside a folder; no version record) leaked the zip reader's state. The leak is
// LibTorch's (fuzz/lsan.supp); the file must still be a CheckpointError naming it.
TEST(FuzzRegressions, ZipsLibTorchRefusesAreCheckpointErrors) {
    for (const char* name :
         {"libtorch-leak-record-outside-a-folder.pth", "libtorch-leak-no-version-record.pth"}) {
        const std::string path = fixture("fuzz_pth", name);
        const std::string error = error_of<CheckpointError>([&] { load_pth(path); });
        EXPECT_NE(error.find(path), std::string::npos) << error;
        EXPECT_NE(error.find("torch.save zip archive"), std::string::npos) << error;
    }
}

// By hand (a newcomer's test of b013f1e), not by fuzzing: `--accel '{"fastvar":[[[…'` nested
// 100k deep overflowed the stack in the JSON library; 32,000 levels (within fuzz.sh's -max_len)
// overflow it under ASan. parse_json refuses it by depth.
TEST(FuzzRegressions, DeepJsonIsRefusedByDepth) {
    const std::string path = fixture("fuzz_json", "accel-nested-32000-deep.json");
    EXPECT_NE(error_of<JsonReadError>([&] {
                  read_json_file(path, "--accel");
              }).find("--accel: JSON nested deeper than 64"),
              std::string::npos);
}

// fuzz_t5, 2026-11-29 (session 30, a 30-minute run on the development machine): a SentencePiece
// model with an empty piece made darts-clone's trie builder throw its own exception past the
// library's Status ("failed to insert key: zero-length key"); the tokenizer now turns every
// exception of the load into a TokenizerError naming the file.
TEST(FuzzRegressions, ASentencePieceModelWithAnEmptyPieceIsATokenizerError) {
    std::ifstream in(fixture("fuzz_t5", "spiece-empty-piece.bin"), std::ios::binary);
    const std::string input{std::istreambuf_iterator<char>(in), {}};
    ASSERT_FALSE(input.empty());
    ASSERT_EQ(static_cast<unsigned char>(input[0]) % 3, 0);  // the spiece.model role
    const std::string error = error_of<TokenizerError>(
        [&] { (void)SentencePieceTokenizer::from_bytes(input.substr(1), "spiece.model"); });
    EXPECT_NE(error.find("spiece.model: not a valid SentencePiece model"), std::string::npos)
        << error;
    EXPECT_NE(error.find("zero-length key"), std::string::npos) << error;
}

}  // namespace
}  // namespace varscope
