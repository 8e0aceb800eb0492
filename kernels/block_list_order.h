// The order in which the block-sparse kernels visit a query block's active key blocks (CSLA's
// block lists). Plain C++: used by core's list builder, the LibTorch-free probe and the C entry
// point that tools/bench/csla_vs_torch.py times.
//
// Why an order at all: every order computes the same attention (tests run the kernels on lists
// in random order), but on an H100 the kernel runs faster when the query blocks that share a
// key block read it at the same moment (their reads then arrive at L2 together). CSLA's windows
// are shifted copies of each other: query block u's window at its own scale covers key blocks
// [u + c, u + c + 7], u + 1's covers [u + c + 1, u + c + 8]. In ascending order u and u + 1 read
// the same block one step apart. Ordered by (block mod 8) they read it at the same step, and
// put first in the list, all query blocks start that window together
// (bench/results/2026-11-26-h100/csla_s18.md: Table 1, block 64, 0.1530 -> 0.1447 ms).
#pragma once

#include <cstdint>

namespace varscope::kernels {

// Fewer query blocks than this keep ascending lists: there the order measured slower (H100,
// VAR-d30: 4 query blocks per head +7 %, 16 +1 %; Table 1's 32 at block 128 -0.3 %, 64 at block
// 64 -4.5 %).
inline constexpr int64_t kMinQueryBlocksToOrder = 32;

// Reorders each list lists[qb * stride + i], i < counts[qb], in place (the same blocks):
//   1. the list's last run of consecutive blocks first (for CSLA: the window at the query's own
//      scale), ordered by (block mod M), M = the longest such last run over all query blocks;
//   2. then the other blocks ascending, each run of consecutive blocks ordered by
//      (block mod the run's length).
// Lists may come in any order (they are sorted first); entries < 0 (no block) go last; entries
// past counts[qb] are not touched (counts are clamped to [0, stride]). With fewer than
// min_query_blocks query blocks the lists are only sorted.
void order_block_lists_for_shared_reads(int32_t* lists, const int32_t* counts,
                                        int64_t num_query_blocks, int64_t stride,
                                        int64_t min_query_blocks = kMinQueryBlocksToOrder);

}  // namespace varscope::kernels
