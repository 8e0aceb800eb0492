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

// out = bf16(layer_norm(x) * scale + shift), the LayerNorm over C without affine and `eps`
// (norm_modulate.cu). Needs norm_modulate_fits: C a multiple of 4 up to 2^24, x, scale and shift
// 16-byte aligned, out 8-byte aligned (where ATen runs its vectorized LayerNorm, whose bits the
// kernel reproduces); returns cudaErrorInvalidValue otherwise.
bool norm_modulate_fits(const ModulateParams& p);
cudaError_t launch_norm_modulate_bf16(const ModulateParams& p, float eps, cudaStream_t stream);

}  // namespace varscope::kernels::cuda
