// GPU timing for the benchmarks (varscope-cli bench ...): CUDA events around each call on the
// current stream, warm-up first, an L2 flush before every timed call, the median reported. Kept
// in kernels/ so the CLI needs no CUDA headers. Without CUDA kernels every function throws.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace varscope::kernels {

struct CudaDeviceInfo {
    std::string name;
    int sm_count = 0;
    int cc_major = 0, cc_minor = 0;
    long long l2_bytes = 0;
    int runtime_version = 0;  // e.g. 13000
    int driver_version = 0;
};

CudaDeviceInfo cuda_device_info(int device);

struct GpuTiming {
    double median_ms = 0, min_ms = 0, max_ms = 0;
    std::vector<double> samples_ms;
};

// Times fn (which enqueues work on the current CUDA stream of `device`).
GpuTiming time_on_gpu(const std::function<void()>& fn, int device, int warmup, int iterations,
                      bool flush_l2 = true);

}  // namespace varscope::kernels
