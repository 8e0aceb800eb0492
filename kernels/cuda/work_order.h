// Where the persistent sm90 CSLA kernels (schedules 11, 12) stop dealing work items round-robin
// and start claiming them (WorkOrder in csla_attention_sm90.cuh). Plain C++, so host tests can
// check it without a GPU.
#pragma once

namespace varscope::kernels::cuda {

// The first claimed item of `total` (query block fastest, `blocks_per_head` per head) on `grid`
// CTAs: the start of the last partial round, moved back to the start of its head; `total` (none
// claimed) where the items fill whole rounds. Round-robin keeps the CTAs on one head in step
// through its K/V; claiming the last items lets the CTAs that finish early take them.
constexpr int first_claimed_item(int blocks_per_head, int total, int grid) {
    if (blocks_per_head <= 0 || total <= 0 || grid <= 0) return total;
    const int from = total / grid * grid / blocks_per_head * blocks_per_head;
    return from < total && total % grid != 0 ? from : total;
}

}  // namespace varscope::kernels::cuda
