#include "kernels/memory_stats.h"

#ifdef VARSCOPE_KERNELS_CUDA
#include <ATen/ATen.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <mutex>
#endif

namespace varscope::kernels {

#ifdef VARSCOPE_KERNELS_CUDA
namespace alloc = c10::cuda::CUDACachingAllocator;

namespace {
// The shares set by set_cuda_memory_fraction (the allocator enforces them but does not report
// them back).
std::mutex fraction_mutex;
std::map<int, double> fractions;

// cudaMemGetInfo on `device`; false (and the error cleared for later calls) when it fails.
bool memory_info(int device, size_t& free, size_t& total) {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    if (cudaMemGetInfo(&free, &total) == cudaSuccess) return true;
    (void)cudaGetLastError();  // clear the sticky-free error state for later calls
    return false;
}

// The caching allocator sizes its per-device state when ATen initialises CUDA (the first CUDA
// tensor); reading or resetting its statistics before that throws "Invalid device argument"
// (session 37: a test whose first CUDA call was cuda_memory). Nothing to do without a device.
void init_allocator() {
    if (c10::cuda::device_count() > 0) at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
}
}  // namespace

DeviceMemory cuda_memory(int device) {
    init_allocator();
    const auto stats = alloc::getDeviceStats(static_cast<c10::DeviceIndex>(device));
    const auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    DeviceMemory m;
    m.allocated = stats.allocated_bytes[all].current;
    m.peak_allocated = stats.allocated_bytes[all].peak;
    m.reserved = stats.reserved_bytes[all].current;
    return m;
}

int64_t cuda_free_memory(int device) {
    size_t free = 0, total = 0;
    return memory_info(device, free, total) ? static_cast<int64_t>(free) : -1;
}

int64_t cuda_total_memory(int device) {
    size_t free = 0, total = 0;
    return memory_info(device, free, total) ? static_cast<int64_t>(total) : -1;
}

int64_t cuda_available_memory(int device) {
    size_t free = 0, total = 0;
    if (!memory_info(device, free, total)) return -1;
    const DeviceMemory m = cuda_memory(device);
    int64_t available = static_cast<int64_t>(free) + (m.reserved - m.allocated);
    double fraction = 1.0;
    {
        const std::lock_guard<std::mutex> lock(fraction_mutex);
        if (const auto it = fractions.find(device); it != fractions.end()) fraction = it->second;
    }
    if (fraction < 1.0) {
        const auto cap = static_cast<int64_t>(fraction * static_cast<double>(total));
        available = std::min(available, cap - m.allocated);
    }
    return std::max<int64_t>(available, 0);
}

void set_cuda_memory_fraction(int device, double fraction) {
    // The allocator exists once CUDA is initialised (ATen does that on the first CUDA tensor).
    (void)at::empty({1},
                    at::TensorOptions().device(at::kCUDA, static_cast<c10::DeviceIndex>(device)));
    alloc::setMemoryFraction(fraction, static_cast<c10::DeviceIndex>(device));
    const std::lock_guard<std::mutex> lock(fraction_mutex);
    fractions[device] = fraction;
}

void reset_cuda_peak_memory(int device) {
    init_allocator();
    alloc::resetPeakStats(static_cast<c10::DeviceIndex>(device));
}

void empty_cuda_cache() {
    alloc::emptyCache();  // before CUDA's initialisation: nothing cached, nothing to do
}
#else
DeviceMemory cuda_memory(int) {
    return {};
}
int64_t cuda_free_memory(int) {
    return -1;
}
int64_t cuda_total_memory(int) {
    return -1;
}
int64_t cuda_available_memory(int) {
    return -1;
}
void reset_cuda_peak_memory(int) {}
void set_cuda_memory_fraction(int, double) {}
void empty_cuda_cache() {}
#endif

}  // namespace varscope::kernels
