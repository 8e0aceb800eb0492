// The fused DiffLoss-head kernels for fp16 weights and activations (diffloss_kernel.cuh).
#include "kernels/cuda/diffloss_kernel.cuh"

namespace varscope::kernels::cuda {

cudaError_t launch_diff_linear_fp16(const DiffLinearParams& p, cudaStream_t stream) {
    return diffloss::launch_linear<__half>(p, stream);
}

cudaError_t launch_diff_final_fp16(const DiffFinalParams& p, cudaStream_t stream) {
    return diffloss::launch_final<__half>(p, stream);
}

cudaError_t launch_diff_apply_fp16(const DiffApplyParams& p, cudaStream_t stream) {
    return diffloss::launch_apply<__half>(p, stream);
}

}  // namespace varscope::kernels::cuda
