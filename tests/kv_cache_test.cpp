// KvCache: the preallocated (baseline) and compact (eviction) modes hold the same tokens; compact
// memory follows what is kept.
#include "core/sampling/kv_cache.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
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

std::vector<int64_t> range_ids(int64_t a, int64_t b) {
    std::vector<int64_t> r;
    for (int64_t i = a; i < b; ++i) r.push_back(i);
    return r;
}

std::vector<int64_t> concat_ids(std::vector<int64_t> a, const std::vector<int64_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

KvCache make(bool compact, int64_t layers = 2, int64_t capacity = 64) {
    const auto opt = at::TensorOptions().dtype(at::kFloat);
    return compact ? KvCache::compact(layers, kB, kH, kC, opt)
                   : KvCache(layers, kB, kH, kC, capacity, opt);
}

// A one-layer compact cache that took tokens 0..n-1 and was then made rolling.
KvCache rolling_cache(int64_t n, int64_t pinned, int64_t window) {
    auto cache = make(true, 1);
    cache.reserve(0, pinned + window);
    auto [k, v] = tokens(0, n);
    cache.append(0, k, v);
    cache.view(0);
    cache.set_window(0, pinned, window);
    return cache;
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

TEST(KvCache, NextSlotsWrittenInPlaceAreAppendedWithoutACopy) {
    auto cache = make(false, 2, 8);
    auto [k0, v0] = tokens(0, 3);
    cache.append(1, k0, v0);
    auto [sk, sv] = cache.next_slots(1, 4);
    ASSERT_TRUE(sk.defined() && sv.defined());
    EXPECT_EQ(sk.sizes(), (std::vector<int64_t>{kB, kH, 4, kC}));
    const auto base = cache.view(1).first;
    EXPECT_EQ(sk.data_ptr(), static_cast<char*>(base.data_ptr()) + 3 * base.stride(2) * 4)
        << "the slots follow the layer's tokens";
    auto [k1, v1] = tokens(3, 4);
    sk.copy_(k1);  // what the fused q/k norm kernel does on the device
    sv.copy_(v1);
    EXPECT_EQ(cache.length(1), 3) << "next_slots changes nothing";
    cache.append(1, sk, sv);
    EXPECT_EQ(cache.length(1), 7);
    auto [k, v] = cache.view(1);
    EXPECT_TRUE(at::equal(k, at::cat({k0, k1}, 2)));
    EXPECT_TRUE(at::equal(v, at::cat({v0, v1}, 2)));
    // Other tensors of the slots' shape are copied as before, also into a slot's place.
    auto [k2, v2] = tokens(7, 1);
    cache.append(1, k2, v2);
    EXPECT_EQ(ids_of(cache.view(1).first), range_ids(0, 8));
    EXPECT_TRUE(at::equal(cache.view(1).second.narrow(2, 7, 1), v2));
    // No room, a layer out of range, compact mode: no slots.
    EXPECT_FALSE(cache.next_slots(1, 1).first.defined());
    EXPECT_TRUE(cache.next_slots(0, 8).first.defined());
    EXPECT_FALSE(cache.next_slots(0, 9).first.defined());
    EXPECT_THROW(cache.next_slots(2, 1), std::out_of_range);
    EXPECT_FALSE(make(true).next_slots(0, 1).first.defined());
}

// ---- compact layers: reserve, rolling windows (AMS-KV's CLRU without moving kept tokens) ----

namespace {

// Ids of a layer's keys in sequence order (keys() reads in sequence order, view() in slot order).
std::vector<int64_t> sequence_ids(const KvCache& cache, int64_t layer) {
    return ids_of(cache.keys(layer, 0, cache.length(layer)));
}

}  // namespace

TEST(KvCache, ReservedCompactLayerWritesInPlace) {
    auto cache = make(true, 1);
    cache.reserve(0, 30);
    const int64_t tok = cache.token_bytes();
    EXPECT_EQ(cache.allocated_bytes(), 30 * tok);
    const void* data = nullptr;
    int64_t next = 0;
    for (int64_t n : {1, 4, 9, 16}) {  // 30 tokens: fits the reserve, the buffer never moves
        auto [k, v] = tokens(next, n);
        next += n;
        cache.append(0, k, v);
        auto [kk, vv] = cache.view(0);
        if (!data) data = kk.data_ptr();
        EXPECT_EQ(kk.data_ptr(), data);
        EXPECT_TRUE(at::equal(vv, -kk));
    }
    EXPECT_EQ(ids_of(cache.view(0).first), range_ids(0, 30));
    EXPECT_EQ(cache.peak_bytes(), 30 * tok);
    // One more token grows the buffer (a copy of the 30 written tokens).
    auto [k, v] = tokens(30, 2);
    cache.append(0, k, v);
    EXPECT_EQ(ids_of(cache.view(0).first), range_ids(0, 32));
    EXPECT_EQ(cache.allocated_bytes(), 32 * tok);
    EXPECT_EQ(cache.peak_bytes(), 62 * tok);
}

TEST(KvCache, RollingLayerKeepsPinnedAndMostRecentTokens) {
    auto cache = make(true, 1);
    cache.reserve(0, 12);
    auto [k0, v0] = tokens(0, 10);
    cache.append(0, k0, v0);
    cache.view(0);
    EXPECT_THROW(cache.set_window(0, 11, 4), std::invalid_argument);  // fewer than pinned
    EXPECT_THROW(cache.set_window(0, 2, 7), std::invalid_argument);   // more than pinned + window
    EXPECT_THROW(cache.set_window(0, 2, 0), std::invalid_argument);
    const void* data = cache.view(0).first.data_ptr();
    cache.set_window(0, 2, 10);  // 12 slots: in place
    EXPECT_TRUE(cache.is_rolling(0));
    EXPECT_EQ(cache.view(0).first.data_ptr(), data);
    // 10 + 5 tokens: the 3 oldest unpinned ones (2, 3, 4) are overwritten.
    auto [k1, v1] = tokens(10, 5);
    cache.append(0, k1, v1);
    EXPECT_EQ(sequence_ids(cache, 0), range_ids(0, 15));  // staged: not written yet
    auto [kv, vv] = cache.view(0);
    EXPECT_EQ(kv.data_ptr(), data);
    EXPECT_EQ(kv.size(2), 12);
    EXPECT_TRUE(at::equal(vv, -kv));
    EXPECT_EQ(cache.length(0), 12);
    auto seq = concat_ids(range_ids(0, 2), range_ids(5, 15));
    EXPECT_EQ(sequence_ids(cache, 0), seq);
    // Slot order: the ring wrapped, the newest tokens took the oldest ones' slots.
    EXPECT_EQ(ids_of(kv), (std::vector<int64_t>{0, 1, 12, 13, 14, 5, 6, 7, 8, 9, 10, 11}));
    // A scale larger than the window: only its last 10 tokens stay.
    auto [k2, v2] = tokens(15, 13);
    cache.append(0, k2, v2);
    cache.view(0);
    EXPECT_EQ(sequence_ids(cache, 0), concat_ids(range_ids(0, 2), range_ids(18, 28)));
    // Dropping the staged tokens (keep exactly the written ones) moves nothing.
    auto [k3, v3] = tokens(28, 4);
    cache.append(0, k3, v3);
    cache.retain(0, {{0, 12}});
    EXPECT_EQ(cache.length(0), 12);
    EXPECT_TRUE(cache.is_rolling(0));
    EXPECT_EQ(sequence_ids(cache, 0), concat_ids(range_ids(0, 2), range_ids(18, 28)));
    EXPECT_EQ(cache.allocated_bytes(), 12 * cache.token_bytes());
    EXPECT_EQ(cache.peak_bytes(), 12 * cache.token_bytes());
    // Any other eviction rebuilds a linear layer in sequence order.
    cache.append(0, k3, v3);
    cache.retain(0, {{0, 2}, {10, 6}});
    EXPECT_FALSE(cache.is_rolling(0));
    EXPECT_EQ(ids_of(cache.view(0).first),
              concat_ids(range_ids(0, 2), concat_ids(range_ids(26, 28), range_ids(28, 32))));
}

TEST(KvCache, WideningTheWindowCopiesInSequenceOrderOnce) {
    auto cache = rolling_cache(8, 1, 7);
    auto [k1, v1] = tokens(8, 3);
    cache.append(0, k1, v1);
    cache.view(0);  // wrapped: {0, 4..10}
    auto [k2, v2] = tokens(11, 6);
    cache.append(0, k2, v2);  // staged while the window grows
    cache.set_window(0, 1, 20);
    EXPECT_EQ(cache.allocated_bytes(), 21 * cache.token_bytes());
    EXPECT_EQ(cache.peak_bytes(), (8 + 21) * cache.token_bytes());
    auto [k, v] = cache.view(0);
    // Nothing evicted now: 8 + 6 tokens fit, appended after the others in sequence order.
    EXPECT_EQ(ids_of(k), concat_ids(std::vector<int64_t>{0}, range_ids(4, 17)));
    EXPECT_TRUE(at::equal(v, -k));
    EXPECT_THROW(make(false).set_window(0, 0, 4), std::logic_error);
}

TEST(KvCache, RollingMatchesClruOnRandomAppends) {
    // The rolling layer against a list model of CLRU: pinned tokens + the `window` most recent.
    at::manual_seed(3);
    for (int trial = 0; trial < 20; ++trial) {
        auto cache = make(true, 1);
        const int64_t pinned = trial % 4, window = 3 + trial % 7;
        std::vector<int64_t> model;
        int64_t next = 0;
        bool rolling = false;
        for (int step = 0; step < 12; ++step) {
            const int64_t n = 1 + (trial * 7 + step * 5) % 9;
            auto [k, v] = tokens(next, n);
            cache.append(0, k, v);
            for (int64_t i = 0; i < n; ++i) model.push_back(next + i);
            next += n;
            if (!rolling && static_cast<int64_t>(model.size()) > pinned + window &&
                cache.length(0) - n >= pinned && cache.length(0) - n <= pinned + window) {
                cache.set_window(0, pinned, window);
                rolling = true;
            }
            if (rolling && static_cast<int64_t>(model.size()) > pinned + window) {
                model.erase(model.begin() + pinned, model.end() - window);
            }
            auto [kk, vv] = cache.view(0);
            EXPECT_TRUE(at::equal(vv, -kk));
            EXPECT_EQ(sequence_ids(cache, 0), model) << trial << " " << step;
            auto sorted = ids_of(kk);
            std::sort(sorted.begin(), sorted.end());
            EXPECT_EQ(sorted, model) << trial << " " << step;
        }
    }
}

// CUDA graphs' eager tail (DenseStepGraphs::eager_tail_cache): a copy of a compact cache shares
// its buffers but not its host-side state. Writing through the copy lands in the shared buffer;
// a rebuild in the copy (a wider ring) leaves the original's buffer and state alone.
TEST(KvCache, CopySharesBuffersButNotState) {
    auto cache = KvCache::compact(1, kB, kH, kC, at::kFloat);
    cache.reserve(0, 8);
    auto [k0, v0] = tokens(0, 6);
    cache.append(0, k0, v0);
    cache.view(0);
    cache.set_window(0, 2, 6);
    const auto before = cache.view(0).first.clone();

    KvCache copy = cache;
    auto [k1, v1] = tokens(6, 4);  // overwrites ring slots 6, 7, 2, 3
    copy.append(0, k1, v1);
    EXPECT_EQ(ids_of(copy.view(0).first), (std::vector<int64_t>{0, 1, 8, 9, 4, 5, 6, 7}));
    EXPECT_EQ(cache.length(0), 6);  // the original's state is where it was
    const auto shared = cache.view(0).first;
    EXPECT_EQ(ids_of(shared), (std::vector<int64_t>{0, 1, 8, 9, 4, 5}));  // the shared buffer
    EXPECT_FALSE(shared.equal(before));

    KvCache wider = cache;
    wider.set_window(0, 2, 10);  // a new buffer in the copy only
    auto [k2, v2] = tokens(20, 3);
    wider.append(0, k2, v2);
    EXPECT_EQ(ids_of(wider.view(0).first), (std::vector<int64_t>{0, 1, 8, 9, 4, 5, 20, 21, 22}));
    EXPECT_EQ(ids_of(cache.view(0).first), (std::vector<int64_t>{0, 1, 8, 9, 4, 5}));
    EXPECT_EQ(cache.length(0), 6);
}

// A grouped step's keys must all stay: retaining every token of a rolling layer whose staged
// tokens overflow its ring makes the layer linear instead of letting the ring drop the oldest.
TEST(KvCache, RetainingMoreThanTheRingHoldsMakesTheLayerLinear) {
    auto cache = KvCache::compact(1, kB, kH, kC, at::kFloat);
    auto [k0, v0] = tokens(0, 4);
    cache.append(0, k0, v0);
    cache.view(0);
    cache.set_window(0, 1, 3);
    auto [k1, v1] = tokens(4, 5);
    cache.append(0, k1, v1);
    cache.retain(0, {{0, 1}, {1, 8}});
    EXPECT_FALSE(cache.is_rolling(0));
    EXPECT_EQ(ids_of(cache.view(0).first), range_ids(0, 9));
    // Within the ring nothing changes.
    auto small = KvCache::compact(1, kB, kH, kC, at::kFloat);
    small.append(0, k0, v0);
    small.view(0);
    small.set_window(0, 1, 5);
    auto [k2, v2] = tokens(4, 2);
    small.append(0, k2, v2);
    small.retain(0, {{0, 6}});
    EXPECT_TRUE(small.is_rolling(0));
    EXPECT_EQ(ids_of(small.view(0).first), range_ids(0, 6));
}

TEST(KvCache, KeyPiecesOfAWrappedRingAreViewsInSequenceOrder) {
    auto cache = rolling_cache(10, 2, 10);
    auto [k1, v1] = tokens(10, 5);  // slots: 0 1 12 13 14 5 6 7 8 9 10 11 (see above)
    cache.append(0, k1, v1);
    const auto buffer = cache.view(0).first;
    // Tokens 9..14 in sequence order: slots 9..11 (9, 10, 11), then 2..4 (12, 13, 14).
    const auto pieces = cache.key_pieces(0, 6, 6);  // sequence index 6 is token id 9
    ASSERT_EQ(pieces.size(), 2u);
    EXPECT_EQ(ids_of(pieces[0]), range_ids(9, 12));
    EXPECT_EQ(ids_of(pieces[1]), range_ids(12, 15));
    for (const auto& p : pieces) {  // views of the ring, not copies
        const auto* lo = static_cast<const char*>(buffer.data_ptr());
        const auto* at = static_cast<const char*>(p.data_ptr());
        EXPECT_TRUE(at >= lo && at < lo + buffer.storage().nbytes());
        EXPECT_EQ(p.strides(), buffer.strides());
    }
    EXPECT_TRUE(at::equal(at::cat(pieces, 2), cache.keys(0, 6, 6)));
    // A range in one piece is one view; an empty range has no piece.
    const auto one = cache.key_pieces(0, 2, 4);
    ASSERT_EQ(one.size(), 1u);
    EXPECT_EQ(ids_of(one[0]), range_ids(5, 9));
    EXPECT_TRUE(cache.key_pieces(0, 3, 0).empty());
    EXPECT_THROW(cache.key_pieces(0, 10, 3), std::out_of_range);
}
