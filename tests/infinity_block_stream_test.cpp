// Infinity's block streaming (core/models/infinity_block_stream.h, the low-memory mode): the
// sampler with the last N blocks streamed through the slot gives the resident model's bits, for
// N from one block to all of them, in fp32 and in the official bf16 mode, with guidance mixed at
// a layer; the streamed blocks leave the model; bad counts and a second call are refused.
#include "core/models/infinity_block_stream.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "core/infinity_pipeline.h"
#include "core/models/infinity_schedule.h"
#include "core/sampling/infinity_sampler.h"

using namespace varscope;

namespace {

InfinityConfig config() {
    auto c = InfinityConfig::infinity_2b();
    c.depth = 3, c.embed_dim = 64, c.num_heads = 4, c.mlp_hidden = 128, c.text_channels = 128;
    c.text_maxlen = 8, c.pool_heads = 1, c.codebook_dim = 4;
    return c;
}

InfinityTransformer model(bool bf16) {
    auto m = random_infinity(config(), 1);  // the same weights for every call
    if (bf16) m->use_autocast_bf16();
    return m;
}

bsq::BsqQuantConfig quant() {
    bsq::BsqQuantConfig q;
    q.codebook_dim = 4;
    return q;
}

InfinitySampleResult sample(InfinitySampler& s) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(2);
    const InfinityText text{at::randn({7, 128}, gen), {3, 4}};
    InfinitySampleOptions o;
    o.seed = 9;
    o.cfg_insertion_layer = {0, -2};  // guidance at the logits and after layer 1
    return s.sample(text, infinity_schedule(1.0, "0.06M").first(5), o);
}

}  // namespace

TEST(InfinityBlockStream, StreamedBlocksGiveTheResidentBits) {
    for (const bool bf16 : {false, true}) {
        InfinitySampler resident(model(bf16), quant());
        const auto want = sample(resident);
        for (const int64_t n : {1, 2, 3}) {
            SCOPED_TRACE((bf16 ? "bf16, " : "fp32, ") + std::to_string(n) + " streamed");
            auto m = model(bf16);
            auto stream = std::make_shared<InfinityBlockStream>(m, n);
            EXPECT_GT(stream->host_bytes(), 0);
            // The streamed blocks left the model (their weights live in the stream's copies).
            EXPECT_EQ(m->block(2).ffn->fc1->weight.numel(), 0);
            EXPECT_GT(m->block(2).ada_gss.numel(), 0);  // the prologue reads it for every block
            EXPECT_EQ(m->block(0).ffn->fc1->weight.numel() > 0, n < 3);
            InfinitySampler streamed(m, quant());
            streamed.set_block_stream(stream);
            const auto got = sample(streamed);
            ASSERT_EQ(got.bits.size(), want.bits.size());
            for (size_t si = 0; si < want.bits.size(); ++si)
                EXPECT_TRUE(at::equal(got.bits[si], want.bits[si])) << "scale " << si;
            EXPECT_TRUE(at::equal(got.summed_codes, want.summed_codes));
        }
    }
}

TEST(InfinityBlockStream, RefusesCountsOutsideTheModelAndASecondCall) {
    auto m = model(false);
    try {
        InfinityBlockStream bad(m, 4);
        FAIL() << "4 of 3 blocks accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("0..3"), std::string::npos) << e.what();
    }
    EXPECT_THROW(InfinityBlockStream(m, -1), std::invalid_argument);
    EXPECT_NO_THROW(InfinityBlockStream(m, 0));  // nothing moves
    EXPECT_GT(m->block(2).ffn->fc1->weight.numel(), 0);
    auto pipe = InfinityPipeline::from(m, BsqVae(nullptr));
    pipe.stream_blocks(1);
    EXPECT_THROW(pipe.stream_blocks(1), std::logic_error);
}
