#include "core/models/infinity_block_stream.h"

#include <ATen/ATen.h>

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
    : model_(std::move(model)), count_(count) {
    const int64_t depth = model_->config().depth;
    if (count < 0 || count > depth)
        throw std::invalid_argument("stream blocks: " + std::to_string(count) +
                                    " is not a block count of this " + std::to_string(depth) +
                                    "-block model (0.." + std::to_string(depth) + ")");
    first_ = depth - count;
    if (count == 0) return;
    at::NoGradGuard no_grad;
    const auto& last = model_->block(depth - 1);
    const at::Device device = last.ada_gss.device();
    const bool pin = device.is_cuda();
    // The slot: a block of the same config whose streamed tensors take the model's dtypes on its
    // device (the official bf16 mode makes the blocks bf16).
    slot_ = InfinityBlock(model_->config());
    slot_tensors_ = streamed_tensors(*slot_);
    const auto model_tensors = streamed_tensors(last);
    if (slot_tensors_.size() != model_tensors.size())
        throw std::logic_error("stream blocks: the slot and the model's blocks differ");
    for (size_t k = 0; k < slot_tensors_.size(); ++k)
        slot_tensors_[k].set_data(at::empty_like(model_tensors[k]));
    slot_->ada_gss.set_data(at::empty_like(last.ada_gss));
    for (int64_t i = first_; i < depth; ++i) {
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
        host_.push_back(std::move(host));
    }
}

const InfinityBlockImpl& InfinityBlockStream::acquire(int64_t layer) {
    if (layer < first_) return model_->block(layer);
    if (layer != loaded_) {
        at::NoGradGuard no_grad;
        const auto& host = host_.at(static_cast<size_t>(layer - first_));
        for (size_t k = 0; k < slot_tensors_.size(); ++k)
            slot_tensors_[k].copy_(host[k], /*non_blocking=*/true);
        loaded_ = layer;
    }
    return *slot_;
}

}  // namespace varscope
