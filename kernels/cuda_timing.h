// GPU timing for the benchmarks (varscope-cli bench ...): CUDA events around each call on the
// current stream, warm-up first, an L2 flush before every timed call, the median reported. Kept
// in kernels/ so the CLI needs no CUDA headers. Without CUDA kernels every function throws.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kernels/gpu_clocks.h"

namespace varscope::kernels {

struct CudaDeviceInfo {
    std::string name;
    int sm_count = 0;
    int cc_major = 0, cc_minor = 0;
    long long l2_bytes = 0;
    int runtime_version = 0;  // e.g. 13000
    int driver_version = 0;
    std::string pci_bus_id;  // e.g. "0000:00:06.0" (NVML finds the same GPU by it)
};

CudaDeviceInfo cuda_device_info(int device);

struct GpuTiming {
    double median_ms = 0, min_ms = 0, max_ms = 0;
    std::vector<double> samples_ms;
};

// Times fn (which enqueues work on the current CUDA stream of `device`).
GpuTiming time_on_gpu(const std::function<void()>& fn, int device, int warmup, int iterations,
                      bool flush_l2 = true);

struct GpuHold {
    std::optional<ClockSummary> clocks;  // none where no sample fell in the kept window
    int calls = 0;
    double seconds = 0;
};

// Runs fn back to back, each call after the same L2 flush as time_on_gpu, enqueueing for about
// `seconds`, then waits for the GPU. Returns the clock and power the sampler read after the first
// 40 % of the hold (the power controller settles within milliseconds).
GpuHold hold_on_gpu(const std::function<void()>& fn, int device, double seconds, bool flush_l2,
                    GpuClockSampler& sampler);

}  // namespace varscope::kernels
