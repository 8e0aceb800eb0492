#include "kernels/cuda_timing.h"

#include <ATen/ATen.h>

#ifdef VARSCOPE_KERNELS_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

#include <algorithm>

namespace varscope::kernels {

#ifdef VARSCOPE_KERNELS_CUDA
namespace {
void check(cudaError_t err, const char* what) {
    TORCH_CHECK(err == cudaSuccess, "CUDA error in ", what, ": ", cudaGetErrorString(err));
}
}  // namespace

CudaDeviceInfo cuda_device_info(int device) {
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    CudaDeviceInfo info;
    info.name = prop.name;
    info.sm_count = prop.multiProcessorCount;
    info.cc_major = prop.major;
    info.cc_minor = prop.minor;
    info.l2_bytes = prop.l2CacheSize;
    check(cudaRuntimeGetVersion(&info.runtime_version), "cudaRuntimeGetVersion");
    check(cudaDriverGetVersion(&info.driver_version), "cudaDriverGetVersion");
    char bus_id[32] = {};
    if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, device) == cudaSuccess)
        info.pci_bus_id = bus_id;
    return info;
}

namespace {
// Writing a buffer twice the L2 size before a call evicts whatever the previous call left there.
// An undefined tensor where no flush is wanted.
at::Tensor l2_flush_buffer(int device, bool wanted) {
    if (!wanted) return {};
    const auto bytes = std::max<long long>(cuda_device_info(device).l2_bytes * 2, 1 << 20);
    return at::empty({bytes}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA, device));
}
void flush_before_call(const at::Tensor& buffer, int call, cudaStream_t stream) {
    if (buffer.defined())
        check(cudaMemsetAsync(buffer.data_ptr(), call & 0xff, buffer.numel(), stream), "flush");
}
}  // namespace

GpuTiming time_on_gpu(const std::function<void()>& fn, int device, int warmup, int iterations,
                      bool flush_l2) {
    TORCH_CHECK(iterations > 0, "iterations must be positive");
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device).stream();
    const at::Tensor flush = l2_flush_buffer(device, flush_l2);
    for (int i = 0; i < warmup; ++i) fn();
    check(cudaStreamSynchronize(stream), "warm-up");
    std::vector<cudaEvent_t> starts(iterations), stops(iterations);
    for (int i = 0; i < iterations; ++i) {
        check(cudaEventCreate(&starts[i]), "cudaEventCreate");
        check(cudaEventCreate(&stops[i]), "cudaEventCreate");
    }
    for (int i = 0; i < iterations; ++i) {
        flush_before_call(flush, i, stream);
        check(cudaEventRecord(starts[i], stream), "cudaEventRecord");
        fn();
        check(cudaEventRecord(stops[i], stream), "cudaEventRecord");
    }
    check(cudaStreamSynchronize(stream), "timed runs");
    GpuTiming t;
    for (int i = 0; i < iterations; ++i) {
        float ms = 0;
        check(cudaEventElapsedTime(&ms, starts[i], stops[i]), "cudaEventElapsedTime");
        t.samples_ms.push_back(ms);
        cudaEventDestroy(starts[i]);
        cudaEventDestroy(stops[i]);
    }
    auto sorted = t.samples_ms;
    std::sort(sorted.begin(), sorted.end());
    t.min_ms = sorted.front();
    t.max_ms = sorted.back();
    const size_t n = sorted.size();
    t.median_ms = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
    return t;
}

GpuHold hold_on_gpu(const std::function<void()>& fn, int device, double seconds, bool flush_l2,
                    GpuClockSampler& sampler) {
    TORCH_CHECK(seconds > 0, "the hold must last more than 0 s");
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device).stream();
    const at::Tensor flush = l2_flush_buffer(device, flush_l2);
    // At most kInFlight calls queued (each waits for the call kInFlight before it), so the GPU
    // never idles and the hold ends close to `seconds` instead of after a long queue drains.
    constexpr int kInFlight = 32;
    std::vector<cudaEvent_t> done(kInFlight);
    for (auto& e : done) check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "event");
    struct Cleanup {  // the sampler stops and the events go, also when fn throws
        GpuClockSampler& sampler;
        std::vector<cudaEvent_t>& events;
        ~Cleanup() {
            sampler.stop();
            for (auto e : events) cudaEventDestroy(e);
        }
    } cleanup{sampler, done};
    check(cudaStreamSynchronize(stream), "before the hold");
    GpuHold h;
    sampler.start();
    const double t0 = clock_seconds_now();
    while (clock_seconds_now() - t0 < seconds) {
        cudaEvent_t& slot = done[h.calls % kInFlight];
        if (h.calls >= kInFlight) check(cudaEventSynchronize(slot), "the hold");
        flush_before_call(flush, h.calls, stream);
        fn();
        check(cudaEventRecord(slot, stream), "cudaEventRecord");
        ++h.calls;
    }
    check(cudaStreamSynchronize(stream), "the hold");
    const double t1 = clock_seconds_now();
    h.seconds = t1 - t0;
    h.clocks = summarize_clock_samples(sampler.stop(), t0 + 0.4 * (t1 - t0), t1);
    return h;
}
#else
CudaDeviceInfo cuda_device_info(int) {
    TORCH_CHECK(false, "this build has no CUDA kernels");
}
GpuTiming time_on_gpu(const std::function<void()>&, int, int, int, bool) {
    TORCH_CHECK(false, "this build has no CUDA kernels");
}
GpuHold hold_on_gpu(const std::function<void()>&, int, double, bool, GpuClockSampler&) {
    TORCH_CHECK(false, "this build has no CUDA kernels");
}
#endif

}  // namespace varscope::kernels
