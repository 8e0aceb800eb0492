// AdaLN's modulation of a normalised fp32 stream and the cast to bf16 that the next matrix
// product makes, in one pass: bf16(x * scale + shift). Bitwise what the ATen composition does
// (x.mul(scale).add_(shift), then .to(bf16) in the linear): the product and the sum are two
// IEEE fp32 operations (the intrinsics keep nvcc from contracting them into an FMA) and the
// bf16 rounding is round-to-nearest-even, as c10::BFloat16 is on the device. It replaces three
// passes over the fp32 stream (two read-writes, one read and a bf16 write) by one read and one
// bf16 write.
#include <cuda_bf16.h>

#include "kernels/alignment.h"
#include "kernels/cuda/modulate_params.h"

namespace varscope::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float modulate(float x, float s, float t) {
    return __fadd_rn(__fmul_rn(x, s), t);
}

__device__ __forceinline__ unsigned bf16_pair(float lo, float hi) {
    const unsigned l = __bfloat16_as_ushort(__float2bfloat16_rn(lo));
    const unsigned h = __bfloat16_as_ushort(__float2bfloat16_rn(hi));
    return l | (h << 16);
}

// One thread per kVec adjacent channels of one token (kVec = 4: 16-byte loads of x, scale and
// shift, an 8-byte store; the launcher checks the alignment).
template <int kVec>
__global__ void __launch_bounds__(kThreads) modulate_bf16_kernel(ModulateParams p) {
    const int64_t groups = p.channels / kVec;
    const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
    if (i >= p.batch * p.tokens * groups) return;
    const int64_t c = (i % groups) * kVec;
    const int64_t row = i / groups;  // (b, l) row-major
    const int64_t b = row / p.tokens;
    const float* x = p.x + row * p.channels + c;
    const float* s = p.scale + b * p.scale_stride_batch + c;
    const float* t = p.shift + b * p.shift_stride_batch + c;
    auto* out = static_cast<__nv_bfloat16*>(p.out) + row * p.channels + c;
    if constexpr (kVec == 4) {
        const float4 xv = *reinterpret_cast<const float4*>(x);
        const float4 sv = *reinterpret_cast<const float4*>(s);
        const float4 tv = *reinterpret_cast<const float4*>(t);
        *reinterpret_cast<uint2*>(out) =
            make_uint2(bf16_pair(modulate(xv.x, sv.x, tv.x), modulate(xv.y, sv.y, tv.y)),
                       bf16_pair(modulate(xv.z, sv.z, tv.z), modulate(xv.w, sv.w, tv.w)));
    } else {
        out[0] = __float2bfloat16_rn(modulate(x[0], s[0], t[0]));
    }
}

template <int kVec>
cudaError_t launch(const ModulateParams& p, cudaStream_t stream) {
    const int64_t threads = p.batch * p.tokens * (p.channels / kVec);
    const int64_t blocks = (threads + kThreads - 1) / kThreads;
    if (blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
    modulate_bf16_kernel<kVec><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
    return cudaGetLastError();
}

}  // namespace

cudaError_t launch_modulate_bf16(const ModulateParams& p, cudaStream_t stream) {
    if (p.batch * p.tokens * p.channels == 0) return cudaSuccess;
    const bool vec4 = p.channels % 4 == 0 && aligned(p.x, 16) && aligned(p.scale, 16) &&
                      aligned(p.shift, 16) && aligned(p.out, 8) && p.scale_stride_batch % 4 == 0 &&
                      p.shift_stride_batch % 4 == 0;
    return vec4 ? launch<4>(p, stream) : launch<1>(p, stream);
}

}  // namespace varscope::kernels::cuda
