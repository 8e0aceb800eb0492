// kernels/block_list_order.h: the order of the block-sparse kernels' key-block lists.
#include "kernels/block_list_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

using varscope::kernels::order_block_lists_for_shared_reads;

namespace {

struct Lists {
    std::vector<int32_t> idx, cnt;
    int64_t stride = 0;
    std::vector<int32_t> row(int64_t u) const {
        return {idx.begin() + u * stride, idx.begin() + u * stride + cnt[static_cast<size_t>(u)]};
    }
};

Lists lists_of(const std::vector<std::vector<int32_t>>& rows) {
    Lists l;
    for (const auto& r : rows)
        l.stride = std::max<int64_t>(l.stride, static_cast<int64_t>(r.size()));
    l.idx.assign(rows.size() * static_cast<size_t>(l.stride), -1);
    for (size_t u = 0; u < rows.size(); ++u) {
        l.cnt.push_back(static_cast<int32_t>(rows[u].size()));
        std::copy(rows[u].begin(), rows[u].end(),
                  l.idx.begin() + static_cast<int64_t>(u) * l.stride);
    }
    return l;
}

// min_query_blocks 0: order however few lists there are.
void order(Lists& l, int64_t min_query_blocks = 0) {
    order_block_lists_for_shared_reads(
        l.idx.data(), l.cnt.data(), static_cast<int64_t>(l.cnt.size()), l.stride, min_query_blocks);
}

}  // namespace

// CSLA-like lists: shared sinks, then a window of 8 consecutive blocks that moves by one block
// per query block. Ordered, the window comes first and every block of it sits at the same place
// in every list that holds it (ascending, u and u + 1 read it one place apart).
TEST(BlockListOrder, ShiftedWindowsReadSharedBlocksTogether) {
    std::vector<std::vector<int32_t>> rows;
    for (int32_t u = 0; u < 20; ++u) {
        std::vector<int32_t> r{0, 1};
        for (int32_t b = 0; b < 8; ++b) r.push_back(10 + u + b);
        rows.push_back(r);
    }
    Lists l = lists_of(rows);
    order(l);
    std::map<int32_t, std::vector<int>> places;  // block -> its place in each list holding it
    for (int64_t u = 0; u < 20; ++u) {
        const auto r = l.row(u);
        auto sorted = r;
        std::sort(sorted.begin(), sorted.end());
        auto want = rows[static_cast<size_t>(u)];
        EXPECT_EQ(sorted, want) << u;  // the same blocks
        for (int i = 0; i < 8; ++i) EXPECT_GE(r[static_cast<size_t>(i)], 10) << u;  // window first
        EXPECT_EQ(r[8], 0);
        EXPECT_EQ(r[9], 1);
        for (size_t i = 0; i < r.size(); ++i) places[r[i]].push_back(static_cast<int>(i));
    }
    for (const auto& [block, at] : places)
        EXPECT_TRUE(std::all_of(at.begin(), at.end(), [&](int p) { return p == at[0]; }))
            << "block " << block << " is read at different places";
}

// Runs before the last one keep their place in ascending order, each ordered by block mod its
// length; unsorted input is sorted first; -1 entries go last; entries past a count or the stride
// are not touched; counts are clamped to [0, stride]; empty lists are left alone.
TEST(BlockListOrder, OtherRunsPaddingAndBadCounts) {
    Lists l = lists_of({{9, 3, 4, 5, 20, 21, 22, 23}, {}, {7}});
    order(l);
    EXPECT_EQ(l.row(0), (std::vector<int32_t>{20, 21, 22, 23, 3, 4, 5, 9}));
    EXPECT_EQ(l.row(2), (std::vector<int32_t>{7}));
    EXPECT_EQ(l.idx[static_cast<size_t>(l.stride)], -1);  // row 1 untouched

    Lists p = lists_of({{5, -1, 4, 2}});
    p.idx.push_back(99);  // past the stride: never read
    order(p);
    EXPECT_EQ(p.row(0), (std::vector<int32_t>{4, 5, 2, -1}));
    EXPECT_EQ(p.idx.back(), 99);

    Lists c = lists_of({{3, 1, 2}});
    c.cnt[0] = 50;  // clamped to the stride (3); one run of 3: by block mod 3
    order(c);
    EXPECT_EQ(c.idx, (std::vector<int32_t>{3, 1, 2}));
    c.cnt[0] = -4;  // clamped to 0: nothing to order
    order(c);
    EXPECT_EQ(c.idx, (std::vector<int32_t>{3, 1, 2}));
    order_block_lists_for_shared_reads(nullptr, c.cnt.data(), 1, 3);  // no lists: nothing
}

// Below kMinQueryBlocksToOrder query blocks (the default) the lists are only sorted.
TEST(BlockListOrder, FewQueryBlocksStayAscending) {
    std::vector<std::vector<int32_t>> rows;
    for (int32_t u = 0; u < 20; ++u) rows.push_back({12 + u, 11 + u, 10 + u, 1, 0});
    Lists l = lists_of(rows);
    order(l, varscope::kernels::kMinQueryBlocksToOrder);
    for (int32_t u = 0; u < 20; ++u)
        EXPECT_EQ(l.row(u), (std::vector<int32_t>{0, 1, 10 + u, 11 + u, 12 + u})) << u;
    for (int32_t u = 20; u < 40; ++u) rows.push_back({12 + u, 11 + u, 10 + u, 1, 0});
    Lists many = lists_of(rows);
    order(many, varscope::kernels::kMinQueryBlocksToOrder);
    EXPECT_EQ(many.row(0), (std::vector<int32_t>{12, 10, 11, 0, 1}));  // 40: ordered
}

// Random lists: every list keeps exactly its blocks, and ordering twice changes nothing more.
TEST(BlockListOrder, PermutesAndIsStable) {
    std::mt19937 rng(3);
    std::vector<std::vector<int32_t>> rows(40);
    for (auto& r : rows) {
        for (int32_t b = 0; b < 60; ++b)
            if (rng() % 3 == 0) r.push_back(b);
        std::shuffle(r.begin(), r.end(), rng);
    }
    Lists l = lists_of(rows);
    order(l);
    for (size_t u = 0; u < rows.size(); ++u) {
        auto a = l.row(static_cast<int64_t>(u)), b = rows[u];
        std::sort(a.begin(), a.end());
        std::sort(b.begin(), b.end());
        EXPECT_EQ(a, b) << u;
    }
    Lists again = l;
    order(again);
    EXPECT_EQ(again.idx, l.idx);
}
