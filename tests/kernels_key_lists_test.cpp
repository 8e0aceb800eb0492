// The key lists of gathered sparse attention (kernels/key_lists.h), LibTorch reference, against
// a plain set-based oracle: sinks and the mapped kept ids, each once, ascending, padded; the
// attention kernel's offset copy; the pair count. The CUDA kernel is compared with this reference
// in tests/gpu/kernels_key_lists_test.cpp.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "kernels/key_lists.h"
#include "tests/key_lists_oracle.h"

namespace vk = varscope::kernels;

TEST(KernelsKeyLists, ReferenceEqualsTheSetOracle) {
    at::manual_seed(7);
    for (const auto& c : varscope::testing::key_list_cases()) {
        SCOPED_TRACE(c.name);
        auto pairs = at::zeros({3}, at::kDouble);
        auto slot = pairs.select(0, 1);
        const auto got =
            vk::reference::key_lists(c.source, c.counts, c.blocks, c.map, c.spec, slot, 4.0);
        const auto want = varscope::testing::key_list_oracle(c, 4.0);
        EXPECT_TRUE(got.keys.equal(want.keys));
        EXPECT_TRUE(got.counts.equal(want.counts));
        EXPECT_TRUE(got.attn_keys.equal(want.attn_keys));
        EXPECT_TRUE(got.attn_counts.equal(want.attn_counts));
        EXPECT_EQ(pairs[1].item<double>(), want.pairs);
        EXPECT_EQ(pairs[0].item<double>(), 0.0);
        // The dispatch on the CPU is the reference; the CUDA path is refused with the reason.
        const auto auto_path = vk::key_lists(c.source, c.counts, c.blocks, c.map, c.spec);
        EXPECT_TRUE(auto_path.keys.equal(want.keys));
        EXPECT_THROW(vk::key_lists(c.source, c.counts, c.blocks, c.map, c.spec, {}, 1.0,
                                   vk::KernelPath::Cuda),
                     c10::Error);
    }
}

TEST(KernelsKeyLists, RefusesWhatDoesNotFit) {
    const auto src = at::arange(6, at::kLong).view({1, 2, 3});
    vk::KeyListsSpec spec;
    spec.kv_len = 10;
    spec.q_len = 4;
    spec.query_block = 2;
    EXPECT_NO_THROW(vk::reference::key_lists(src, {}, {}, {}, spec));
    EXPECT_THROW(vk::reference::key_lists(src.to(at::kInt), {}, {}, {}, spec), c10::Error);
    EXPECT_THROW(vk::reference::key_lists(src.view({2, 3}), {}, {}, {}, spec), c10::Error);
    EXPECT_THROW(vk::reference::key_lists(src, at::ones({1, 3}, at::kLong), {}, {}, spec),
                 c10::Error);  // counts (P, G_s) = (1, 2)
    auto short_q = spec;
    short_q.q_len = 5;  // two blocks of two rows cannot cover five queries
    EXPECT_THROW(vk::reference::key_lists(src, {}, {}, {}, short_q), c10::Error);
    auto no_keys = spec;
    no_keys.kv_len = 0;
    EXPECT_THROW(vk::reference::key_lists(src, {}, {}, {}, no_keys), c10::Error);
    auto huge = spec;
    huge.offset_stride = int64_t{1} << 31;  // attention ids beyond int32
    EXPECT_THROW(vk::reference::key_lists(src, {}, {}, {}, huge), c10::Error);
    EXPECT_THROW(vk::reference::key_lists(src, {}, {}, {}, spec, at::zeros({2}, at::kDouble)),
                 c10::Error);  // pairs: one float64
    std::string why;
    EXPECT_FALSE(vk::cuda_key_lists_supported(src, {}, spec, {}, &why));
    EXPECT_FALSE(why.empty());
}
