#include "core/models/infinity_block_stream.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <iterator>
#include <stdexcept>
#include <string>

namespace varscope {
namespace {

// A block's tensors that stream: parameters and buffers in registration order, ada_gss out.
std::vector<at::Tensor> streamed_tensors(const InfinityBlockImpl& b) {
    std::vector<at::Tensor> out;
    for (const auto& p : b.named_parameters(/*recurse=*/true))
        if (p.key() != "ada_gss") out.push_back(p.value());
    for (const auto& t : b.named_buffers(/*recurse=*/true)) out.push_back(t.value());
    return out;
}

}  // namespace

InfinityBlockStream::InfinityBlockStream(InfinityTransformer model, int64_t count)
    : model_(std::move(model)), first_(model_->config().depth) {
    grow(count);
}

void check_stream_count(int64_t count, int64_t least, int64_t depth) {
    if (count < least || count > depth)
        throw std::invalid_argument("stream blocks: " + std::to_string(count) +
                                    " is not a block count of this " + std::to_string(depth) +
                                    "-block model (" + std::to_string(least) + ".." +
                                    std::to_string(depth) + ")");
}

void InfinityBlockStream::grow(int64_t count) {
    const int64_t depth = model_->config().depth;
    check_stream_count(count, count_, depth);
    if (count == count_) return;
    at::NoGradGuard no_grad;
    for (int64_t k = 0; k < std::min(count, kSlots); ++k)
        if (!slots_[k].block) make_slot(slots_[k]);
    move_to_host(depth - count, first_);
    first_ = depth - count;
    count_ = count;
}

void InfinityBlockStream::move_to_host(int64_t first, int64_t end) {
    const bool pin = model_->block(first).ada_gss.device().is_cuda();
    std::vector<std::vector<at::Tensor>> moved;
    for (int64_t i = first; i < end; ++i) {
        std::vector<at::Tensor> host;
        for (auto& t : streamed_tensors(model_->block(i))) {
            // A copy even where the model is on the CPU (to() would return the same tensor).
            auto h = t.to(at::kCPU, t.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
            if (pin) h = h.pin_memory();
            host_bytes_ += static_cast<int64_t>(h.nbytes());
            host.push_back(h);
            // The model's block keeps an empty tensor of the same dtype on the device: using it
            // anywhere but through acquire() fails loudly instead of reading stale weights.
            t.set_data(at::empty({0}, t.options()));
        }
        moved.push_back(std::move(host));
    }
    // host_[i] holds layer first_ + i: the newly streamed blocks go in front.
    host_.insert(host_.begin(), std::make_move_iterator(moved.begin()),
                 std::make_move_iterator(moved.end()));
}

int64_t InfinityBlockStream::block_bytes(const InfinityBlockImpl& block) {
    int64_t bytes = 0;
    for (const auto& t : streamed_tensors(block)) bytes += static_cast<int64_t>(t.nbytes());
    return bytes;
}

int64_t blocks_to_stream(int64_t need, int64_t usable, int64_t block_bytes, int64_t streamed,
                         int64_t depth) {
    const int64_t short_by = need - usable;
    if (short_by <= 0 || streamed >= depth) return std::min(streamed, depth);
    if (block_bytes <= 0) return depth;
    // The least count that frees ceil(short_by / block) more blocks than `streamed` does.
    const int64_t more = (short_by + block_bytes - 1) / block_bytes;
    int64_t n = streamed + 1;
    while (n < depth && blocks_freed(n) - blocks_freed(streamed) < more) ++n;
    return n;
}

void InfinityBlockStream::make_slot(Slot& slot) const {
    // A block of the same config whose streamed tensors take the model's dtypes on its device
    // (the official bf16 mode makes the blocks bf16): shaped as the first slot's, or, for the
    // first, as the last block's, which is still resident then.
    const auto& last = model_->block(model_->config().depth - 1);
    const auto like =
        &slot != &slots_[0] && slots_[0].block ? slots_[0].tensors : streamed_tensors(last);
    slot.block = InfinityBlock(model_->config());
    slot.tensors = streamed_tensors(*slot.block);
    if (slot.tensors.size() != like.size())
        throw std::logic_error("stream blocks: the slot and the model's blocks differ");
    for (size_t k = 0; k < slot.tensors.size(); ++k)
        slot.tensors[k].set_data(at::empty_like(like[k]));
    slot.block->ada_gss.set_data(at::empty_like(last.ada_gss));
}

void InfinityBlockStream::fill(Slot& slot, int64_t layer) {
    slot.copy.start(slot.tensors, host_.at(static_cast<size_t>(layer - first_)));
    slot.layer = layer;
}

const InfinityBlockImpl& InfinityBlockStream::acquire(int64_t layer) {
    if (layer < first_) return model_->block(layer);
    at::NoGradGuard no_grad;
    const int64_t depth = model_->config().depth;
    const int64_t next = layer + 1 < depth ? layer + 1 : first_;  // the next pass starts there
    const bool two = static_cast<bool>(slots_[1].block);
    int hit = slots_[0].layer == layer ? 0 : two && slots_[1].layer == layer ? 1 : -1;
    if (hit < 0) {  // not prefetched: the first streamed layer, or after a pass ended early
        hit = two && slots_[0].layer == next ? 1 : 0;
        fill(slots_[hit], layer);
    }
    Slot& slot = slots_[hit];
    slot.copy.wait();
    if (two) {
        // The other slot's last reader (an earlier layer) is queued already: the copy runs
        // after it, beside this layer's compute.
        Slot& other = slots_[1 - hit];
        if (other.layer != next) fill(other, next);
    }
    return *slot.block;
}

}  // namespace varscope
