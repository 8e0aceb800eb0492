// Launcher of the fused AdaLN modulation kernel (modulate.cu). Plain C++ so the .cu file never
// includes LibTorch. Strides are in elements; the innermost dimension of every tensor is
// contiguous.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace varscope::kernels::cuda {

// out[b, l, c] = bf16(x[b, l, c] * scale[b, c] + shift[b, c]) for a contiguous (B, L, C) x.
struct ModulateParams {
    const float* x = nullptr;      // contiguous (B, L, C)
    const float* scale = nullptr;  // scale[b * scale_stride_batch + c]
    const float* shift = nullptr;  // shift[b * shift_stride_batch + c]
    int64_t scale_stride_batch = 0, shift_stride_batch = 0;
    void* out = nullptr;  // contiguous (B, L, C) bfloat16
    int64_t batch = 0, tokens = 0, channels = 0;
};

cudaError_t launch_modulate_bf16(const ModulateParams& p, cudaStream_t stream);

}  // namespace varscope::kernels::cuda
