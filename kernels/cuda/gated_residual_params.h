// Launcher of the fused gated-residual kernel (gated_residual.cu). Plain C++ so the .cu file
// never includes LibTorch. Strides are in elements; the innermost dimension of every tensor is
// contiguous.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace varscope::kernels::cuda {

enum class GammaType : int { Float32 = 0, BFloat16 = 1 };

// out[b, l, c] = x[b, l, c] + p(y[b, l, c] * gamma[b, c]), p = the bf16 rounding or none.
struct GatedResidualParams {
    const float* x = nullptr;  // contiguous (B, L, C) float32
    const void* y = nullptr;   // contiguous (B, L, C) bfloat16
    const void* gamma = nullptr;
    GammaType gamma_type = GammaType::Float32;
    int64_t gamma_stride_batch = 0;  // gamma[b * stride + c]; 0 broadcasts one row
    bool round_product = false;      // round y * gamma to bf16 before the sum
    float* out = nullptr;            // contiguous (B, L, C) float32
    int64_t batch = 0, tokens = 0, channels = 0;
};

cudaError_t launch_gated_residual(const GatedResidualParams& p, cudaStream_t stream);

}  // namespace varscope::kernels::cuda
