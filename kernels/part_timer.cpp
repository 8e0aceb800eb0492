#include "kernels/part_timer.h"

#include <c10/util/Exception.h>

#ifdef VARSCOPE_KERNELS_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace varscope::kernels {

#ifdef VARSCOPE_KERNELS_CUDA
struct PartTimer::Impl {
    int device = 0;
    std::vector<cudaEvent_t> events;
    std::vector<int> labels;
    ~Impl() {
        for (auto e : events) cudaEventDestroy(e);
    }
};

PartTimer::PartTimer(int device) : impl_(std::make_unique<Impl>()) {
    impl_->device = device;
}
PartTimer::~PartTimer() = default;

void PartTimer::mark(int label) {
    auto& im = *impl_;
    if (!im.labels.empty() && im.labels.back() == label) return;
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
}

size_t PartTimer::marks() const {
    return impl_->events.size();
}

bool PartTimer::accumulate(std::vector<double>& out) const {
    const auto& im = *impl_;
    std::vector<double> add(out.size(), 0.0);
    for (size_t i = 1; i < im.events.size(); ++i) {
        const int label = im.labels[i - 1];
        if (label < 0) continue;
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, im.events[i - 1], im.events[i]) != cudaSuccess) {
            cudaGetLastError();  // reset the error state so later CUDA calls do not report it
            return false;
        }
        if (add.size() <= static_cast<size_t>(label)) add.resize(label + 1, 0.0);
        add[label] += ms;
    }
    if (out.size() < add.size()) out.resize(add.size(), 0.0);
    for (size_t i = 0; i < add.size(); ++i) out[i] += add[i];
    return true;
}
#else
struct PartTimer::Impl {};
PartTimer::PartTimer(int) : impl_(std::make_unique<Impl>()) {}
PartTimer::~PartTimer() = default;
void PartTimer::mark(int) {}
size_t PartTimer::marks() const {
    return 0;
}
bool PartTimer::accumulate(std::vector<double>&) const {
    return false;
}
#endif

}  // namespace varscope::kernels
