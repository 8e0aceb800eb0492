// out = o + the cache resampled by two taps per row and column (kernels/upsample_add.h). One
// thread per output element, channels fastest, so the cache's four reads and o's read coalesce;
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

template <typename T>
__global__ void upsample_add_kernel(const UpsampleAddParams p) {
    const long long n = static_cast<long long>(p.batch) * p.heads * p.side * p.side * p.channels;
    const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int c = static_cast<int>(i % p.channels);
    long long rest = i / p.channels;
    const int v = static_cast<int>(rest % p.side);
    rest /= p.side;
    const int u = static_cast<int>(rest % p.side);
    rest /= p.side;
    const int h = static_cast<int>(rest % p.heads);
    const int b = static_cast<int>(rest / p.heads);
    const float* cache = p.cache +
                         (static_cast<long long>(b) * p.heads + h) * p.grid * p.grid *
                             static_cast<long long>(p.channels) +
                         c;
    const long long r0 = p.tap_ids[2 * u], r1 = p.tap_ids[2 * u + 1];
    const long long c0 = p.tap_ids[2 * v], c1 = p.tap_ids[2 * v + 1];
    const float wr0 = p.tap_weights[2 * u], wr1 = p.tap_weights[2 * u + 1];
    const float wc0 = p.tap_weights[2 * v], wc1 = p.tap_weights[2 * v + 1];
    auto at = [&](long long r, long long col) { return cache[(r * p.grid + col) * p.channels]; };
    const float a0 = __fadd_rn(__fmul_rn(at(r0, c0), wr0), __fmul_rn(at(r1, c0), wr1));
    const float a1 = __fadd_rn(__fmul_rn(at(r0, c1), wr0), __fmul_rn(at(r1, c1), wr1));
    const float up = __fadd_rn(__fmul_rn(a0, wc0), __fmul_rn(a1, wc1));
    const long long row = static_cast<long long>(u) * p.side + v;
    const T* o = static_cast<const T*>(p.o) + b * p.o_stride[0] + h * p.o_stride[1] +
                 row * p.o_stride[2] + c;
    T* out = static_cast<T*>(p.out) + i;
    store(out, __fadd_rn(load(o), up));
}

}  // namespace

cudaError_t launch_upsample_add(const UpsampleAddParams& p, cudaStream_t stream) {
    const long long n = static_cast<long long>(p.batch) * p.heads * p.side * p.side * p.channels;
    if (n == 0) return cudaSuccess;
    const auto blocks = static_cast<unsigned>((n + 255) / 256);
    switch (p.elem) {
        case TokenElem::Float32:
            upsample_add_kernel<float><<<blocks, 256, 0, stream>>>(p);
            break;
        case TokenElem::Float16:
            upsample_add_kernel<__half><<<blocks, 256, 0, stream>>>(p);
            break;
        case TokenElem::BFloat16:
            upsample_add_kernel<__nv_bfloat16><<<blocks, 256, 0, stream>>>(p);
            break;
    }
    return cudaGetLastError();
}

}  // namespace varscope::kernels::cuda
