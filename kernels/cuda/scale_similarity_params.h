// Launcher of the scale-similarity kernel (scale_similarity.cu; the math in
// kernels/scale_similarity.h). Plain C++ so the .cu file never includes LibTorch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/token_ops_params.h"  // TokenElem

namespace varscope::kernels::cuda {

// Keys (R, H, tokens, c) with element strides {R, H, tokens}; the channel stride is 1. The
// tokens may lie in two pieces with the same strides (a ring buffer that wrapped): tokens from
// `split` on are read at data2 + (t - split) * stride_t.
struct SimilarityKeys {
    const void* data = nullptr;
    int64_t stride_r = 0, stride_h = 0, stride_t = 0;
    const void* data2 = nullptr;
    int64_t split = INT64_MAX;
};

// How the kernel splits the current map: one thread block per (row, head, band of `band_rows`
// rows of the current map), each band's previous-map rows staged in shared memory.
struct SimilarityPlan {
    int band_rows = 0;     // rows of the current map per block
    int bands = 0;         // ceil(pc / band_rows)
    int stage_rows = 0;    // previous-map rows a band may need (with a margin of one)
    int shared_bytes = 0;  // dynamic shared memory per block
    int vec = 1;           // channels per load (16 bytes where alignment allows)
    long long blocks = 0;  // R * H * bands
};

// The plan for these sizes; shared_bytes <= max_shared_bytes, or band_rows == 0 when even one
// row of the current map needs more. `aligned_elems`: the largest power of two (<= 16 bytes of
// elements) that divides c, every stride and both base addresses (in elements).
SimilarityPlan plan_scale_similarity(int rows, int heads, int pn_prev, int pn_cur, int channels,
                                     TokenElem elem, bool normalize, int aligned_elems,
                                     int max_shared_bytes);

// D = sum (k_cur - up(k_prev))^2 into out[0] (float64). `partials` holds plan.blocks floats.
cudaError_t launch_scale_similarity(const SimilarityKeys& prev, const SimilarityKeys& cur,
                                    TokenElem elem, int rows, int heads, int pn_prev, int pn_cur,
                                    int channels, bool normalize, const SimilarityPlan& plan,
                                    float* partials, double* out, cudaStream_t stream);

}  // namespace varscope::kernels::cuda
