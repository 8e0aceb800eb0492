// Depth growth: where the small model's blocks land, which tensors of the new blocks are zeroed,
// the errors, and that a grown Infinity transformer computes what the small one did.
#include "core/training/grow_depth.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include "core/io/module_binding.h"
#include "core/models/infinity.h"
#include "core/models/infinity_schedule.h"

using namespace varscope;

namespace {

const GrowSpec kSpec{"w", {"out"}};

at::Generator seeded(uint64_t seed) {
    return at::detail::createCPUGenerator(seed);
}

// Blocks 0..d-1 with "w" = the block's index + offset and "out" = 1; one tensor outside.
StateDict blocks(int64_t d, double offset) {
    StateDict s;
    for (int64_t i = 0; i < d; ++i) {
        s["blocks." + std::to_string(i) + ".w"] = at::full({2}, double(i) + offset);
        s["blocks." + std::to_string(i) + ".out"] = at::ones({2});
    }
    s["head.weight"] = at::full({2}, offset);
    return s;
}

}  // namespace

TEST(GrowDepth, SmallBlocksSpreadOverTheDeeperModelAndNewBranchesAreZero) {
    // 2 -> 5 blocks: old 0 -> 0, old 1 -> floor(5 / 2) = 2; blocks 1, 3, 4 are new.
    int64_t d = 0;
    const auto g = grown_state_dict(blocks(5, 100), 5, blocks(2, 0), kSpec, "small", &d);
    EXPECT_EQ(d, 2);
    EXPECT_EQ(count_blocks(g, "w"), 5);
    EXPECT_EQ(g.at("blocks.0.w")[0].item<double>(), 0);  // from the small model
    EXPECT_EQ(g.at("blocks.2.w")[0].item<double>(), 1);
    EXPECT_EQ(g.at("head.weight")[0].item<double>(), 0);  // non-block tensors: the small model's
    for (int64_t j : {1, 3, 4}) {
        const std::string b = "blocks." + std::to_string(j);
        EXPECT_EQ(g.at(b + ".w")[0].item<double>(), 100 + j) << j;    // the deeper model's own
        EXPECT_TRUE(g.at(b + ".out").eq(0).all().item<bool>()) << j;  // its branch adds nothing
    }
    for (int64_t j : {0, 2})
        EXPECT_TRUE(g.at("blocks." + std::to_string(j) + ".out").eq(1).all().item<bool>());
    // The deeper model's tensors were copied, not zeroed in place.
    const auto own = blocks(5, 100);
    grown_state_dict(own, 5, blocks(2, 0), kSpec, "small");
    EXPECT_TRUE(own.at("blocks.1.out").eq(1).all().item<bool>());
}

TEST(GrowDepth, ErrorsNameTheFile) {
    auto message = [](const StateDict& small, int64_t depth) {
        try {
            grown_state_dict(blocks(depth, 0), depth, small, kSpec, "small.safetensors");
        } catch (const std::invalid_argument& e) {
            return std::string(e.what());
        }
        return std::string("(no error)");
    };
    EXPECT_EQ(message({}, 4), "small.safetensors: no blocks to grow from");
    EXPECT_EQ(message(blocks(5, 0), 4), "small.safetensors has 5 blocks, more than the model's 4");
    auto gap = blocks(2, 0);
    gap["blocks.3.out"] = at::ones({2});
    EXPECT_EQ(message(gap, 4), "small.safetensors: block numbering has gaps ('blocks.3.out')");
    EXPECT_EQ(message(blocks(4, 0), 4), "(no error)");  // the same depth: a plain copy
}

TEST(GrowDepth, GrownInfinityComputesWhatTheSmallOneDid) {
    c10::InferenceMode guard;
    InfinityConfig c = InfinityConfig::infinity_2b();
    c.depth = 2, c.embed_dim = 64, c.num_heads = 4, c.mlp_hidden = 128, c.text_channels = 128;
    c.text_maxlen = 8, c.pool_heads = 1, c.codebook_dim = 4;
    auto small = random_infinity(c, 3);
    InfinityConfig deep_cfg = c;
    deep_cfg.depth = 5;
    auto deep = random_infinity(deep_cfg, 4);
    const auto s = infinity_schedule(1.0, "0.06M").first(4);
    InfinityText text{at::randn({7, 128}, seeded(1)), {3, 4}};
    const auto x = at::randn({2, s.total_tokens() - 1, 4}, seeded(2));
    const auto before = deep->forward_teacher(text, x, s);
    const auto want = small->forward_teacher(text, x, s);
    int64_t d = 0;
    deep->load(grown_state_dict(module_state_dict(*deep), 5, module_state_dict(*small),
                                infinity_grow_spec(), "small", &d),
               "grown");
    EXPECT_EQ(d, 2);
    const auto got = deep->forward_teacher(text, x, s);
    // The new blocks add exact zeros; the float sums of the kept ones are the same operations.
    EXPECT_TRUE(at::equal(got, want)) << (got - want).abs().max().item<float>();
    EXPECT_FALSE(at::allclose(before, want));  // the test can fail: the deep model differed
    // Without zeroing the new blocks' projections the function would change.
    GrowSpec none = infinity_grow_spec();
    none.zeroed.clear();
    auto deep2 = random_infinity(deep_cfg, 4);
    deep2->load(
        grown_state_dict(module_state_dict(*deep2), 5, module_state_dict(*small), none, "small"),
        "grown");
    EXPECT_FALSE(at::allclose(deep2->forward_teacher(text, x, s), want));
}
