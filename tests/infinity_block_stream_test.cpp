// Infinity's block streaming (core/models/infinity_block_stream.h, the low-memory mode): the
// sampler with the last N blocks streamed through the two slots gives the resident model's bits,
// for N from one block to all of them, in fp32 and in the official bf16 mode, with guidance mixed
// at a layer; the streamed blocks leave the model; a stream grows block by block with the same
// bits; the automatic count pays for the slots and streams no more than the shortfall needs; bad
// counts are refused.
#include "core/models/infinity_block_stream.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

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

TEST(InfinityBlockStream, RefusesCountsOutsideTheModel) {
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
    pipe.stream_blocks(2);
    pipe.stream_blocks(1);  // fewer than streamed: blocks never move back
    EXPECT_EQ(pipe.streamed_blocks(), 2);
    EXPECT_THROW(pipe.stream_blocks(4), std::invalid_argument);
    EXPECT_THROW(pipe.stream_blocks(-1), std::invalid_argument);
    EXPECT_EQ(pipe.streamed_blocks(), 2);
}

// A pipeline that streams one block, then two more, samples the resident model's bits at every
// stage (the host copies of the first streamed block stay where they are).
TEST(InfinityBlockStream, AGrowingStreamKeepsTheBits) {
    for (const bool bf16 : {false, true}) {
        SCOPED_TRACE(bf16 ? "bf16" : "fp32");
        InfinitySampler resident(model(bf16), quant());
        const auto want = sample(resident);
        auto pipe = InfinityPipeline::from(model(bf16), BsqVae(nullptr));
        pipe.sampler = std::make_shared<InfinitySampler>(pipe.model, quant());
        for (const int64_t n : {1, 3}) {
            pipe.stream_blocks(n);
            ASSERT_EQ(pipe.streamed_blocks(), n);
            EXPECT_EQ(pipe.model->block(0).ffn->fc1->weight.numel() > 0, n < 3);
            const auto got = sample(*pipe.sampler);
            for (size_t si = 0; si < want.bits.size(); ++si)
                EXPECT_TRUE(at::equal(got.bits[si], want.bits[si]))
                    << n << " streamed, scale " << si;
        }
        EXPECT_EQ(pipe.sampler->block_stream()->host_bytes(),
                  3 * InfinityBlockStream::block_bytes(model(bf16)->block(0)));
    }
}

// The automatic count: nothing while the run fits; the first two blocks streamed pay for the two
// slots; then one block per block's worth of shortfall; every block when even that is not enough.
TEST(InfinityBlockStream, BlocksToStreamPaysForTheSlots) {
    const int64_t b = 100, depth = 40;
    struct Case {
        int64_t need, usable, streamed, want;
    };
    for (const auto& c : std::vector<Case>{{500, 500, 0, 0},
                                           {501, 500, 0, 3},  // two slots + one block
                                           {600, 500, 0, 3},
                                           {601, 500, 0, 4},
                                           {501, 500, 1, 3},  // one slot paid already
                                           {501, 500, 5, 6},  // both paid already
                                           {600, 500, 5, 6},
                                           {601, 500, 5, 7},
                                           {100, 500, 5, 5},  // fits: no change, none back
                                           {100000, 500, 0, depth},
                                           {501, 500, depth, depth}}) {
        EXPECT_EQ(blocks_to_stream(c.need, c.usable, b, c.streamed, depth), c.want)
            << c.need << " " << c.usable << " " << c.streamed;
    }
}

// The pipeline's automatic form streams what blocks_to_stream says, with the model's own block
// size, and what is left to give back shrinks as blocks go.
TEST(InfinityBlockStream, StreamToFitAndReclaimableBytesFollowTheBlocks) {
    auto pipe = InfinityPipeline::from(model(false), BsqVae(nullptr));
    const int64_t b = InfinityBlockStream::block_bytes(pipe.model->block(0));
    ASSERT_GT(b, 0);
    EXPECT_EQ(pipe.reclaimable_bytes(), b);  // 3 blocks, minus the two slots
    EXPECT_EQ(pipe.stream_to_fit(1000, 1000), 0);
    EXPECT_EQ(pipe.stream_to_fit(1000 + b / 2, 1000), 3);
    EXPECT_EQ(pipe.reclaimable_bytes(), 0);
    EXPECT_EQ(pipe.stream_to_fit(1000, 1000), 3);          // fits now: nothing more moves
    EXPECT_EQ(pipe.stream_to_fit(1000 + 5 * b, 1000), 3);  // all of them: the check says the rest
}
