// A GPU that runs out of memory mid-generation, as a user meets it (issue #36): `generate` with
// the caching allocator capped (--device-memory-fraction) and the memory pre-check off, so the
// run starts and fails inside the sampler. It must exit 3 naming a batch to try, and write no
// output (outputs are written after the runs, each atomically). Skips without CUDA.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/pipeline.h"
#include "tests/cli_run.h"
#include "tests/test_util.h"

namespace {

TEST(CliGpuOutOfMemory, GenerateExitsThreeNamesABatchAndWritesNothing) {
    if (!varscope::cuda_available()) GTEST_SKIP() << "no CUDA device";
    varscope::testing::TempDir dir;
    // .ppm: builds without OpenCV (the GPU machine's) write no .png.
    const std::string image = dir.file("out.ppm"), tokens = dir.file("tokens.safetensors"),
                      timings = dir.file("timings.json");
    // VAR-d16 (random weights, fp32: 1.2 GB) fits 4 % of an 80-141 GB device; 64 images at 256²
    // (about 11 GB of KV cache alone) do not.
    const auto r = varscope::testing::run_cli(
        "generate --random 16 --device cuda --class 1 --batch 64 --device-memory-fraction 0.04 "
        "--no-memory-check -o " +
            image + " --tokens-out " + tokens + " --timings-json " + timings,
        "", 600);
    EXPECT_EQ(r.code, 3) << r.out;
    EXPECT_NE(r.out.find("out of cuda"), std::string::npos) << r.out;
    EXPECT_TRUE(r.out.find("try --batch ") != std::string::npos ||
                r.out.find("not even one image fits") != std::string::npos)
        << r.out;
    for (const auto& f : {image, tokens, timings})
        EXPECT_FALSE(std::filesystem::exists(f)) << f << " was written by a failed run";
    // Nothing half-written beside them either (a temporary of an atomic write).
    for (const auto& e : std::filesystem::directory_iterator(dir.path()))
        ADD_FAILURE() << "left behind: " << e.path();
}

}  // namespace
