// DenseGraphCache's memory rule (core/sampling/cuda_graph.h): which cached graph sets a new one
// releases, and the bytes a set is expected to hold. The CUDA side (a batch that fits alone is
// not refused because an earlier set is cached) is tests/gpu/var_graph_test.cpp.
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
