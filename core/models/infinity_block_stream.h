// Infinity's block streaming, the exact part of the low-memory mode beyond the T5 offload: the
// last `count` transformer blocks keep their weights in host memory (pinned where CUDA is
// available) and are copied into one device block, the slot, right before they run. The copies
// are exact, so the samples keep their bits; the device holds one block instead of `count`
// (Infinity-8B: ~0.39 GB each in bf16), and every forward pass moves the streamed blocks' bytes
// over the host link once. Each block's AdaLN table (ada_gss) stays on the device: the sampler's
// prologue reads it for every block. The copies are queued on the compute stream, after the
// slot's previous user, so nothing else orders them.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "core/models/infinity.h"

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
    // The block that computes layer i: the model's own, or the slot holding layer i's weights.
    const InfinityBlockImpl& acquire(int64_t layer);
    // Bytes of the streamed weights in host memory (what a forward pass copies in).
    int64_t host_bytes() const { return host_bytes_; }
    // Device bytes a block gives back when it streams (its weights but ada_gss); the slot takes
    // as much once.
    static int64_t block_bytes(const InfinityBlockImpl& block);

  private:
    void move_to_host(int64_t first, int64_t end);  // blocks [first, end), before the others

    InfinityTransformer model_;
    int64_t count_ = 0, first_ = 0, loaded_ = -1, host_bytes_ = 0;
    InfinityBlock slot_{nullptr};
    std::vector<at::Tensor> slot_tensors_;       // the slot's streamed tensors, in order
    std::vector<std::vector<at::Tensor>> host_;  // per streamed block: its tensors, same order
};

// std::invalid_argument naming the range unless least <= count <= depth (a stream of `least`
// blocks can grow to `count`).
void check_stream_count(int64_t count, int64_t least, int64_t depth);

// Device blocks that streaming `count` blocks gives back, net of the slot (which takes one).
inline int64_t blocks_freed(int64_t count) {
    return count > 0 ? count - 1 : 0;
}

// How many of a model's `depth` blocks must stream (at least `streamed`, already streaming) for
// a run that needs `need` bytes beyond the resident weights to fit into `usable` bytes: every
// further block gives back `block_bytes`, and the first one streamed costs the slot
// (blocks_freed). `depth` when even that does not make it fit.
int64_t blocks_to_stream(int64_t need, int64_t usable, int64_t block_bytes, int64_t streamed,
                         int64_t depth);

}  // namespace varscope
