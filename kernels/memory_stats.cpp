#include "kernels/memory_stats.h"

#ifdef VARSCOPE_KERNELS_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
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
void reset_cuda_peak_memory(int) {}
void empty_cuda_cache() {}
#endif

}  // namespace varscope::kernels
