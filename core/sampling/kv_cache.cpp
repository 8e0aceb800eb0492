#include "core/sampling/kv_cache.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace varscope {
namespace {

int64_t nbytes(const at::Tensor& t) { return t.defined() ? t.numel() * t.element_size() : 0; }

// A contiguous tensor that owns exactly its elements (not a view into a larger buffer), so the
// cache holds no more memory than it reports.
at::Tensor owned_copy(const at::Tensor& t) {
    const bool exact = t.is_contiguous() && t.storage_offset() == 0 &&
                       static_cast<int64_t>(t.storage().nbytes()) == nbytes(t);
    return exact ? t : t.contiguous().clone();
}

}  // namespace

KvCache::KvCache(int64_t layers, int64_t batch, int64_t heads, int64_t head_dim,
                 const at::TensorOptions& options, bool compact)
    : compact_(compact),
      batch_(batch),
      heads_(heads),
      head_dim_(head_dim),
      options_(options),
      layers_(static_cast<size_t>(layers)) {}

KvCache::KvCache(int64_t layers, int64_t batch, int64_t heads, int64_t head_dim, int64_t capacity,
                 const at::TensorOptions& options)
    : KvCache(layers, batch, heads, head_dim, options, false) {
    for (auto& l : layers_) {
        l.k = at::empty({batch, heads, capacity, head_dim}, options);
        l.v = at::empty({batch, heads, capacity, head_dim}, options);
    }
    peak_ = allocated_bytes();
}

KvCache KvCache::compact(int64_t layers, int64_t batch, int64_t heads, int64_t head_dim,
                         const at::TensorOptions& options) {
    return KvCache(layers, batch, heads, head_dim, options, true);
}

void KvCache::check_layer(int64_t layer) const {
    if (layer < 0 || layer >= layers())
        throw std::out_of_range("KvCache: layer " + std::to_string(layer) + " of " +
                                std::to_string(layers()));
}

void KvCache::append(int64_t layer, const at::Tensor& k, const at::Tensor& v) {
    check_layer(layer);
    Layer& l = layers_[layer];
    const int64_t n = l.length, add = k.size(2);
    if (compact_) {
        // Staged, not copied: a policy that trims the layer right away copies only what it keeps.
        l.staged_k.push_back(k);
        l.staged_v.push_back(v);
    } else {
        if (n + add > l.k.size(2))
            throw std::length_error("KvCache: appending " + std::to_string(add) + " tokens to " +
                                    std::to_string(n) + " exceeds capacity " +
                                    std::to_string(l.k.size(2)));
        l.k.narrow(2, n, add).copy_(k);
        l.v.narrow(2, n, add).copy_(v);
    }
    l.length = n + add;
}

std::vector<at::Tensor> KvCache::pieces(const Layer& l, bool values) const {
    std::vector<at::Tensor> out;
    const at::Tensor& base = values ? l.v : l.k;
    if (!compact_) {
        out.push_back(base.narrow(2, 0, l.length));
        return out;
    }
    if (base.defined() && base.size(2) > 0) out.push_back(base);
    for (const auto& t : values ? l.staged_v : l.staged_k)
        if (t.size(2) > 0) out.push_back(t);
    return out;
}

at::Tensor KvCache::gather(const Layer& l, bool values,
                           const std::vector<std::pair<int64_t, int64_t>>& ranges) const {
    const auto parts = pieces(l, values);
    std::vector<at::Tensor> slices;
    for (const auto& [start, len] : ranges) {
        int64_t offset = 0;
        for (const auto& p : parts) {
            const int64_t lo = std::max(start, offset),
                          hi = std::min(start + len, offset + p.size(2));
            if (lo < hi) slices.push_back(p.narrow(2, lo - offset, hi - lo));
            offset += p.size(2);
        }
    }
    if (slices.empty()) return at::empty({batch_, heads_, 0, head_dim_}, options_);
    return at::cat(slices, 2);  // always a new tensor
}

void KvCache::replace_compact(Layer& l, at::Tensor k, at::Tensor v) {
    // Old and new tensors coexist until the old ones are released here.
    const int64_t old_bytes = nbytes(l.k) + nbytes(l.v), new_bytes = nbytes(k) + nbytes(v);
    peak_ = std::max(peak_, held_ + new_bytes);
    l.k = std::move(k);
    l.v = std::move(v);
    l.staged_k.clear();
    l.staged_v.clear();
    l.length = l.k.size(2);
    held_ += new_bytes - old_bytes;
}

void KvCache::retain(int64_t layer, const std::vector<std::pair<int64_t, int64_t>>& ranges) {
    check_layer(layer);
    Layer& l = layers_[layer];
    int64_t end = 0, kept = 0;
    for (const auto& [start, len] : ranges) {
        if (start < end || len < 0 || start + len > l.length)
            throw std::invalid_argument(
                "KvCache::retain: ranges must be ascending, disjoint and within the layer's " +
                std::to_string(l.length) + " tokens");
        end = start + len;
        kept += len;
    }
    if (kept == l.length && (!compact_ || l.staged_k.empty())) return;  // nothing dropped
    auto k = gather(l, false, ranges), v = gather(l, true, ranges);
    if (compact_) {
        replace_compact(l, std::move(k), std::move(v));
    } else {
        l.k.narrow(2, 0, kept).copy_(k);
        l.v.narrow(2, 0, kept).copy_(v);
        l.length = kept;
    }
}

void KvCache::assign(int64_t layer, const at::Tensor& k, const at::Tensor& v) {
    check_layer(layer);
    Layer& l = layers_[layer];
    const int64_t n = k.size(2);
    if (compact_) {
        replace_compact(l, owned_copy(k), owned_copy(v));
        return;
    }
    if (n > l.k.size(2)) throw std::length_error("KvCache: assign exceeds capacity");
    l.k.narrow(2, 0, n).copy_(k);
    l.v.narrow(2, 0, n).copy_(v);
    l.length = n;
}

std::pair<at::Tensor, at::Tensor> KvCache::view(int64_t layer) {
    check_layer(layer);
    Layer& l = layers_[layer];
    if (!compact_) return {l.k.narrow(2, 0, l.length), l.v.narrow(2, 0, l.length)};
    if (!l.staged_k.empty()) {
        const std::vector<std::pair<int64_t, int64_t>> all = {{0, l.length}};
        replace_compact(l, gather(l, false, all), gather(l, true, all));
    }
    if (!l.k.defined()) return {gather(l, false, {}), gather(l, true, {})};
    return {l.k, l.v};
}

at::Tensor KvCache::keys(int64_t layer, int64_t start, int64_t length) const {
    check_layer(layer);
    const Layer& l = layers_[layer];
    if (start < 0 || length < 0 || start + length > l.length)
        throw std::out_of_range("KvCache::keys: tokens [" + std::to_string(start) + ", " +
                                std::to_string(start + length) + ") of " +
                                std::to_string(l.length));
    int64_t offset = 0;
    for (const auto& p : pieces(l, false)) {
        if (start >= offset && start + length <= offset + p.size(2))
            return p.narrow(2, start - offset, length);
        offset += p.size(2);
    }
    return gather(l, false, {{start, length}});
}

int64_t KvCache::token_bytes() const {
    return 2 * batch_ * heads_ * head_dim_ * static_cast<int64_t>(c10::elementSize(
                                                 c10::typeMetaToScalarType(options_.dtype())));
}

int64_t KvCache::bytes(int64_t layer) const {
    check_layer(layer);
    return layers_[layer].length * token_bytes();
}

int64_t KvCache::total_bytes() const {
    int64_t b = 0;
    for (int64_t i = 0; i < layers(); ++i) b += bytes(i);
    return b;
}

int64_t KvCache::allocated_bytes() const {
    if (compact_) return held_;
    int64_t b = 0;
    for (const auto& l : layers_) b += nbytes(l.k) + nbytes(l.v);
    return b;
}

}  // namespace varscope
