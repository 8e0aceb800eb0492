#include "core/sampling/kv_cache.h"

#include <ATen/ATen.h>

#include <stdexcept>

namespace varscope {

KvCache::KvCache(int64_t layers, int64_t batch, int64_t heads, int64_t head_dim, int64_t capacity,
                 const at::TensorOptions& options)
    : lengths_(layers, 0) {
    for (int64_t i = 0; i < layers; ++i) {
        k_.push_back(at::empty({batch, heads, capacity, head_dim}, options));
        v_.push_back(at::empty({batch, heads, capacity, head_dim}, options));
    }
}

std::pair<at::Tensor, at::Tensor> KvCache::append(int64_t layer, const at::Tensor& k,
                                                  const at::Tensor& v) {
    const int64_t n = lengths_.at(layer), l = k.size(2);
    if (n + l > k_[layer].size(2))
        throw std::length_error("KvCache: appending " + std::to_string(l) + " tokens to " +
                                std::to_string(n) + " exceeds capacity " +
                                std::to_string(k_[layer].size(2)));
    k_[layer].narrow(2, n, l).copy_(k);
    v_[layer].narrow(2, n, l).copy_(v);
    lengths_[layer] = n + l;
    return view(layer);
}

void KvCache::assign(int64_t layer, const at::Tensor& k, const at::Tensor& v) {
    const int64_t l = k.size(2);
    if (l > k_[layer].size(2)) throw std::length_error("KvCache: assign exceeds capacity");
    k_[layer].narrow(2, 0, l).copy_(k);
    v_[layer].narrow(2, 0, l).copy_(v);
    lengths_[layer] = l;
}

std::pair<at::Tensor, at::Tensor> KvCache::view(int64_t layer) const {
    const int64_t n = lengths_.at(layer);
    return {k_[layer].narrow(2, 0, n), v_[layer].narrow(2, 0, n)};
}

int64_t KvCache::bytes(int64_t layer) const {
    const auto& k = k_.at(layer);
    return 2 * lengths_[layer] * k.size(0) * k.size(1) * k.size(3) * k.element_size();
}

int64_t KvCache::total_bytes() const {
    int64_t b = 0;
    for (int64_t i = 0; i < layers(); ++i) b += bytes(i);
    return b;
}

}  // namespace varscope
