// CSLA block-sparse attention on Hopper, head dim 64, bf16 (see csla_attention_sm90.cuh).
#include "kernels/cuda/csla_attention_sm90.cuh"

namespace varscope::kernels::cuda {

cudaError_t launch_csla_sm90_d64_bf16(const AttentionParams& p, cudaStream_t stream) {
    return sm90::launch_csla_sm90<64>(p, stream);
}

}  // namespace varscope::kernels::cuda
