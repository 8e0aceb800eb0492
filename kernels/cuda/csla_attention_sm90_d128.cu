// CSLA block-sparse attention on Hopper, head dim 128, bf16 (see csla_attention_sm90.cuh).
#include "kernels/cuda/csla_attention_sm90.cuh"

namespace varscope::kernels::cuda {

cudaError_t launch_csla_sm90_d128_bf16(const AttentionParams& p, cudaStream_t stream) {
    return sm90::launch_csla_sm90<128>(p, stream);
}

int sm90_ws_fallback_count() {
    return sm90::ws_fallbacks().load();
}

}  // namespace varscope::kernels::cuda
