// DenseGraphCache's memory rule (core/sampling/cuda_graph.h): which cached graph sets a new one
// releases, and the bytes a set is expected to hold; the cache itself with CPU buffers and a
// fixed memory probe. The CUDA side (the released set's shape captured again gives the eager
// tokens) is tests/gpu/var_graph_test.cpp.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "core/sampling/cuda_graph.h"
#include "tests/tiny_models.h"

using namespace varscope;

TEST(VarGraphCache, ReleasesTheFewestLeastRecentSetsThatMakeRoom) {
    EXPECT_EQ(graph_sets_to_release(100, 50, {40, 40}), 0u);  // fits beside them
    EXPECT_EQ(graph_sets_to_release(30, 50, {40, 40}), 1u);   // the least recent is enough
    EXPECT_EQ(graph_sets_to_release(30, 100, {40, 20, 40}), 3u);
    EXPECT_EQ(graph_sets_to_release(0, 500, {40, 40}), 2u);  // never enough: all go
    EXPECT_EQ(graph_sets_to_release(0, 500, {}), 0u);
    EXPECT_EQ(graph_sets_to_release(-1, 500, {40, 40}), 0u);  // free memory unknown
}

TEST(VarGraphCache, SetBytesAreTheKeysKvCacheAndHalfAgain) {
    const VarConfig c = varscope::testing::tiny_var_config();
    DenseGraphKey key;
    key.batch = 3;
    key.dtype = at::kBFloat16;
    key.patch_nums = c.patch_nums;
    const int64_t kv = 2 * c.depth * 6 * c.total_tokens() * c.embed_dim * 2;
    EXPECT_EQ(graph_set_bytes(c, key), kv + kv / 2);
    key.patch_nums = {1, 2};  // another schedule of the same model
    EXPECT_EQ(graph_set_bytes(c, key), (2 * c.depth * 6 * 5 * c.embed_dim * 2) * 3 / 2);
    key.patch_nums.clear();
    key.dtype = at::kFloat;
    EXPECT_EQ(graph_set_bytes(c, key), 2 * kv + kv);
}

TEST(VarGraphCache, TheCacheReleasesLeastRecentSetsWhenTheProbeSaysMemoryIsShort) {
    const VarConfig c = varscope::testing::tiny_var_config();
    const auto key = [&](int64_t batch) {
        DenseGraphKey k;
        k.batch = batch;
        k.patch_nums = c.patch_nums;
        return k;
    };
    const auto proto = [&](int64_t batch) { return at::zeros({2 * batch, c.embed_dim}); };
    DenseGraphCache cache;
    EXPECT_EQ(cache.get(c, key(1), proto(1)), cache.get(c, key(1), proto(1)));  // cached
    const auto one = cache.get(c, key(1), proto(1));
    cache.get(c, key(2), proto(2));
    EXPECT_EQ(cache.size(), 2u);  // CPU without a probe: memory unknown, nothing released

    int64_t free_bytes = 0;
    cache.set_memory_probe([&](int) { return free_bytes; });
    cache.get(c, key(1), proto(1));  // a hit: batch 2 is now the least recent
    // Room for batch 3 once batch 2's set (less than batch 3's) and not batch 1's goes: free
    // plus batch 2's set is just enough.
    free_bytes = graph_set_bytes(c, key(3)) - graph_set_bytes(c, key(2));
    const auto three = cache.get(c, key(3), proto(3));
    EXPECT_EQ(cache.size(), 2u);
    EXPECT_EQ(cache.get(c, key(1), proto(1)), one);   // kept
    free_bytes = int64_t{1} << 40;                    // plenty: nothing released
    const auto two = cache.get(c, key(2), proto(2));  // made anew: it had been released
    EXPECT_EQ(cache.size(), 3u);
    EXPECT_EQ(cache.get(c, key(3), proto(3)), three);
    free_bytes = 0;  // never enough: every other set goes
    cache.get(c, key(4), proto(4));
    EXPECT_EQ(cache.size(), 1u);
    EXPECT_NE(cache.get(c, key(1), proto(1)), one);
}
