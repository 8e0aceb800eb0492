#include "kernels/block_list_order.h"

#include <algorithm>
#include <vector>

namespace varscope::kernels {
namespace {

struct Run {
    int64_t begin, end;  // [begin, end) in the sorted list
};

// Runs of consecutive block ids in a sorted list.
std::vector<Run> runs_of(const int32_t* row, int64_t n) {
    std::vector<Run> runs;
    for (int64_t i = 0; i < n;) {
        int64_t j = i + 1;
        while (j < n && row[j] == row[j - 1] + 1) ++j;
        runs.push_back({i, j});
        i = j;
    }
    return runs;
}

void sort_by_residue(int32_t* first, int32_t* last, int64_t mod) {
    std::sort(first, last, [mod](int32_t a, int32_t b) {
        const int64_t ra = a % mod, rb = b % mod;
        return ra < rb || (ra == rb && a < b);
    });
}

}  // namespace

void order_block_lists_for_shared_reads(int32_t* lists, const int32_t* counts,
                                        int64_t num_query_blocks, int64_t stride,
                                        int64_t min_query_blocks) {
    if (lists == nullptr || counts == nullptr || stride <= 0) return;
    // Each list sorted, its valid (non-negative) entries first (-1 entries stay last), and its
    // runs found once.
    std::vector<std::vector<Run>> runs_per_list;
    int64_t longest_last = 1;
    for (int64_t qb = 0; qb < num_query_blocks; ++qb) {
        int32_t* row = lists + qb * stride;
        const int64_t n = std::clamp<int64_t>(counts[qb], 0, stride);
        int32_t* end = std::partition(row, row + n, [](int32_t b) { return b >= 0; });
        std::sort(row, end);
        runs_per_list.push_back(runs_of(row, end - row));
        const auto& runs = runs_per_list.back();
        if (!runs.empty())
            longest_last = std::max(longest_last, runs.back().end - runs.back().begin);
    }
    if (num_query_blocks < min_query_blocks) return;  // sorted, no more
    std::vector<int32_t> out;
    for (int64_t qb = 0; qb < num_query_blocks; ++qb) {
        int32_t* row = lists + qb * stride;
        const auto& runs = runs_per_list[static_cast<size_t>(qb)];
        if (runs.empty()) continue;
        out.assign(row + runs.back().begin, row + runs.back().end);
        sort_by_residue(out.data(), out.data() + out.size(), longest_last);
        for (size_t r = 0; r + 1 < runs.size(); ++r) {
            const size_t at = out.size();
            out.insert(out.end(), row + runs[r].begin, row + runs[r].end);
            sort_by_residue(out.data() + at, out.data() + out.size(), runs[r].end - runs[r].begin);
        }
        std::copy(out.begin(), out.end(), row);
    }
}

}  // namespace varscope::kernels
