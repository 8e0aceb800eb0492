// Device memory of the CUDA caching allocator, for benchmark reports (peak memory per method).
// Kept in kernels/ because it needs the CUDA headers; without CUDA kernels it reports zeros.
#pragma once

#include <cstdint>

namespace varscope::kernels {

struct DeviceMemory {
    int64_t allocated = 0;       // bytes in live tensors now
    int64_t peak_allocated = 0;  // most bytes in live tensors since the last reset
    int64_t reserved = 0;        // bytes the allocator holds from the driver
};

DeviceMemory cuda_memory(int device);
// Bytes the driver reports free on `device` (cudaMemGetInfo); -1 without CUDA kernels or on
// an error (no such device).
int64_t cuda_free_memory(int device);
// The device's whole memory in bytes (what set_cuda_memory_fraction's share is of); -1 as
// cuda_free_memory.
int64_t cuda_total_memory(int device);
// Bytes new tensors could still get on `device`: what the driver has free plus what the caching
// allocator holds unused, within the share set by set_cuda_memory_fraction; -1 as
// cuda_free_memory. For deciding what to release before a big allocation, not a promise
// (fragmentation, other processes).
int64_t cuda_available_memory(int device);
void reset_cuda_peak_memory(int device);
// Caps the caching allocator's share of `device`'s memory for this process (0 < fraction <= 1):
// allocations beyond it fail as out of memory (sharing a GPU; injecting that fault). No-op
// without CUDA kernels.
void set_cuda_memory_fraction(int device, double fraction);
void empty_cuda_cache();

}  // namespace varscope::kernels
