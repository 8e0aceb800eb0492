// A residual branch's gate and its sum into the fp32 stream in one pass: x + p(y * gamma), y the
// bf16 output of the branch's last product, gamma AdaLN's gate (fp32 or bf16), p the bf16 rounding
// where ATen's product has a bf16 result (a bf16 gate, or the official in-place x_sa.mul_(gamma1)
// under autocast) and none where it is fp32. Bitwise what the ATen composition does: the product
// and the sum are two IEEE fp32 operations (the intrinsics keep nvcc from contracting them into an
// FMA), the rounding is round-to-nearest-even as c10::BFloat16's. One read of y and x and one
// write, where ATen wrote and read the product again (and, rounded, once more).
#include <cuda_bf16.h>

#include "kernels/cuda/gated_residual_params.h"

namespace varscope::kernels::cuda {
namespace {

constexpr int kThreads = 256;

template <GammaType kGamma>
__device__ __forceinline__ float gamma_at(const void* g, int64_t i) {
    if constexpr (kGamma == GammaType::Float32)
        return static_cast<const float*>(g)[i];
    else
        return __bfloat162float(static_cast<const __nv_bfloat16*>(g)[i]);
}

template <GammaType kGamma, bool kRound>
__global__ void __launch_bounds__(kThreads) gated_residual_kernel(GatedResidualParams p) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
    const int64_t n = p.batch * p.tokens * p.channels;
    if (i >= n) return;
    const int64_t c = i % p.channels;
    const int64_t b = i / (p.tokens * p.channels);
    const float y = __bfloat162float(static_cast<const __nv_bfloat16*>(p.y)[i]);
    float prod = __fmul_rn(y, gamma_at<kGamma>(p.gamma, b * p.gamma_stride_batch + c));
    if constexpr (kRound) prod = __bfloat162float(__float2bfloat16_rn(prod));
    p.out[i] = __fadd_rn(p.x[i], prod);
}

template <GammaType kGamma>
cudaError_t launch(const GatedResidualParams& p, cudaStream_t stream) {
    const int64_t n = p.batch * p.tokens * p.channels;
    const int64_t blocks = (n + kThreads - 1) / kThreads;
    if (blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
    if (p.round_product)
        gated_residual_kernel<kGamma, true>
            <<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
    else
        gated_residual_kernel<kGamma, false>
            <<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
    return cudaGetLastError();
}

}  // namespace

cudaError_t launch_gated_residual(const GatedResidualParams& p, cudaStream_t stream) {
    if (p.batch * p.tokens * p.channels == 0) return cudaSuccess;
    return p.gamma_type == GammaType::Float32 ? launch<GammaType::Float32>(p, stream)
                                              : launch<GammaType::BFloat16>(p, stream);
}

}  // namespace varscope::kernels::cuda
