// Launchers of the CUDA token kernels (token_ops.cu). Plain C++ so the .cu file never includes
// LibTorch. Tensors are contiguous; element types as in attention_params.h plus float32.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace varscope::kernels::cuda {

enum class TokenElem : int { Float32 = 0, Float16 = 1, BFloat16 = 2 };

// x (rows, tokens, channels) -> mean (rows, channels) scratch, scores (rows, tokens), float32.
cudaError_t launch_pivotal_scores(const void* x, TokenElem elem, int rows, int tokens, int channels,
                                  float* mean, float* scores, cudaStream_t stream);

// scores (rows, tokens) float32 -> out (rows, keep): the ids of each row's `keep` highest scores
// in ascending order; among equal scores the lower ids first, NaN above every number.
cudaError_t launch_top_rows(const float* scores, int rows, int tokens, int keep, int64_t* out,
                            cudaStream_t stream);

// a, b (batch, channels, positions) -> out (batch, positions), float32.
cudaError_t launch_update_index(const void* a, const void* b, TokenElem elem, int batch,
                                int channels, int positions, float* out, cudaStream_t stream);

}  // namespace varscope::kernels::cuda
