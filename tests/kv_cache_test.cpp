// KvCache: the preallocated (baseline) and compact (eviction) modes hold the same tokens; compact
// memory follows what is kept.
#include "core/sampling/kv_cache.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <stdexcept>

using namespace varscope;

namespace {

constexpr int64_t kB = 2, kH = 3, kC = 4;

// Keys whose channel 0 is the token's global id, values = -keys: a token is traceable.
std::pair<at::Tensor, at::Tensor> tokens(int64_t first, int64_t n) {
    auto ids = at::arange(first, first + n, at::kFloat).view({1, 1, n, 1});
    auto k = ids.expand({kB, kH, n, kC}).clone();
    k.select(3, 1).add_(at::rand({kB, kH, n}));  // other channels differ per row and head
    return {k, -k};
}

std::vector<int64_t> ids_of(const at::Tensor& k) {
    auto col = k.select(0, 0).select(0, 0).select(1, 0).to(at::kLong);
    return {col.data_ptr<int64_t>(), col.data_ptr<int64_t>() + col.numel()};
}

KvCache make(bool compact, int64_t layers = 2, int64_t capacity = 64) {
    const auto opt = at::TensorOptions().dtype(at::kFloat);
    return compact ? KvCache::compact(layers, kB, kH, kC, opt)
                   : KvCache(layers, kB, kH, kC, capacity, opt);
}

}  // namespace

TEST(KvCache, BothModesHoldTheAppendedTokens) {
    for (bool compact : {false, true}) {
        auto cache = make(compact);
        std::vector<at::Tensor> all_k, all_v;
        int64_t next = 0;
        for (int64_t n : {1, 4, 9}) {
            auto [k, v] = tokens(next, n);
            next += n;
            cache.append(1, k, v);
            all_k.push_back(k);
            all_v.push_back(v);
        }
        auto [k, v] = cache.view(1);
        EXPECT_TRUE(at::equal(k, at::cat(all_k, 2))) << "compact=" << compact;
        EXPECT_TRUE(at::equal(v, at::cat(all_v, 2))) << "compact=" << compact;
        EXPECT_EQ(cache.length(1), 14);
        EXPECT_EQ(cache.length(0), 0);
        EXPECT_EQ(cache.view(0).first.size(2), 0);
        EXPECT_EQ(cache.bytes(1), 14 * 2 * kB * kH * kC * 4);
        EXPECT_EQ(cache.total_bytes(), cache.bytes(1));
    }
}

TEST(KvCache, RetainKeepsRangesInOrderInBothModes) {
    for (bool compact : {false, true}) {
        auto cache = make(compact);
        auto [k0, v0] = tokens(0, 10);
        cache.append(0, k0, v0);
        if (compact) cache.view(0);  // consolidated part + a staged part below
        auto [k1, v1] = tokens(10, 6);
        cache.append(0, k1, v1);
        cache.retain(0, {{0, 2}, {8, 5}});  // crosses the two pieces in compact mode
        auto [k, v] = cache.view(0);
        EXPECT_EQ(ids_of(k), (std::vector<int64_t>{0, 1, 8, 9, 10, 11, 12})) << compact;
        EXPECT_TRUE(at::equal(v, -k));
        EXPECT_EQ(cache.length(0), 7);
        // The keys() accessor reads a range without consolidating.
        auto [k2, v2] = tokens(100, 3);
        cache.append(0, k2, v2);
        EXPECT_EQ(ids_of(cache.keys(0, 6, 3)), (std::vector<int64_t>{12, 100, 101}));
        EXPECT_THROW(cache.retain(0, {{4, 2}, {3, 1}}), std::invalid_argument);
        EXPECT_THROW(cache.retain(0, {{0, 11}}), std::invalid_argument);
        EXPECT_THROW(cache.keys(0, 9, 2), std::out_of_range);
    }
}

TEST(KvCache, CompactMemoryFollowsWhatIsKept) {
    auto cache = make(true, 3);
    EXPECT_TRUE(cache.is_compact());
    EXPECT_EQ(cache.allocated_bytes(), 0);
    const int64_t tok = cache.token_bytes();
    EXPECT_EQ(tok, 2 * kB * kH * kC * 4);
    for (int64_t l = 0; l < 3; ++l) {
        auto [k, v] = tokens(0, 20);
        cache.append(l, k, v);
        cache.view(l);
    }
    EXPECT_EQ(cache.allocated_bytes(), 60 * tok);
    cache.retain(1, {{0, 2}, {15, 5}});
    cache.assign(2, tokens(0, 3).first, tokens(0, 3).second);
    EXPECT_EQ(cache.allocated_bytes(), (20 + 7 + 3) * tok);
    EXPECT_EQ(cache.allocated_bytes(), cache.total_bytes());
    for (int64_t l = 0; l < 3; ++l) {
        auto [k, v] = cache.view(l);
        // The held tensors are exactly the live tokens (no hidden larger buffer).
        EXPECT_EQ(static_cast<int64_t>(k.storage().nbytes() + v.storage().nbytes()),
                  cache.bytes(l));
    }
    // The peak includes the moment a layer holds its old and rebuilt tensors: 60 + 7 tokens.
    EXPECT_EQ(cache.peak_bytes(), 67 * tok);
}

TEST(KvCache, AssignCopiesOutOfLargerBuffers) {
    auto cache = make(true, 1);
    auto big = at::randn({kB, kH, 50, kC});
    cache.assign(0, big.narrow(2, 10, 5), big.narrow(2, 20, 5));
    big.zero_();  // the cache must not alias the caller's buffer
    auto [k, v] = cache.view(0);
    EXPECT_GT(k.abs().sum().item<double>(), 0.0);
    EXPECT_EQ(static_cast<int64_t>(k.storage().nbytes()), kB * kH * 5 * kC * 4);
}

TEST(KvCache, PreallocatedModeIsBoundedByItsCapacity) {
    auto cache = make(false, 2, 8);
    EXPECT_FALSE(cache.is_compact());
    EXPECT_EQ(cache.allocated_bytes(), 2 * 8 * cache.token_bytes());
    EXPECT_EQ(cache.peak_bytes(), cache.allocated_bytes());
    auto [k, v] = tokens(0, 6);
    cache.append(0, k, v);
    EXPECT_THROW(cache.append(0, k, v), std::length_error);
    cache.retain(0, {{4, 2}});
    cache.append(0, k, v);  // room again after the eviction
    EXPECT_EQ(ids_of(cache.view(0).first), (std::vector<int64_t>{4, 5, 0, 1, 2, 3, 4, 5}));
    EXPECT_THROW(cache.append(5, k, v), std::out_of_range);
}
