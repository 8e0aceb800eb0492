#include "kernels/part_timer.h"

#include <c10/util/Exception.h>

#include <chrono>

#ifdef VARSCOPE_KERNELS_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace varscope::kernels {

struct PartTimer::Impl {
    int device = 0;
    std::vector<int> labels;
    std::vector<std::chrono::steady_clock::time_point> stamps;  // kHost
#ifdef VARSCOPE_KERNELS_CUDA
    std::vector<cudaEvent_t> events;
    ~Impl() {
        for (auto e : events) cudaEventDestroy(e);
    }
#endif
    bool host() const {
        return device == kHost;
    }
};

PartTimer::PartTimer(int device) : impl_(std::make_unique<Impl>()) {
    impl_->device = device;
}
PartTimer::~PartTimer() = default;

void PartTimer::mark(int label) {
    auto& im = *impl_;
    if (!im.labels.empty() && im.labels.back() == label) return;
    if (im.host()) {
        im.stamps.push_back(std::chrono::steady_clock::now());
        im.labels.push_back(label);
        return;
    }
#ifdef VARSCOPE_KERNELS_CUDA
    const auto dev = static_cast<c10::DeviceIndex>(im.device);
    const c10::cuda::CUDAGuard guard(dev);
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(dev).stream();
    cudaEvent_t e = nullptr;
    TORCH_CHECK(cudaEventCreate(&e) == cudaSuccess, "PartTimer: cudaEventCreate failed");
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    TORCH_CHECK(cudaStreamIsCapturing(stream, &status) == cudaSuccess,
                "PartTimer: cudaStreamIsCapturing failed");
    // External: a node of the graph being captured, recorded by each replay (a plain record
    // would only order streams inside the capture).
    const cudaError_t err = status == cudaStreamCaptureStatusActive
                                ? cudaEventRecordWithFlags(e, stream, cudaEventRecordExternal)
                                : cudaEventRecord(e, stream);
    if (err != cudaSuccess) {
        cudaEventDestroy(e);
        TORCH_CHECK(false, "PartTimer: recording an event failed: ", cudaGetErrorString(err));
    }
    im.events.push_back(e);
    im.labels.push_back(label);
#endif
}

size_t PartTimer::marks() const {
    return impl_->labels.size();
}

bool PartTimer::accumulate(std::vector<double>& out) const {
    const auto& im = *impl_;
#ifndef VARSCOPE_KERNELS_CUDA
    if (!im.host()) return false;  // a CUDA device without the kernels: nothing was recorded
#endif
    std::vector<double> add(out.size(), 0.0);
    for (size_t i = 1; i < im.labels.size(); ++i) {
        const int label = im.labels[i - 1];
        if (label < 0) continue;
        double ms = 0.0;
        if (im.host()) {
            ms = std::chrono::duration<double, std::milli>(im.stamps[i] - im.stamps[i - 1]).count();
        } else {
#ifdef VARSCOPE_KERNELS_CUDA
            float elapsed = 0.0f;
            if (cudaEventElapsedTime(&elapsed, im.events[i - 1], im.events[i]) != cudaSuccess) {
                cudaGetLastError();  // reset the error state so later CUDA calls do not report it
                return false;
            }
            ms = elapsed;
#endif
        }
        if (add.size() <= static_cast<size_t>(label)) add.resize(label + 1, 0.0);
        add[label] += ms;
    }
    if (out.size() < add.size()) out.resize(add.size(), 0.0);
    for (size_t i = 0; i < add.size(); ++i) out[i] += add[i];
    return true;
}

}  // namespace varscope::kernels
