// The memory estimate before a run: the check's arithmetic and message, the runners' estimates
// growing with what they should grow with, and the CLI refusing a batch that cannot fit.
#include "core/runner/memory_estimate.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "core/runner/runner.h"
#include "core/sampling/chunked_decode.h"
#include "tests/cli_run.h"
#include "tests/error_of.h"
#include "tests/tiny_mar.h"
#include "tests/tiny_models.h"

namespace varscope {
namespace {

using testing::error_of;
using testing::small_pipeline;
using testing::tiny_cpu_mar_config;
using testing::tiny_pipeline;
using testing::tiny_var_config;

TEST(MemoryEstimate, MaxImagesAndBytes) {
    MemoryEstimate e;
    e.images = 3;
    e.per_image = 100;
    e.fixed = 50;
    EXPECT_EQ(e.bytes(), 350);
    EXPECT_EQ(e.max_images(1050), 10);
    EXPECT_EQ(e.max_images(149), 0);
    EXPECT_EQ(e.to_json()["bytes"], 350);
}

TEST(MemoryEstimate, CheckNamesTheBatchThatFits) {
    MemoryEstimate e;
    e.images = 64;
    e.per_image = int64_t(1) << 30;  // 1 GiB an image
    const int64_t free = int64_t(10) << 30;
    const auto msg = error_of<std::invalid_argument>([&] { check_memory_fits(e, free, "cuda:0"); });
    EXPECT_NE(msg.find("64 images need about 64.0 GiB of cuda:0 memory (1.0 GiB per image)"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("10.0 GiB is free: a batch of at most 9 fits"), std::string::npos) << msg;
    e.images = 9;  // 9 GiB of 10: within the headroom
    EXPECT_EQ(error_of<std::invalid_argument>([&] { check_memory_fits(e, free, "cuda:0"); }), "");
    e.images = 1;
    e.per_image = int64_t(20) << 30;
    EXPECT_NE(error_of<std::invalid_argument>([&] {
                  check_memory_fits(e, free, "cpu");
              }).find("not even one image fits"),
              std::string::npos);
    // Unknown free memory: nothing is refused.
    EXPECT_EQ(error_of<std::invalid_argument>([&] { check_memory_fits(e, -1, "cpu"); }), "");
}

// What the runner can give back by itself (Infinity's automatic block streaming) counts as free,
// and the refusal says how much it was.
TEST(MemoryEstimate, ReclaimableBytesCountAsFree) {
    MemoryEstimate e;
    e.images = 1;
    e.per_image = int64_t(12) << 30;
    const int64_t free = int64_t(10) << 30;  // 9 GiB usable
    EXPECT_NE(error_of<std::invalid_argument>([&] { check_memory_fits(e, free, "cuda:0"); }), "");
    e.reclaimable = int64_t(3) << 30;
    EXPECT_EQ(error_of<std::invalid_argument>([&] { check_memory_fits(e, free, "cuda:0"); }), "");
    EXPECT_EQ(e.to_json().value("reclaimable", int64_t{0}), e.reclaimable);
    e.per_image = int64_t(13) << 30;
    const auto msg = error_of<std::invalid_argument>([&] { check_memory_fits(e, free, "cuda:0"); });
    EXPECT_NE(msg.find("10.0 GiB is free (+ 3.0 GiB by streaming every block)"), std::string::npos)
        << msg;
}

TEST(MemoryEstimate, HostMemoryIsReadOnLinux) {
    EXPECT_GT(available_memory(c10::Device(c10::kCPU)), 0);
}

TEST(MemoryEstimate, VarGrowsWithBatchDecodeAndEagerAttention) {
    const auto runner = var_runner(tiny_pipeline());
    SampleSettings s = runner->defaults();
    s.batch = 1;
    const auto one = runner->estimate_memory(s);
    s.batch = 4;
    const auto four = runner->estimate_memory(s);
    EXPECT_GT(one.per_image, 0);
    EXPECT_EQ(four.per_image, one.per_image);
    EXPECT_EQ(four.bytes(), four.fixed + 4 * one.per_image);
    // The decode is chunked: it counts once per chunk, not per image.
    EXPECT_GT(one.fixed, 0);
    EXPECT_EQ(four.fixed, 4 * one.fixed);  // the tiny model's images all fit one chunk
    s.decode = false;
    EXPECT_EQ(runner->estimate_memory(s).fixed, 0);
    s.decode = true;
    s.attention = AttentionBackend::Eager;
    EXPECT_GT(runner->estimate_memory(s).per_image, one.per_image);
}

// bf16-autocast keeps fp32 weights but caches keys and values and runs its products in bf16
// beside an fp32 stream: the estimate counts 2-byte elements for those (session 41: counting the
// first parameter's 4 bytes doubled VAR-d30's estimate at 1024^2, 10.3 GiB per image against a
// measured 5.2, and refused batches that fit).
TEST(MemoryEstimate, VarBf16AutocastCountsBf16CacheAndAnFp32Stream) {
    SampleSettings s;
    MemoryEstimate fp32, autocast;
    {
        const auto runner = var_runner(tiny_pipeline());
        s = runner->defaults();
        s.batch = 1;
        fp32 = runner->estimate_memory(s);
    }
    auto pipe = tiny_pipeline();
    pipe.sampler().transformer()->use_autocast_bf16();
    const auto runner = var_runner(std::move(pipe));
    autocast = runner->estimate_memory(s);
    const auto c = tiny_var_config();
    const int64_t rows = 2, n = c.patch_nums.back() * c.patch_nums.back(), C = c.embed_dim,
                  hidden = int64_t(c.mlp_ratio * double(C));
    EXPECT_EQ(autocast.per_image, fp32.per_image -
                                      kv_cache_bytes(c.depth, rows, c.total_tokens(), C, 2) -
                                      step_activation_bytes(rows, n, C, hidden, 2) +
                                      fp32_stream_bytes(rows, n, C, kFp32StreamCopies));
    EXPECT_EQ(autocast.fixed, fp32.fixed);
}

TEST(MemoryEstimate, MarGuidanceDoublesTheRows) {
    const auto runner = random_mar_runner(tiny_cpu_mar_config(), 1, LoadOptions{});
    SampleSettings s = runner->defaults();
    s.cfg = 1.0;
    s.decode = false;
    const auto plain = runner->estimate_memory(s);
    s.cfg = 3.0;
    EXPECT_EQ(runner->estimate_memory(s).per_image, 2 * plain.per_image);
}

// Chunked decoding gives the images of a whole-batch decode, and bounds the chunk by pixels.
TEST(ChunkedDecode, SameImagesAsOneCall) {
    EXPECT_EQ(decode_chunk_images(256), 16);
    EXPECT_EQ(decode_chunk_images(1024), 1);
    EXPECT_EQ(decode_chunk_images(4096), 1);
    const auto x = at::randn({7, 3, 4, 4});
    int64_t calls = 0;
    const auto f = [&](const at::Tensor& t) {
        ++calls;
        return t.mul(2).sum(1, true);
    };
    const auto whole = f(x);
    calls = 0;
    const auto chunked = decode_in_chunks(x, 3, f);
    EXPECT_EQ(calls, 3);  // 3 + 3 + 1
    EXPECT_TRUE(at::equal(whole, chunked));
    calls = 0;
    EXPECT_TRUE(at::equal(decode_in_chunks(x, 16, f), whole));
    EXPECT_EQ(calls, 1);
}

TEST(MemoryEstimate, CliRefusesABatchThatCannotFitTheHost) {
    // VAR-d16 keeps ~180 MB of KV cache per image on the 10-scale schedule: 4096 images
    // (about 740 GB) cannot fit the hosts this suite runs on. Refused before sampling, with the
    // batch that fits.
    const auto r = varscope::testing::run_cli(
        "generate --random 16 --batch 4096 --class 1 --tokens-out /tmp/never.safetensors");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("4096 images need about"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("a batch of at most"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("--no-memory-check"), std::string::npos) << r.out;
}

// AMS-KV's bounded cache is what lets it run larger batches: the estimate the front ends check
// before a run must count what it keeps, not the whole schedule (it refused AMS-KV's batch 67 at
// 1024^2 on the H200: 385 GB estimated, 117 GB used). Its bound at 1024^2 (C_max + the largest
// scale) is about the whole schedule again (session 29: batch 48 refused at 260.6 GiB), so the
// check uses the least (no layer promoted, C_min) and reports the most. Other methods keep the
// baseline's count.
TEST(MemoryEstimate, AmsKvCountsItsBoundedCache) {
    const auto runner = var_runner(small_pipeline());  // 130 tokens, largest scale 64
    SampleSettings s = runner->defaults();
    s.decode = false;
    const auto base = runner->estimate_memory(s);
    EXPECT_EQ(runner->estimate_memory(s, nullptr).bytes(), base.bytes());
    const auto bounded = runner->parse_accel(
        {{"ams_kv", {{"enabled", true}, {"c_cds", 2}, {"c_min", 8}, {"c_max", 16}}}});
    const auto b = runner->estimate_memory(s, bounded.get());
    EXPECT_LT(b.per_image, base.per_image);
    // The KV term shrinks from 130 to C_min = 8 tokens per layer when no layer is promoted (the
    // least, which the pre-run check uses) and to C_max + the largest scale = 16 + 64 when all
    // are (the most); 4 layers, both guidance rows, fp32; nothing else changes.
    ASSERT_NE(s.attention, AttentionBackend::Eager);  // eager scores would count keys too
    const int64_t C = tiny_var_config().embed_dim;
    EXPECT_EQ(base.per_image - b.per_image, kv_cache_bytes(4, 2, 130 - 8, C, 4));
    EXPECT_EQ(base.per_image - b.per_image_most, kv_cache_bytes(4, 2, 130 - (16 + 64), C, 4));
    EXPECT_EQ(b.bytes_most() - b.bytes(), kv_cache_bytes(4, 2, 16 + 64 - 8, C, 4));
    EXPECT_EQ(b.to_json().at("bytes_most").get<int64_t>(), b.bytes_most());
    EXPECT_EQ(base.bytes_most(), base.bytes());
    EXPECT_FALSE(base.to_json().contains("bytes_most"));
    const auto fastvar = runner->parse_accel({{"fastvar", {{"enabled", true}}}});
    EXPECT_EQ(runner->estimate_memory(s, fastvar.get()).bytes(), base.bytes());
    // Budgets at least the schedule's length evict nothing: the baseline's count.
    const auto unbounded = runner->parse_accel(
        {{"ams_kv", {{"enabled", true}, {"c_cds", 2}, {"c_min", 200}, {"c_max", 300}}}});
    EXPECT_EQ(runner->estimate_memory(s, unbounded.get()).bytes(), base.bytes());
}

}  // namespace
}  // namespace varscope

// The terms count what they say: element counts times bytes (the fp32 stream at 4 bytes
// whatever the activations' dtype).
TEST(MemoryEstimate, TermsAreElementsTimesBytes) {
    using namespace varscope;
    EXPECT_EQ(fp32_stream_bytes(2, 10, 8, 6), 2 * 10 * 8 * 6 * 4);
    EXPECT_EQ(kv_cache_bytes(3, 2, 10, 8, 2), 3 * 2 * 2 * 10 * 8 * 2);
    EXPECT_EQ(step_activation_bytes(2, 10, 8, 32, 2), 2 * 10 * (8 * 8 + 2 * 32) * 2);
}
