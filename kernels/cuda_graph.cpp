#include "kernels/cuda_graph.h"

#include <c10/util/Exception.h>

#ifdef VARSCOPE_KERNELS_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <map>
#include <mutex>
#include <vector>
#endif

namespace varscope::kernels {

#ifdef VARSCOPE_KERNELS_CUDA
struct CudaGraph::Impl {
    at::cuda::CUDAGraph graph;
    bool captured = false;
    size_t kernel_nodes = 0, nodes = 0;
};

namespace {
// One capture stream per device for the whole process (as torch.cuda.graph does), so the
// cuBLAS workspace and other per-stream state are created once, by the warm-up.
c10::cuda::CUDAStream capture_stream(c10::DeviceIndex dev) {
    static std::mutex mutex;
    static std::map<c10::DeviceIndex, c10::cuda::CUDAStream> streams;
    const std::lock_guard<std::mutex> lock(mutex);
    auto it = streams.find(dev);
    if (it == streams.end())
        it = streams.emplace(dev, c10::cuda::getStreamFromPool(false, dev)).first;
    return it->second;
}
}  // namespace

bool cuda_graphs_built() {
    return true;
}

void run_on_capture_stream(int device, const std::function<void()>& fn) {
    const auto dev = static_cast<c10::DeviceIndex>(device);
    const c10::cuda::CUDAGuard device_guard(dev);
    const auto current = c10::cuda::getCurrentCUDAStream(dev);
    const auto side = capture_stream(dev);
    at::cuda::CUDAEvent ready;
    ready.record(current);
    ready.block(side);
    {
        const c10::cuda::CUDAStreamGuard stream_guard(side);
        fn();
    }
    at::cuda::CUDAEvent done;
    done.record(side);
    done.block(current);
}

// The graph object is made at capture, under the device's guard: made earlier it would touch
// CUDA (a set of graphs is built before any capture, also where no driver is present).
CudaGraph::CudaGraph() = default;
CudaGraph::~CudaGraph() = default;

void CudaGraph::capture(int device, const std::function<void()>& fn,
                        const CudaGraph* share_memory_with) {
    TORCH_CHECK(!captured(), "CudaGraph: already captured");
    TORCH_CHECK(share_memory_with == nullptr || share_memory_with->captured(),
                "CudaGraph: the graph to share memory with is not captured");
    const auto dev = static_cast<c10::DeviceIndex>(device);
    const c10::cuda::CUDAGuard device_guard(dev);
    // Capture needs a stream other than the legacy default stream; work already queued on the
    // current stream does not matter (capture runs nothing).
    const c10::cuda::CUDAStreamGuard stream_guard(capture_stream(dev));
    if (!impl_) impl_ = std::make_unique<Impl>();
    // Thread-local mode: other threads (a GUI, say) may keep using CUDA meanwhile.
    const at::cuda::MempoolId_t pool =
        share_memory_with ? share_memory_with->impl_->graph.pool() : at::cuda::MempoolId_t{0, 0};
    impl_->graph.capture_begin(pool, cudaStreamCaptureModeThreadLocal);
    try {
        fn();
        // Count the nodes of the graph being built (the instantiated graph is not kept).
        cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
        cudaGraph_t g = nullptr;
        const auto stream = c10::cuda::getCurrentCUDAStream(dev).stream();
        if (cudaStreamGetCaptureInfo(stream, &status, nullptr, &g) == cudaSuccess &&
            status == cudaStreamCaptureStatusActive && g != nullptr) {
            size_t n = 0;
            if (cudaGraphGetNodes(g, nullptr, &n) == cudaSuccess) {
                std::vector<cudaGraphNode_t> all(n);
                if (n > 0 && cudaGraphGetNodes(g, all.data(), &n) == cudaSuccess) {
                    impl_->nodes = n;
                    impl_->kernel_nodes = 0;
                    for (auto node : all) {
                        cudaGraphNodeType type;
                        if (cudaGraphNodeGetType(node, &type) == cudaSuccess &&
                            type == cudaGraphNodeTypeKernel)
                            ++impl_->kernel_nodes;
                    }
                }
            }
        }
    } catch (...) {
        // End the capture so the stream is usable again; the partial graph is dropped.
        try {
            impl_->graph.capture_end();
        } catch (...) {
        }
        throw;
    }
    impl_->graph.capture_end();
    impl_->captured = true;
}

void CudaGraph::replay() {
    TORCH_CHECK(captured(), "CudaGraph: replay before capture");
    impl_->graph.replay();
}

bool CudaGraph::captured() const {
    return impl_ && impl_->captured;
}
size_t CudaGraph::kernel_nodes() const {
    return impl_ ? impl_->kernel_nodes : 0;
}
size_t CudaGraph::nodes() const {
    return impl_ ? impl_->nodes : 0;
}
#else
struct CudaGraph::Impl {};

bool cuda_graphs_built() {
    return false;
}

void run_on_capture_stream(int, const std::function<void()>& fn) {
    fn();
}

CudaGraph::CudaGraph() = default;
CudaGraph::~CudaGraph() = default;

void CudaGraph::capture(int, const std::function<void()>&, const CudaGraph*) {
    TORCH_CHECK(false, "CUDA graphs need a build with CUDA kernels");
}

void CudaGraph::replay() {
    TORCH_CHECK(false, "CUDA graphs need a build with CUDA kernels");
}

bool CudaGraph::captured() const {
    return false;
}
size_t CudaGraph::kernel_nodes() const {
    return 0;
}
size_t CudaGraph::nodes() const {
    return 0;
}
#endif

}  // namespace varscope::kernels
