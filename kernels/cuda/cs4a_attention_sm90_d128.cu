// CS4A gathered attention on Hopper, head dim 128, bf16: the CSLA kernel's tile machinery with
// key rows gathered by index (see csla_attention_sm90.cuh).
#include "kernels/cuda/csla_attention_sm90.cuh"

namespace varscope::kernels::cuda {

cudaError_t launch_cs4a_sm90_d128_bf16(const AttentionParams& p, cudaStream_t stream) {
    return sm90::launch_cs4a_sm90<128>(p, stream);
}

}  // namespace varscope::kernels::cuda
