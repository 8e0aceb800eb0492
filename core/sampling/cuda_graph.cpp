#include "core/sampling/cuda_graph.h"

#include <ATen/ATen.h>

#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>

#include "core/sampling/hooks.h"
#include "core/sampling/probes.h"
#include "kernels/cuda_graph.h"
#include "kernels/memory_stats.h"
#include "kernels/part_timer.h"

namespace varscope {

struct DenseStepGraphs::Scale {
    // key.part_timing: events recorded by the graph's event nodes (declared first so that the
    // graph, which refers to them, is destroyed before them).
    std::unique_ptr<kernels::PartTimer> timer;
    kernels::CudaGraph graph;
    at::Tensor logits;  // output of the captured forward, in the graph's memory pool
    double flops = 0.0;
    std::vector<int64_t> layout;  // of the captured step
    int64_t kv_bytes = 0;         // after the step
    std::map<std::string, at::Tensor> inputs;
    StepCost cost;  // FLOPs per part, recorded at capture
};

struct DenseStepGraphs::Extra {
    kernels::CudaGraph graph;
    std::vector<at::Tensor> outputs;
};

bool DenseGraphKey::operator==(const DenseGraphKey& o) const {
    return device == o.device && batch == o.batch && dtype == o.dtype && attention == o.attention &&
           patch_nums == o.patch_nums && weights == o.weights && hooks == o.hooks &&
           compact_kv == o.compact_kv && part_timing == o.part_timing &&
           hooks_instance == o.hooks_instance && step_settings == o.step_settings &&
           chained_pool == o.chained_pool;
}

std::optional<std::string> graphs_apply(bool enabled, const VarConfig& c, const at::Device& device,
                                        SamplingHooks* hooks, ProbeSink* probe) {
    if (!enabled || !device.is_cuda() || !kernels::cuda_graphs_built()) return std::nullopt;
    if (probe) {
        if (probe->wants_block_timing()) return std::nullopt;
        for (int64_t si = 0; si < c.num_scales(); ++si)
            for (int64_t layer = 0; layer < c.depth; ++layer)
                if (probe->wants_attention(si, layer) || probe->wants_attention_inputs(si, layer))
                    return std::nullopt;
    }
    return hooks ? hooks->graph_signature(c) : std::optional<std::string>("");
}

size_t weights_fingerprint(const torch::nn::Module& m) {
    size_t h = 0;
    auto mix = [&h](size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
    auto add = [&](const at::Tensor& t) {
        if (!t.defined()) return;
        mix(std::hash<const void*>{}(t.data_ptr()));
        mix(static_cast<size_t>(t.numel()));
        mix(static_cast<size_t>(t.scalar_type()));
    };
    for (const auto& p : m.parameters()) add(p);
    for (const auto& b : m.buffers()) add(b);
    return h;
}

DenseStepGraphs::DenseStepGraphs(const VarConfig& c, const DenseGraphKey& key,
                                 const at::Tensor& condition_prototype)
    : config_(c),
      key_(key),
      f_hat_(at::zeros({key.batch, c.cvae, c.patch_nums.back(), c.patch_nums.back()},
                       condition_prototype.options().dtype(at::kFloat))),
      condition_(at::zeros_like(condition_prototype)),
      cache_(key.compact_kv
                 ? KvCache::compact(c.depth, 2 * key.batch, c.num_heads, c.head_dim(),
                                    condition_prototype.options().dtype(key.dtype))
                 : KvCache(c.depth, 2 * key.batch, c.num_heads, c.head_dim(), c.total_tokens(),
                           condition_prototype.options().dtype(key.dtype))) {
    for (int64_t si = 0; si < c.num_scales(); ++si) scales_.push_back(std::make_unique<Scale>());
}

DenseStepGraphs::~DenseStepGraphs() = default;

bool DenseStepGraphs::fully_captured() const {
    // Grouped steps leave scales without a step of their own.
    return last_captured_ >= 0;
}

at::Tensor DenseStepGraphs::step_input(int64_t si, const std::string& name,
                                       const std::function<at::Tensor()>& make) {
    auto& t = scales_.at(si)->inputs[name];
    if (!t.defined()) t = make();
    return t;
}

int64_t DenseStepGraphs::kv_bytes_after(int64_t si) const {
    return scales_.at(si)->kv_bytes;
}

KvCache DenseStepGraphs::eager_tail_cache(int64_t si) const {
    const int64_t end = last_captured_ < 0 ? 0 : scales_.at(last_captured_)->layout.end()[-2] + 1;
    if (end != si)
        throw std::logic_error("CUDA graphs: steps from scale " + std::to_string(si) +
                               " run eagerly, but the captured steps end before scale " +
                               std::to_string(end));
    return cache_;
}

const kernels::PartTimer* DenseStepGraphs::part_timer(int64_t si) const {
    return scales_.at(si)->timer.get();
}

const std::vector<at::Tensor>& DenseStepGraphs::run(const std::string& name, const Tensors& fn) {
    auto& extra = extras_[name];
    if (!extra) {
        const auto t0 = std::chrono::steady_clock::now();
        // Warm-up first: creates the capture stream's cuBLAS / cuDNN state outside any graph.
        kernels::run_on_capture_stream(key_.device, [&] { fn(); });
        auto e = std::make_unique<Extra>();
        e->graph.capture(key_.device, [&] { e->outputs = fn(); });
        extra = std::move(e);
        capture_ms_ +=
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count();
    }
    extra->graph.replay();
    return extra->outputs;
}

at::Tensor DenseStepGraphs::step(int64_t si, const std::vector<int64_t>& layout,
                                 const Forward& forward, double& flops, StepCost* cost) {
    Scale& s = *scales_.at(si);
    if (!s.graph.captured()) {
        // Steps are captured in order on one call: the cache's host-side state (lengths, and a
        // compact cache's buffers) then advances exactly as the replays' writes do.
        TORCH_CHECK(si == 0 ? last_captured_ < 0 : last_captured_ >= 0 && last_captured_ < si,
                    "CUDA graphs: step ", si, " captured out of order");
        const auto t0 = std::chrono::steady_clock::now();
        if (!warmed_up_) {
            // An eager run of the first scale on the capture stream with a scratch cache.
            KvCache scratch(config_.depth, 2 * key_.batch, config_.num_heads, config_.head_dim(),
                            config_.first_l(), condition_.options().dtype(key_.dtype));
            double ignored = 0.0;
            kernels::run_on_capture_stream(key_.device,
                                           [&] { forward(0, scratch, ignored, nullptr, true); });
            warmed_up_ = true;
        }
        if (key_.part_timing) s.timer = std::make_unique<kernels::PartTimer>(key_.device);
        const CostRecorder rec{&s.cost, s.timer.get()};
        // Chained: the steps allocate from the first step's pool. They replay one after another
        // on one stream and each step's logits (kept alive in its Scale) are read before the
        // next replay, so one set of intermediates serves every scale (kernels/cuda_graph.h).
        const kernels::CudaGraph* pool =
            key_.chained_pool && chain_pool_ != nullptr ? chain_pool_ : nullptr;
        s.graph.capture(
            key_.device, [&] { s.logits = forward(si, cache_, s.flops, &rec, false); }, pool);
        if (key_.chained_pool && chain_pool_ == nullptr) chain_pool_ = &s.graph;
        s.layout = layout;
        s.kv_bytes = cache_.total_bytes();
        last_captured_ = si;
        capture_ms_ +=
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count();
    } else if (s.layout != layout) {
        throw std::logic_error(
            "CUDA graphs: step " + std::to_string(si) +
            " changed its scales or row counts since capture (a hook with a graph signature "
            "must keep them fixed: see SamplingHooks::graph_signature)");
    }
    s.graph.replay();
    flops += s.flops;
    if (cost) {
        cost->flops = s.cost.flops;
        cost->launches = static_cast<int64_t>(s.graph.kernel_nodes());
    }
    return s.logits;
}

int64_t graph_set_bytes(const VarConfig& c, const DenseGraphKey& key) {
    int64_t tokens = 0;  // the key's schedule (a cache may hold sets of several)
    for (const int64_t pn : key.patch_nums) tokens += pn * pn;
    if (tokens == 0) tokens = c.total_tokens();
    const int64_t kv = 2 * c.depth * (2 * key.batch) * tokens * c.embed_dim *
                       static_cast<int64_t>(c10::elementSize(key.dtype));
    return kv + kv / 2;
}

size_t graph_sets_to_release(int64_t available, int64_t need,
                             const std::vector<int64_t>& lru_bytes) {
    if (available < 0) return 0;
    size_t n = 0;
    while (available < need && n < lru_bytes.size()) available += lru_bytes[n++];
    return n;
}

std::shared_ptr<DenseStepGraphs> DenseGraphCache::get(const VarConfig& config,
                                                      const DenseGraphKey& key,
                                                      const at::Tensor& condition_prototype) {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
        if (!(it->first == key)) continue;
        auto entry = std::move(*it);
        entries_.erase(it);
        entries_.push_back(std::move(entry));
        return entries_.back().second;
    }
    if (entries_.size() >= kMaxEntries) entries_.erase(entries_.begin());
    const int64_t available = memory_probe_ ? memory_probe_(key.device)
                              : condition_prototype.is_cuda()
                                  ? kernels::cuda_available_memory(key.device)
                                  : -1;
    if (available >= 0) {
        // Sets on this device, least recent first, and what releasing each would give back.
        std::vector<size_t> same;
        std::vector<int64_t> bytes;
        for (size_t i = 0; i < entries_.size(); ++i)
            if (entries_[i].first.device == key.device) {
                same.push_back(i);
                bytes.push_back(graph_set_bytes(config, entries_[i].first));
            }
        const size_t n = graph_sets_to_release(available, graph_set_bytes(config, key), bytes);
        for (size_t k = n; k-- > 0;) entries_.erase(entries_.begin() + same[k]);
        // Graph pools go back to the driver only when emptied (another process may need it too).
        if (n > 0 && condition_prototype.is_cuda()) kernels::empty_cuda_cache();
    }
    entries_.emplace_back(key, std::make_shared<DenseStepGraphs>(config, key, condition_prototype));
    return entries_.back().second;
}

void DenseGraphCache::erase(const std::shared_ptr<DenseStepGraphs>& graphs) {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
        if (it->second == graphs) {
            entries_.erase(it);
            return;
        }
}

void DenseGraphCache::clear() {
    const std::lock_guard<std::mutex> lock(mutex_);
    entries_.clear();
}

void DenseGraphCache::set_memory_probe(MemoryProbe probe) {
    const std::lock_guard<std::mutex> lock(mutex_);
    memory_probe_ = std::move(probe);
}

size_t DenseGraphCache::size() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return entries_.size();
}

}  // namespace varscope
