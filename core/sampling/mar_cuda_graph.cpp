#include "core/sampling/mar_cuda_graph.h"

#include <ATen/ATen.h>

#include <chrono>

#include "kernels/cuda_graph.h"

namespace varscope {

struct MarGraphs::Graph {
    kernels::CudaGraph graph;
    std::vector<at::Tensor> outputs;
};

bool MarGraphKey::operator==(const MarGraphKey& o) const {
    return device == o.device && batch == o.batch && dtype == o.dtype && num_iter == o.num_iter &&
           cfg == o.cfg && schedule == o.schedule && temperature == o.temperature &&
           attention == o.attention && weights == o.weights &&
           head_cfg_cache_period == o.head_cfg_cache_period && fused_head == o.fused_head &&
           head_mlp_cache_period == o.head_mlp_cache_period && hooks == o.hooks &&
           chained_pool == o.chained_pool;
}

MarGraphs::MarGraphs(const MarGraphKey& key) : key_(key) {}
MarGraphs::~MarGraphs() = default;

at::Tensor MarGraphs::buffer(const std::string& name, const std::function<at::Tensor()>& make) {
    auto& t = buffers_[name];
    if (!t.defined()) t = make();
    return t;
}

const std::vector<at::Tensor>& MarGraphs::run(const std::string& name, const Tensors& fn,
                                              Pool pool) {
    auto& g = graphs_[name];
    if (!g) {
        const auto t0 = std::chrono::steady_clock::now();
        if (!warmed_up_) {
            // Creates the capture stream's cuBLAS / attention state outside any graph, and the
            // hooks' state buffers (outside the graph pools). fn writes only tensors it
            // allocates or state that the replay rewrites before reading it.
            kernels::run_on_capture_stream(key_.device, [&] { fn(); });
            warmed_up_ = true;
        }
        auto fresh = std::make_unique<Graph>();
        const bool chained = pool == Pool::Chained && key_.chained_pool;
        fresh->graph.capture(
            key_.device, [&] { fresh->outputs = fn(); }, chained ? chain_pool_ : nullptr);
        if (chained && chain_pool_ == nullptr) chain_pool_ = &fresh->graph;
        kernel_nodes[name] = fresh->graph.kernel_nodes();
        g = std::move(fresh);
        capture_ms_ +=
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count();
    }
    g->graph.replay();
    return g->outputs;
}

}  // namespace varscope
