// CSLA block-sparse attention on Hopper, head dim 64, bf16 (see csla_attention_sm90.cuh).
// Experimental: attention variant 3, opt-in.
#include "kernels/cuda/csla_attention_sm90.cuh"

namespace varscope::kernels::cuda {

cudaError_t launch_csla_sm90_d64_bf16(const AttentionParams& p, int impl, int v_desc_swap,
                                      cudaStream_t stream) {
    return sm90::launch_csla_sm90<64>(p, impl, v_desc_swap, stream);
}

}  // namespace varscope::kernels::cuda
