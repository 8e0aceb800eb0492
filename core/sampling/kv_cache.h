// Per-layer key/value cache for next-scale sampling. Keys and values are (B, H, L, c) per layer,
// appended step by step in sequence order.
//
// Two storage modes:
//  * Preallocated (the baseline): one buffer per layer for the whole schedule, allocated once;
//    appends are copies into place. Fastest, but holds the full schedule's memory from the start.
//  * Compact (for eviction policies such as AMS-KV): each layer holds exactly the tokens it
//    keeps. An append is staged (no copy) until the layer is read or trimmed; retain()/assign()
//    build the kept tokens in a new tensor and release the old one, so the memory held follows
//    the policy's budget. Only the layer being processed briefly holds old + new tokens.
#pragma once

#include <ATen/core/Tensor.h>

#include <utility>
#include <vector>

namespace varscope {

class KvCache {
public:
    // Preallocated mode. batch counts both CFG branches; capacity = total tokens of the schedule.
    KvCache(int64_t layers, int64_t batch, int64_t heads, int64_t head_dim, int64_t capacity,
            const at::TensorOptions& options);
    // Compact mode: nothing is allocated up front; every layer grows on append and shrinks on
    // retain()/assign().
    static KvCache compact(int64_t layers, int64_t batch, int64_t heads, int64_t head_dim,
                           const at::TensorOptions& options);

    // Appends k, v (B, H, l, c) to `layer`. Read the result with view().
    void append(int64_t layer, const at::Tensor& k, const at::Tensor& v);
    // Replaces a layer's cache with the given keys and values (copied; compact mode holds a
    // tensor of exactly that size).
    void assign(int64_t layer, const at::Tensor& k, const at::Tensor& v);
    // Keeps only the token ranges {start, length} of `layer` (ascending, not overlapping), in
    // order; the rest is dropped. The eviction primitive: no index tensor, one gather.
    void retain(int64_t layer, const std::vector<std::pair<int64_t, int64_t>>& ranges);
    // Keys and values of everything cached in `layer`, (B, H, length, c).
    std::pair<at::Tensor, at::Tensor> view(int64_t layer);
    // Keys of tokens [start, start + length) of `layer`, without consolidating staged appends
    // (a view where the range lies in one piece).
    at::Tensor keys(int64_t layer, int64_t start, int64_t length) const;

    bool is_compact() const { return compact_; }
    int64_t length(int64_t layer) const { return layers_.at(layer).length; }
    int64_t layers() const { return static_cast<int64_t>(layers_.size()); }
    int64_t bytes(int64_t layer) const;  // bytes of live keys + values in `layer`
    int64_t total_bytes() const;
    // Bytes the cache owns now: the preallocated buffers, or the compact tensors.
    int64_t allocated_bytes() const;
    // Highest allocated_bytes() so far, including the moment a compact layer holds both its old
    // and its rebuilt tensors.
    int64_t peak_bytes() const { return peak_; }
    int64_t token_bytes() const;  // bytes of one token's key + value over the batch and heads

private:
    struct Layer {
        at::Tensor k, v;  // preallocated: the buffer; compact: exactly the consolidated tokens
        std::vector<at::Tensor> staged_k, staged_v;  // compact: appends not yet consolidated
        int64_t length = 0;                          // live tokens (consolidated + staged)
    };
    KvCache(int64_t layers, int64_t batch, int64_t heads, int64_t head_dim,
            const at::TensorOptions& options, bool compact);
    // Pieces of the layer in order (consolidated first, then staged), keys or values.
    std::vector<at::Tensor> pieces(const Layer& l, bool values) const;
    at::Tensor gather(const Layer& l, bool values,
                      const std::vector<std::pair<int64_t, int64_t>>& ranges) const;
    void replace_compact(Layer& l, at::Tensor k, at::Tensor v);
    void check_layer(int64_t layer) const;

    bool compact_;
    int64_t batch_, heads_, head_dim_;
    at::TensorOptions options_;
    std::vector<Layer> layers_;
    int64_t held_ = 0;  // compact: bytes of the consolidated tensors
    int64_t peak_ = 0;
};

}  // namespace varscope
