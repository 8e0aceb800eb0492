// The CLI under bad input and unsafe paths (issue #36, "Found by a newcomer test of b013f1e"):
// outputs that name an input, FIFOs and hostile JSON given as configs, misleading values.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "core/io/checkpoint.h"
#include "core/pipeline.h"  // cuda_available
#include "tests/cli_run.h"
#include "tests/test_util.h"

namespace {

using varscope::testing::CliRun;
using varscope::testing::TempDir;
namespace fs = std::filesystem;

constexpr int kTimeout = 120;  // seconds; a blocked run is killed and the test fails
const std::string kVar = "--random 2 --patch-nums 1,2 ";  // a random two-scale VAR

CliRun cli(const std::string& args) {
    return varscope::testing::run_cli(args, "", kTimeout);
}

std::string read(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
}

// `r` failed as bad input (exit 2) with `expected` in its message.
void expect_refused(const CliRun& r, const std::string& expected, const std::string& what) {
    EXPECT_EQ(r.code, 2) << what << "\n" << r.out;
    EXPECT_NE(r.out.find(expected), std::string::npos) << what << "\n" << r.out;
}

// --force overwrote the --accel config, a checkpoint or the input of teacher-forward when an
// output named it (exit 0). Now refused, whatever the path's spelling.
TEST(CliInput, NoOutputIsAnInputOfTheRun) {
    TempDir dir;
    const std::string cfg = dir.file("cfg.json");
    write(cfg, "{}");
    fs::create_directory(dir.path() / "sub");
    fs::create_symlink(cfg, dir.path() / "link.json");
    fs::create_hard_link(cfg, dir.path() / "hard.json");
    const std::string gen = "generate " + kVar + "--force --accel " + cfg + " ";
    expect_refused(cli(gen + "--timings-json " + cfg),
                   "--timings-json: '" + cfg + "' is also an input of this run (--accel)", "same");
    expect_refused(cli(gen + "--tokens-out " + dir.file("sub/../cfg.json")), "is also an input",
                   "dot-dot");
    expect_refused(cli(gen + "--tokens-out " + dir.file("link.json")), "is also an input",
                   "symlink");
    expect_refused(cli(gen + "--timings-json " + dir.file("hard.json")), "is also an input",
                   "hard link");
    EXPECT_EQ(read(cfg), "{}");

    // compare writes metrics.json into --out.
    const std::string metrics = dir.file("metrics.json");
    write(metrics, "{}");
    expect_refused(
        cli("compare " + kVar + "--force --accel " + metrics + " -o " + dir.path().string()),
        "--out: '" + metrics + "' is also an input of this run (--accel)", "compare");
    EXPECT_EQ(read(metrics), "{}");

    // generate-mar: the --random config.
    expect_refused(cli("generate-mar --random " + cfg + " --force --tokens-out " + cfg),
                   "is also an input of this run (--random)", "generate-mar");

    // teacher-forward's --output is its --input (it always overwrote its output).
    const std::string in = dir.file("in.safetensors");
    varscope::save_safetensors({{"labels", at::zeros({1}, at::kLong)}}, in);
    const std::string before = read(in);
    expect_refused(cli("teacher-forward " + kVar + "--input " + in + " --output " + in),
                   "--output: '" + in + "' is also an input of this run (--input)",
                   "teacher-forward");
    EXPECT_EQ(read(in), before);

    // train: the files of its run folder (--init run/final.safetensors).
    const std::string run = dir.file("run");
    fs::create_directory(run);
    write(run + "/final.safetensors", "x");
    expect_refused(cli("train var --data " + in + " --vae " + in + " --init " + run +
                       "/final.safetensors --out " + run),
                   "is also an input of this run (--init)", "train");
    EXPECT_EQ(read(run + "/final.safetensors"), "x");
}

// Opening a FIFO for reading waits for a writer: `--accel fifo` blocked forever.
TEST(CliInput, ConfigReadersRefuseAFifo) {
    TempDir dir;
    const std::string fifo = dir.file("config.json");
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    write(dir.file("data"), "x");
    for (const std::string& args :
         {"generate " + kVar + "--tokens-out " + dir.file("t.st") + " --accel " + fifo,
          "compare " + kVar + "--accel " + fifo,
          "generate-mar --random " + fifo + " --tokens-out " + dir.file("t.st"),
          "train vqvae --config " + fifo + " --data " + dir.file("data") + " --out " +
              dir.file("run")}) {
        expect_refused(cli(args), "is not a regular file", args);
    }
}

// ~100k levels inside an accelerator object overflowed the stack (a segfault), and a key given
// twice took the last value without a word.
TEST(CliInput, DeepOrDuplicatedJsonIsRefused) {
    TempDir dir;
    const std::string deep = dir.file("deep.json");
    write(deep, R"({"fastvar":)" + std::string(100000, '[') + std::string(100000, ']') + "}");
    const std::string dup = dir.file("dup.json");
    write(dup, R"({"skip": {"enabled": true, "last_n": 1, "last_n": 0}})");
    for (const std::string& cmd :
         {"generate " + kVar + "--tokens-out " + dir.file("t.st"), "compare " + kVar,
          std::string("compare-mar --random mar_base")}) {
        expect_refused(cli(cmd + " --accel " + deep), "JSON nested deeper than 64 levels", cmd);
    }
    expect_refused(cli("generate " + kVar + "--tokens-out " + dir.file("t.st") + " --accel " + dup),
                   "key 'last_n' appears twice in one object", "duplicate");
    expect_refused(cli("generate " + kVar + "--tokens-out " + dir.file("t.st") +
                       R"( --accel '{"skip": {}, "skip": {}}')"),
                   "key 'skip' appears twice", "inline duplicate");
}

// Training configs refused unknown keys inside their sections only: a misspelt top-level key
// ("cond_dorp") trained with the default.
TEST(CliInput, TrainingConfigTopLevelUnknownKeyIsRefused) {
    TempDir dir;
    write(dir.file("data"), "x");
    const std::string cfg = dir.file("c.json");
    write(cfg, R"({"comment": "ok", "restart_everyy": 3})");
    expect_refused(cli("train vqvae --config " + cfg + " --data " + dir.file("data") + " --out " +
                       dir.file("run")),
                   "config '" + cfg + "': unknown field 'restart_everyy'", "vqvae");
    write(cfg, R"({"cond_dorp": 0.1})");
    expect_refused(cli("train var --config " + cfg + " --data " + dir.file("data") + " --vae " +
                       dir.file("data") + " --out " + dir.file("run")),
                   "unknown field 'cond_dorp'", "var");
}

TEST(CliInput, MisleadingValuesAreErrors) {
    TempDir dir;
    const std::string out = " --tokens-out " + dir.file("t.st");
    // An empty prompt picked a random class.
    expect_refused(cli("generate " + kVar + "--prompt ''" + out), "--prompt: is empty", "prompt");
    expect_refused(cli("generate-mar --prompt ' '" + out), "--prompt: is empty", "mar prompt");
    // --top-k -1 named 1.79769e+308 as the bound.
    auto k = cli("generate " + kVar + "--top-k -1" + out);
    expect_refused(k, "--top-k: must be a whole number >= 0, got -1", "top-k");
    EXPECT_EQ(k.out.find("e+308"), std::string::npos) << k.out;
    // --patch-nums "" was read as [0].
    expect_refused(cli("generate --random 2 --patch-nums ''" + out),
                   "--patch-nums: must be a whole number >= 1", "patch-nums");
    // train on a machine without CUDA (the default device) said "CUDA driver version is
    // insufficient".
    if (!varscope::cuda_available()) {
        write(dir.file("data"), "x");
        expect_refused(cli("train vqvae --data " + dir.file("data") + " --out " + dir.file("run")),
                       "no CUDA device is available (train on the CPU with --device cpu)", "train");
    }
}

}  // namespace

namespace {

// A full disk while generate writes (`ulimit -f 0`: no file may grow, EFBIG; SIGXFSZ ignored,
// as a full disk sends none): exit 3, the error names the file and the reason, the previous
// file is whole, no temporary file is left. Each output kind alone: the image, --tokens-out,
// --timings-json.
TEST(CliInput, FullDiskKeepsThePreviousOutputs) {
    TempDir dir;
    const std::string image = dir.file("x.ppm"), tokens = dir.file("t.safetensors"),
                      timings = dir.file("t.json");
    for (const auto& [flag, path] : {std::pair<std::string, std::string>{"-o ", image},
                                     {"--tokens-out ", tokens},
                                     {"--timings-json ", timings}}) {
        write(path, "previous");
        const CliRun r = varscope::testing::run_cli_after(
            "trap '' XFSZ; ulimit -f 0",
            "generate " + kVar + "--class 1 --seed 3 -q --force " + flag + path);
        EXPECT_EQ(r.code, 3) << flag << r.out;
        EXPECT_NE(r.out.find("cannot write '" + path + "' (write): File too large"),
                  std::string::npos)
            << flag << r.out;
        EXPECT_EQ(read(path), "previous") << flag;
        for (const auto& e : fs::directory_iterator(dir.path()))
            EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos)
                << flag << ": " << e.path();
    }
}

// The host running out of memory is an error the user can act on (exit 3, a batch to try), not
// an abort: with libsentencepiece loaded after LibTorch's libc10 the CPU allocator's failure
// killed the process (exit 134, "F ... Logging.cpp"), see core/CMakeLists.txt. The address
// space is capped so that one of the run's tensors cannot be allocated. Under AddressSanitizer
// (packaging/sanitize.sh) a capped address space stops the process before main (ASan reserves
// its shadow memory up front), so there ASan's own allocator refuses the large tensor instead
// and returns null to LibTorch, as glibc does at the cap.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

TEST(CliInput, HostOutOfMemoryIsExitThreeNotAnAbort) {
    TempDir dir;
    const std::string tokens = dir.file("t.safetensors");
    const std::string cap =
        kAddressSanitizer ? "export ASAN_OPTIONS=\"${ASAN_OPTIONS:-}:allocator_may_return_null=1:"
                            "max_allocation_size_mb=4000\""
                          : "ulimit -v 4000000";
    const CliRun r =
        varscope::testing::run_cli_after(cap,
                                         "generate --random 2 --patch-nums 1,2,4,8,16 --device cpu "
                                         "--batch 4096 --no-memory-check --tokens-out " +
                                             tokens);
    EXPECT_EQ(r.code, 3) << r.out;
    EXPECT_NE(r.out.find("out of cpu memory with 4096 images"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("Logging.cpp"), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(tokens));
}

}  // namespace
