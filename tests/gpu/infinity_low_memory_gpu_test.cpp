// Infinity's official bf16 mode on a CUDA device never holds the blocks in fp32 there: the
// runner casts them on the CPU before the move (Infinity-8B: 33 GB in fp32 against 17 GB in
// bf16; before session 30 the fp32 copy went to the device first and its 33 GB stayed reserved
// by the caching allocator through the whole run); block streaming, fixed and automatic. Skips
// without CUDA.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/infinity_pipeline.h"
#include "core/io/checkpoint.h"
#include "core/models/bsq_vae_config.h"
#include "core/models/infinity_schedule.h"
#include "core/pipeline.h"
#include "core/runner/memory_estimate.h"
#include "core/runner/runner.h"
#include "kernels/memory_stats.h"
#include "tests/gpu/tiny_infinity_cuda.h"
#include "tests/test_util.h"
#include "tests/tiny_bsq_vae.h"

using namespace varscope;

namespace {

// Wide enough that the blocks' bytes dwarf the allocator's 2 MB segments and the tiny VAE.
InfinityConfig wide_config() {
    InfinityConfig c = varscope::testing::tiny_infinity_cuda_config(4);
    c.embed_dim = 1024;
    c.num_heads = 16;
    c.mlp_hidden = 4096;
    return c;
}

BsqVaeConfig tiny_vae() {
    return varscope::testing::tiny_bsq_vae_config(8, {1, 1, 1});
}

// A 1024^2 run (13 scales) of the wide model on a random 5-token text saved in `dir`: a need of
// several hundred MB, far above the allocator's cached slack (at 0.06M it was a few MB, and a
// ballast could not leave exactly that free: session 37).
SampleSettings large_run(const Runner& r, const varscope::testing::TempDir& dir) {
    const auto features = dir.file("text.safetensors");
    const auto text = varscope::testing::tiny_infinity_text({5}, 2);
    save_safetensors({{"kv_compact", text.kv_compact.cpu()}, {"lens", at::tensor({int64_t{5}})}},
                     features);
    SampleSettings s = r.defaults();
    s.text_features = features;
    s.pixels = "1M";
    s.decode = false;
    s.seed = 3;
    return s;
}

int64_t fp32_bytes(const InfinityTransformer& m) {
    int64_t n = 0;
    for (const auto& p : m->parameters()) n += p.numel();
    for (const auto& b : m->buffers()) n += b.numel();
    return n * 4;
}

}  // namespace

TEST(InfinityLowMemoryGpu, Bf16BlocksAreNeverHeldInFp32OnTheDevice) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    const int64_t fp32 = fp32_bytes(random_infinity(wide_config(), 1));
    ASSERT_GT(fp32, 200ll << 20);  // the test's premise: a model of a few hundred MB
    kernels::empty_cuda_cache();
    const int64_t before = kernels::cuda_memory(0).allocated;
    kernels::reset_cuda_peak_memory(0);
    auto runner =
        random_infinity_runner(wide_config(), tiny_vae(), 1, load_options("cuda", "bf16"));
    const auto mem = kernels::cuda_memory(0);
    // bf16 blocks: about half the fp32 bytes stay on the device, and never more at any moment.
    EXPECT_LT(mem.allocated - before, fp32 * 6 / 10) << "fp32 model " << fp32;
    EXPECT_LT(mem.peak_allocated - before, fp32 * 6 / 10)
        << "fp32 model " << fp32 << ": the device held an fp32 copy while loading";
    // The same runner in fp32 holds all of it (the measure sees what it should).
    runner.reset();
    kernels::empty_cuda_cache();
    auto fp32_runner =
        random_infinity_runner(wide_config(), tiny_vae(), 1, load_options("cuda", "fp32"));
    EXPECT_GE(kernels::cuda_memory(0).allocated - before, fp32 * 9 / 10);
}

// Block streaming (the exact low-memory mode's weights, core/models/infinity_block_stream.h): on
// CUDA the streamed blocks leave the device (pinned host copies, two device slots, the next block
// copied on a side stream while one computes) and the samples
// keep the resident model's bits, in the official bf16 mode; later calls reuse the stream.
TEST(InfinityLowMemoryGpu, StreamedBlocksLeaveTheDeviceAndKeepTheBits) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    auto make = [] {
        auto m = random_infinity(wide_config(), 1);
        m->use_autocast_bf16();  // on the CPU, as the runner does
        m->to(at::kCUDA);
        m->eval();
        return m;
    };
    bsq::BsqQuantConfig q;
    q.codebook_dim = 8;
    const auto text = varscope::testing::tiny_infinity_text({5}, 2);
    const auto schedule = infinity_schedule(1.0, "0.06M").first(5);
    auto opt = varscope::testing::tiny_infinity_options(/*graphs=*/true);
    InfinitySampler resident(make(), q);
    const auto want = resident.sample(text, schedule, opt);
    EXPECT_TRUE(want.cuda_graphs);

    auto m = make();
    auto pipe = InfinityPipeline::from(m, BsqVae(nullptr));
    kernels::empty_cuda_cache();
    const int64_t before = kernels::cuda_memory(0).allocated;
    pipe.stream_blocks(3);  // of 4
    const int64_t freed = before - kernels::cuda_memory(0).allocated;
    const auto* stream = pipe.sampler->block_stream();
    ASSERT_NE(stream, nullptr);
    // Three blocks' bytes leave the device and two slots' come in: about one block net.
    EXPECT_GT(freed, stream->host_bytes() / 5) << "host bytes " << stream->host_bytes();
    for (int run = 0; run < 2; ++run) {
        const auto got = pipe.sampler->sample(text, schedule, opt);
        EXPECT_FALSE(got.cuda_graphs);  // streamed steps run eagerly
        ASSERT_EQ(got.bits.size(), want.bits.size());
        for (size_t si = 0; si < want.bits.size(); ++si)
            EXPECT_TRUE(at::equal(got.bits[si], want.bits[si])) << "run " << run << " scale " << si;
    }
}

// --stream-blocks auto (ModelSpec::kStreamBlocksAuto): with the device nearly full (a ballast
// tensor leaves less free memory than the run's estimate), the runner streams blocks before the
// run, says so in a notice, counts the blocks it could give back in its estimate, and draws the
// resident runner's tokens; with the ballast gone nothing more moves.
TEST(InfinityLowMemoryGpu, AutoStreamingFitsTheFreeMemoryAndKeepsTheTokens) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    varscope::testing::TempDir dir;
    auto resident =
        random_infinity_runner(wide_config(), tiny_vae(), 1, load_options("cuda", "bf16"));
    const auto want = resident->generate(large_run(*resident, dir));
    resident.reset();
    kernels::empty_cuda_cache();

    auto r = random_infinity_runner(wide_config(), tiny_vae(), 1, load_options("cuda", "bf16"), "",
                                    false, ModelSpec::kStreamBlocksAuto);
    const SampleSettings s = large_run(*r, dir);
    const MemoryEstimate e = r->estimate_memory(s);
    ASSERT_GT(e.reclaimable, 0);
    // Leave available about the estimate minus half the reclaimable bytes: some blocks must go.
    // The available bytes count what the caching allocator holds unused in partly used
    // segments; the ballast, one block, can only take the driver's free memory.
    kernels::empty_cuda_cache();
    const auto mem = kernels::cuda_memory(0);
    const int64_t cached = mem.reserved - mem.allocated;
    const int64_t target =
        static_cast<int64_t>(static_cast<double>(e.bytes() - e.reclaimable / 2) / kMemoryHeadroom);
    ASSERT_GT(target, cached + (64ll << 20)) << "the run is too small for this test";
    const int64_t free = kernels::cuda_free_memory(0);
    ASSERT_GT(free, target - cached);
    // Whatever happens below, the device's memory goes back to the driver for the next tests.
    struct EmptyCacheAtExit {
        ~EmptyCacheAtExit() { kernels::empty_cuda_cache(); }
    } empty_at_exit;
    auto ballast = at::empty({free - (target - cached)},
                             at::TensorOptions().dtype(at::kByte).device(at::kCUDA));
    ASSERT_LT(std::abs(available_memory(r->device()) - target), 4ll << 20);
    const auto got = r->generate(s);
    ASSERT_EQ(got.notices.size(), 1u);
    EXPECT_NE(got.notices[0].find("stream from host memory"), std::string::npos) << got.notices[0];
    EXPECT_LT(r->estimate_memory(s).reclaimable, e.reclaimable);
    ASSERT_EQ(got.step_tokens.size(), want.step_tokens.size());
    for (size_t si = 0; si < want.step_tokens.size(); ++si)
        EXPECT_TRUE(at::equal(got.step_tokens[si], want.step_tokens[si])) << "scale " << si;
    ballast = at::Tensor();
    kernels::empty_cuda_cache();
    EXPECT_TRUE(r->generate(s).notices.empty());
}

// The estimate the automatic streaming and the memory check rely on bounds what a run
// allocates beyond the resident weights, with CUDA graphs (their pools) and eagerly.
TEST(InfinityLowMemoryGpu, EstimateBoundsTheRunsPeakAllocation) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    varscope::testing::TempDir dir;
    for (const bool graphs : {true, false}) {
        auto r = random_infinity_runner(wide_config(), tiny_vae(), 1, load_options("cuda", "bf16"));
        SampleSettings s = large_run(*r, dir);
        s.cuda_graphs = graphs;
        const MemoryEstimate e = r->estimate_memory(s);
        kernels::empty_cuda_cache();
        const int64_t before = kernels::cuda_memory(0).allocated;
        kernels::reset_cuda_peak_memory(0);
        r->generate(s);
        const auto m = kernels::cuda_memory(0);
        const int64_t grew = m.peak_allocated - before;
        std::printf("graphs %d: estimate %lld, peak growth %lld (%.2fx), held after %lld\n",
                    graphs ? 1 : 0, static_cast<long long>(e.bytes()), static_cast<long long>(grew),
                    static_cast<double>(grew) / static_cast<double>(e.bytes()),
                    static_cast<long long>(m.allocated - before));
        // An upper bound, and not a loose one (the automatic streaming would give back blocks
        // a run does not need).
        EXPECT_LE(grew, e.bytes()) << (graphs ? "graphs" : "eager");
        EXPECT_GE(grew, e.bytes() / 2) << (graphs ? "graphs" : "eager");
    }
}
