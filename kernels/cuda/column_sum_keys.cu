// The keys-major column-sum kernel's instances (column_sum_keys.cuh): head dims 64 and 128,
// bf16 and fp16.
#include "kernels/cuda/column_sum_keys.cuh"

namespace varscope::kernels::cuda {

cudaError_t launch_column_sum_keys(const AttentionParams& p, int head_dim, bool bf16,
                                   cudaStream_t stream) {
    if (head_dim == 64)
        return bf16 ? launch_column_sum_keys_for<64, __nv_bfloat16>(p, stream)
                    : launch_column_sum_keys_for<64, __half>(p, stream);
    if (head_dim == 128)
        return bf16 ? launch_column_sum_keys_for<128, __nv_bfloat16>(p, stream)
                    : launch_column_sum_keys_for<128, __half>(p, stream);
    return cudaErrorNotSupported;
}

}  // namespace varscope::kernels::cuda
