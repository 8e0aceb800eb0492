// Infinity's block streaming, the exact part of the low-memory mode beyond the T5 offload: the
// last `count` transformer blocks keep their weights in host memory (pinned where CUDA is
// available) and are copied into one of two device blocks, the slots, before they run. While a
// streamed block computes in one slot, the next streamed block's weights are copied into the other
// on a side stream (kernels/async_copy.h), so the host link works beside the compute instead of
// before it; the compute waits for a slot's copy only when it reads it. The copies are exact, so
// the samples keep their bits. The device holds two blocks instead of `count` (Infinity-8B: ~0.39
// GB each in bf16). Each block's AdaLN table (ada_gss) stays on the device: the sampler's
// prologue reads it for every block.
#pragma once

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "core/models/infinity.h"
#include "kernels/async_copy.h"

namespace varscope {

class InfinityBlockStream {
  public:
    // `model` on its device; its last `count` (0..depth) blocks move to host memory here.
    // std::invalid_argument for a count out of range.
    InfinityBlockStream(InfinityTransformer model, int64_t count);
    // Streams the last `count` blocks from now on (count() .. depth): the blocks before the
    // streamed ones move to host memory too; the ones already there stay as they are.
    void grow(int64_t count);
    InfinityBlockStream(const InfinityBlockStream&) = delete;
    InfinityBlockStream& operator=(const InfinityBlockStream&) = delete;

    int64_t count() const { return count_; }
    // The block that computes layer i: the model's own, or the slot holding layer i's weights
    // (the current stream waits for its copy); the next streamed layer starts copying into the
    // other slot. Layers are acquired in order, once per forward pass.
    const InfinityBlockImpl& acquire(int64_t layer);
    // Bytes of the streamed weights in host memory (what a forward pass copies in).
    int64_t host_bytes() const { return host_bytes_; }
    // Device bytes a block gives back when it streams (its weights but ada_gss); each slot takes
    // as much.
    static int64_t block_bytes(const InfinityBlockImpl& block);
    static constexpr int64_t kSlots = 2;

  private:
    struct Slot {
        InfinityBlock block{nullptr};
        std::vector<at::Tensor> tensors;  // its streamed tensors, in order
        int64_t layer = -1;               // whose weights it holds (or is being filled with)
        kernels::AsyncCopy copy;
    };
    void move_to_host(int64_t first, int64_t end);  // blocks [first, end), before the others
    void make_slot(Slot& slot) const;
    void fill(Slot& slot, int64_t layer);  // starts copying layer's weights into it

    InfinityTransformer model_;
    int64_t count_ = 0, first_ = 0, host_bytes_ = 0;
    std::array<Slot, kSlots> slots_;             // the second one once two blocks stream
    std::vector<std::vector<at::Tensor>> host_;  // per streamed block: its tensors, same order
};

// std::invalid_argument naming the range unless least <= count <= depth (a stream of `least`
// blocks can grow to `count`).
void check_stream_count(int64_t count, int64_t least, int64_t depth);

// Device blocks that streaming `count` blocks gives back, net of its slots.
inline int64_t blocks_freed(int64_t count) {
    return count - std::min(count, InfinityBlockStream::kSlots);
}

// How many of a model's `depth` blocks must stream (at least `streamed`, already streaming) for
// a run that needs `need` bytes beyond the resident weights to fit into `usable` bytes: every
// further block gives back `block_bytes`, and the first two streamed pay for the slots
// (blocks_freed). `depth` when even that does not make it fit.
int64_t blocks_to_stream(int64_t need, int64_t usable, int64_t block_bytes, int64_t streamed,
                         int64_t depth);

}  // namespace varscope
