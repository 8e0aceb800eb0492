// Launcher of the upsample-and-add kernel (upsample_add.cu). Plain C++ so the .cu file never
// includes LibTorch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/token_ops_params.h"  // TokenElem

namespace varscope::kernels::cuda {

struct UpsampleAddParams {
    const void* o = nullptr;  // (B, H, t*t, d), channels contiguous
    TokenElem elem = TokenElem::Float32;
    int64_t o_stride[3] = {0, 0, 0};  // b, h, row
    const float* cache = nullptr;     // contiguous (B, H, g*g, d)
    // Or the residual as dense - sparse (o's type, channels contiguous), formed per cell in
    // float32: used where `dense` is set.
    const void* dense = nullptr;
    const void* sparse = nullptr;
    int64_t dense_stride[3] = {0, 0, 0}, sparse_stride[3] = {0, 0, 0};  // b, h, row
    const int64_t* tap_ids = nullptr;                                   // (t, 2)
    const float* tap_weights = nullptr;                                 // (t, 2)
    void* out = nullptr;  // contiguous (B, H, t*t, d), o's dtype
    int batch = 0, heads = 0, side = 0, grid = 0, channels = 0;
    bool vec4 = false;  // channels % 4 == 0 and o's strides and both pointers 4-element aligned
};

cudaError_t launch_upsample_add(const UpsampleAddParams& p, cudaStream_t stream);

}  // namespace varscope::kernels::cuda
