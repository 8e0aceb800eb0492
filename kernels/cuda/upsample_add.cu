// out = o + the cache resampled by two taps per row and column (kernels/upsample_add.h). Threads
// run over the output with the channels fastest, so the cache's four reads and o's coalesce;
// every product and sum rounded on its own (__fmul_rn / __fadd_rn: no contraction into FMAs),
// as the LibTorch reference computes them.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/upsample_add_params.h"

namespace varscope::kernels::cuda {
namespace {

__device__ __forceinline__ float load(const float* p) {
    return *p;
}
__device__ __forceinline__ float load(const __half* p) {
    return __half2float(*p);
}
__device__ __forceinline__ float load(const __nv_bfloat16* p) {
    return __bfloat162float(*p);
}
__device__ __forceinline__ void store(float* p, float v) {
    *p = v;
}
__device__ __forceinline__ void store(__half* p, float v) {
    *p = __float2half_rn(v);
}
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) {
    *p = __float2bfloat16_rn(v);
}

// VEC consecutive channels per thread (4 where the channels and o's strides allow: one 16-byte
// cache load per tap), 32-bit index math (the dispatch keeps every tensor under 2^31 elements).
template <typename T, int VEC, bool kDiff>
__global__ void upsample_add_kernel(const UpsampleAddParams p) {
    const int groups = p.channels / VEC;
    const int n = p.batch * p.heads * p.side * p.side * groups;
    const int i = static_cast<int>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int c = (i % groups) * VEC;
    int rest = i / groups;
    const int v = rest % p.side;
    rest /= p.side;
    const int u = rest % p.side;
    const int bh = rest / p.side, b = bh / p.heads, h = bh % p.heads;
    const float* cache =
        kDiff ? nullptr : p.cache + static_cast<long long>(bh) * p.grid * p.grid * p.channels + c;
    const int r0 = static_cast<int>(p.tap_ids[2 * u]), r1 = static_cast<int>(p.tap_ids[2 * u + 1]);
    const int c0 = static_cast<int>(p.tap_ids[2 * v]), c1 = static_cast<int>(p.tap_ids[2 * v + 1]);
    const float wr0 = p.tap_weights[2 * u], wr1 = p.tap_weights[2 * u + 1];
    const float wc0 = p.tap_weights[2 * v], wc1 = p.tap_weights[2 * v + 1];
    float x[4][VEC];  // (r0, c0), (r1, c0), (r0, c1), (r1, c1)
    const int cells[4] = {r0 * p.grid + c0, r1 * p.grid + c0, r0 * p.grid + c1, r1 * p.grid + c1};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        if constexpr (kDiff) {
            // The residual's cell as at::sub(dense.to(float), sparse) forms it.
            const T* d = static_cast<const T*>(p.dense) + b * p.dense_stride[0] +
                         h * p.dense_stride[1] + cells[k] * p.dense_stride[2] + c;
            const T* s = static_cast<const T*>(p.sparse) + b * p.sparse_stride[0] +
                         h * p.sparse_stride[1] + cells[k] * p.sparse_stride[2] + c;
#pragma unroll
            for (int j = 0; j < VEC; ++j) x[k][j] = __fsub_rn(load(d + j), load(s + j));
        } else if constexpr (VEC == 4) {
            const float* src = cache + static_cast<long long>(cells[k]) * p.channels;
            const float4 q = *reinterpret_cast<const float4*>(src);
            x[k][0] = q.x;
            x[k][1] = q.y;
            x[k][2] = q.z;
            x[k][3] = q.w;
        } else {
            x[k][0] = cache[static_cast<long long>(cells[k]) * p.channels];
        }
    }
    const long long row = static_cast<long long>(u) * p.side + v;
    const T* o = static_cast<const T*>(p.o) + b * p.o_stride[0] + h * p.o_stride[1] +
                 row * p.o_stride[2] + c;
    T* out = static_cast<T*>(p.out) + static_cast<long long>(i) * VEC;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
        const float a0 = __fadd_rn(__fmul_rn(x[0][j], wr0), __fmul_rn(x[1][j], wr1));
        const float a1 = __fadd_rn(__fmul_rn(x[2][j], wr0), __fmul_rn(x[3][j], wr1));
        const float up = __fadd_rn(__fmul_rn(a0, wc0), __fmul_rn(a1, wc1));
        store(out + j, __fadd_rn(load(o + j), up));
    }
}

template <typename T>
cudaError_t launch_for(const UpsampleAddParams& p, cudaStream_t stream) {
    const bool vec = p.vec4;
    const long long n = static_cast<long long>(p.batch) * p.heads * p.side * p.side *
                        (vec ? p.channels / 4 : p.channels);
    const auto blocks = static_cast<unsigned>((n + 255) / 256);
    const bool diff = p.dense != nullptr;
    if (vec && diff)
        upsample_add_kernel<T, 4, true><<<blocks, 256, 0, stream>>>(p);
    else if (vec)
        upsample_add_kernel<T, 4, false><<<blocks, 256, 0, stream>>>(p);
    else if (diff)
        upsample_add_kernel<T, 1, true><<<blocks, 256, 0, stream>>>(p);
    else
        upsample_add_kernel<T, 1, false><<<blocks, 256, 0, stream>>>(p);
    return cudaGetLastError();
}

}  // namespace

cudaError_t launch_upsample_add(const UpsampleAddParams& p, cudaStream_t stream) {
    if (static_cast<long long>(p.batch) * p.heads * p.side * p.side * p.channels == 0)
        return cudaSuccess;
    switch (p.elem) {
        case TokenElem::Float32:
            return launch_for<float>(p, stream);
        case TokenElem::Float16:
            return launch_for<__half>(p, stream);
        case TokenElem::BFloat16:
            return launch_for<__nv_bfloat16>(p, stream);
    }
    return cudaErrorNotSupported;
}

}  // namespace varscope::kernels::cuda
