// Per-layer key/value cache for next-scale sampling. Keys and values of every scale are
// appended in order; buffers are allocated once for the whole schedule so appends are copies
// into place rather than re-concatenations.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace varscope {

class KvCache {
public:
    // batch counts both CFG branches; capacity = total tokens of the schedule.
    KvCache(int64_t layers, int64_t batch, int64_t heads, int64_t head_dim, int64_t capacity,
            const at::TensorOptions& options);

    // Appends this scale's k, v (B, H, l, c) to `layer` and returns views of everything cached.
    std::pair<at::Tensor, at::Tensor> append(int64_t layer, const at::Tensor& k, const at::Tensor& v);
    // Replaces a layer's cache with the given (already selected) keys and values, e.g. after an
    // eviction policy dropped tokens.
    void assign(int64_t layer, const at::Tensor& k, const at::Tensor& v);
    std::pair<at::Tensor, at::Tensor> view(int64_t layer) const;

    int64_t length(int64_t layer) const { return lengths_.at(layer); }
    int64_t layers() const { return static_cast<int64_t>(lengths_.size()); }
    int64_t bytes(int64_t layer) const;  // bytes of live keys + values in `layer`
    int64_t total_bytes() const;

private:
    std::vector<at::Tensor> k_, v_;
    std::vector<int64_t> lengths_;
};

}  // namespace varscope
