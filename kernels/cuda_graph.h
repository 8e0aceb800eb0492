// A CUDA graph of LibTorch work: capture once, replay many times. Kept in kernels/ (which knows
// whether CUDA is built) so core/ needs no CUDA headers. Without CUDA kernels the class exists
// but capture() throws and cuda_graphs_built() is false.
#pragma once

#include <functional>
#include <memory>

namespace varscope::kernels {

// True when this build can capture CUDA graphs (CUDA kernels enabled).
bool cuda_graphs_built();

// Runs fn eagerly on the stream that CudaGraph::capture uses for `device`, ordered after the
// current stream's work and before what the current stream does next. A warm-up before the
// first capture: it creates the per-stream state (cuBLAS handle and workspace, lazily loaded
// kernels) outside the graph, as torch.cuda.graph's documentation asks.
void run_on_capture_stream(int device, const std::function<void()>& fn);

class CudaGraph {
  public:
    CudaGraph();
    ~CudaGraph();
    CudaGraph(const CudaGraph&) = delete;
    CudaGraph& operator=(const CudaGraph&) = delete;

    // Records the CUDA work `fn` enqueues on `device` (nothing runs yet). fn runs on one side
    // stream per device (the same for every capture), and tensors it allocates come from the
    // graph's private memory pool, so what fn returns stays valid (at fixed addresses) for every
    // replay while it is held. fn must not synchronise with the host. Throws if capture fails.
    // share_memory_with (captured, same device): allocate from that graph's pool instead of a new
    // one, so a chain of graphs holds one set of intermediates instead of one per graph. Safe
    // only if the graphs never run concurrently and each replay's outputs are read before any
    // other graph of the pool replays (a graph's outputs may sit where another graph keeps its
    // intermediates).
    void capture(int device, const std::function<void()>& fn,
                 const CudaGraph* share_memory_with = nullptr);
    // Runs the recorded work on the device's current stream.
    void replay();
    bool captured() const;
    // Kernel nodes (and all nodes) of the captured graph, counted at the end of the capture.
    size_t kernel_nodes() const;
    size_t nodes() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace varscope::kernels
