// Attention kernels for head dim 128, bf16: one file per variant so they compile in parallel.
#include "kernels/cuda/attention_kernel.cuh"

namespace varscope::kernels::cuda {

cudaError_t launch_attention_d128_bf16(const AttentionParams& p, TileMode mode, Epilogue epi,
                                       cudaStream_t stream) {
    return launch_attention_for<AttentionTraits<128, __nv_bfloat16>>(p, mode, epi, stream);
}

}  // namespace varscope::kernels::cuda
