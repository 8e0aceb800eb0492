// CSLA block-sparse attention on Hopper, head dim 128, bf16 (see csla_attention_sm90.cuh).
#include "kernels/cuda/csla_attention_sm90.cuh"

namespace varscope::kernels::cuda {

cudaError_t launch_csla_sm90_d128_bf16(const AttentionParams& p, int impl, cudaStream_t stream) {
    return sm90::launch_sm90_impl<128, false>(p, impl, stream);
}

#ifdef VARSCOPE_SM90_TRACE
// Probe only: where the persistent kernels of this translation unit write their timeline.
cudaError_t set_sm90_trace_d128(unsigned long long* buffer) {
    return cudaMemcpyToSymbol(sm90::g_trace, &buffer, sizeof buffer);
}
#endif

int sm90_ws_fallback_count() {
    return sm90::ws_fallbacks().load();
}

}  // namespace varscope::kernels::cuda
