// Launcher of the fused q/k normalisation kernel (qk_norm.cu). Plain C++ so the .cu file never
// includes LibTorch. Strides are in elements, (B, H, L) order; the channel dimension is
// contiguous in every tensor.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace varscope::kernels::cuda {

struct QkNormParams {
    const void* q = nullptr;  // bfloat16
    const void* k = nullptr;
    const float* norm_q = nullptr;
    const float* norm_k = nullptr;
    const float* mul = nullptr;  // mul[h * mul_stride_head]
    void* q_out = nullptr;       // bfloat16
    void* k_out = nullptr;
    const void* v = nullptr;  // optional: copied to v_out in the same pass (a KV cache's slots)
    void* v_out = nullptr;
    int64_t q_stride[3] = {}, k_stride[3] = {}, nq_stride[3] = {}, nk_stride[3] = {};
    int64_t qo_stride[3] = {}, ko_stride[3] = {}, v_stride[3] = {}, vo_stride[3] = {};
    int64_t mul_stride_head = 0;
    int64_t batch = 0, heads = 0, tokens = 0, channels = 0;
};

cudaError_t launch_qk_norm_bf16(const QkNormParams& p, cudaStream_t stream);

}  // namespace varscope::kernels::cuda
