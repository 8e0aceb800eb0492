// The fused DiffLoss-head kernels for bf16 weights and activations (diffloss_kernel.cuh).
#include "kernels/cuda/diffloss_kernel.cuh"

namespace varscope::kernels::cuda {

cudaError_t launch_diff_linear_bf16(const DiffLinearParams& p, cudaStream_t stream) {
    return diffloss::launch_linear<__nv_bfloat16>(p, stream);
}

cudaError_t launch_diff_final_bf16(const DiffFinalParams& p, cudaStream_t stream) {
    return diffloss::launch_final<__nv_bfloat16>(p, stream);
}

cudaError_t launch_diff_apply_bf16(const DiffApplyParams& p, cudaStream_t stream) {
    return diffloss::launch_apply<__nv_bfloat16>(p, stream);
}

}  // namespace varscope::kernels::cuda
