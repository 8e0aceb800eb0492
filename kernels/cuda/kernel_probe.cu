// A trivial kernel compiled with the same architectures as the attention kernels: asking the
// runtime for its attributes tells whether this binary has an image for the current device.
#include <cuda_runtime_api.h>

namespace varscope::kernels::cuda {

__global__ void kernel_image_probe() {}

cudaError_t probe_kernel_image() {
    cudaFuncAttributes attributes;
    return cudaFuncGetAttributes(&attributes, kernel_image_probe);
}

}  // namespace varscope::kernels::cuda
