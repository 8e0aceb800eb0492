#include "kernels/memory_stats.h"

#ifdef VARSCOPE_KERNELS_CUDA
#include <ATen/ATen.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

namespace varscope::kernels {

#ifdef VARSCOPE_KERNELS_CUDA
namespace alloc = c10::cuda::CUDACachingAllocator;

DeviceMemory cuda_memory(int device) {
    const auto stats = alloc::getDeviceStats(static_cast<c10::DeviceIndex>(device));
    const auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    DeviceMemory m;
    m.allocated = stats.allocated_bytes[all].current;
    m.peak_allocated = stats.allocated_bytes[all].peak;
    m.reserved = stats.reserved_bytes[all].current;
    return m;
}

int64_t cuda_free_memory(int device) {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
        (void)cudaGetLastError();  // clear the sticky-free error state for later calls
        return -1;
    }
    return static_cast<int64_t>(free);
}

void set_cuda_memory_fraction(int device, double fraction) {
    // The allocator exists once CUDA is initialised (ATen does that on the first CUDA tensor).
    (void)at::empty({1},
                    at::TensorOptions().device(at::kCUDA, static_cast<c10::DeviceIndex>(device)));
    alloc::setMemoryFraction(fraction, static_cast<c10::DeviceIndex>(device));
}

void reset_cuda_peak_memory(int device) {
    alloc::resetPeakStats(static_cast<c10::DeviceIndex>(device));
}

void empty_cuda_cache() {
    alloc::emptyCache();
}
#else
DeviceMemory cuda_memory(int) {
    return {};
}
int64_t cuda_free_memory(int) {
    return -1;
}
void reset_cuda_peak_memory(int) {}
void set_cuda_memory_fraction(int, double) {}
void empty_cuda_cache() {}
#endif

}  // namespace varscope::kernels
