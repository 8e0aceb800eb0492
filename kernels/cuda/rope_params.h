// Launcher of the fused 2-D RoPE kernel (rope.cu). Plain C++ so the .cu file never includes
// LibTorch. Strides are in elements; the innermost dimension of every tensor is contiguous.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace varscope::kernels::cuda {

enum class RopeOut : int { Float32 = 0, BFloat16 = 1 };

// Up to two tensors of one shape (B, H, L, c) rotated by one launch (q and k of a block).
struct RopeParams {
    static constexpr int kMaxInputs = 2;
    int inputs = 1;
    const float* x[kMaxInputs] = {nullptr, nullptr};
    int64_t x_stride[kMaxInputs][3] = {};        // batch, head, token
    void* out[kMaxInputs] = {nullptr, nullptr};  // contiguous (B, H, L, c) in `out_type`
    RopeOut out_type = RopeOut::Float32;
    int64_t batch = 0, heads = 0, tokens = 0, head_dim = 0;
    // cos at rope[b * rope_stride_batch + l * rope_stride_token + j], sin `rope_stride_part`
    // further; rope_stride_batch is 0 when every batch row shares the positions.
    const float* rope = nullptr;
    int64_t rope_stride_part = 0, rope_stride_batch = 0, rope_stride_token = 0;
};

cudaError_t launch_rope2d(const RopeParams& p, cudaStream_t stream);

}  // namespace varscope::kernels::cuda
