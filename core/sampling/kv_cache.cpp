#include "core/sampling/kv_cache.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace varscope {
namespace {

int64_t nbytes(const at::Tensor& t) {
    return t.defined() ? t.numel() * t.element_size() : 0;
}

bool same_view(const at::Tensor& a, const at::Tensor& b) {
    return a.data_ptr() == b.data_ptr() && a.sizes() == b.sizes() && a.strides() == b.strides() &&
           a.scalar_type() == b.scalar_type();
}

int64_t total_tokens(const std::vector<at::Tensor>& parts) {
    int64_t n = 0;
    for (const auto& p : parts) n += p.size(2);
    return n;
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

int64_t KvCache::capacity(const Layer& l) const {
    if (!l.k.defined()) return 0;
    return compact_ ? l.k.size(1) : l.k.size(2);
}

at::Tensor KvCache::slots(const at::Tensor& buffer, int64_t start, int64_t n) {
    return buffer.narrow(1, start, n).permute({0, 2, 1, 3});
}

void KvCache::append(int64_t layer, const at::Tensor& k, const at::Tensor& v) {
    check_layer(layer);
    Layer& l = layers_[layer];
    const int64_t n = l.length, add = k.size(2);
    if (compact_) {
        // Staged, not copied: the policy decides what to keep before anything is written.
        l.staged_k.push_back(k);
        l.staged_v.push_back(v);
    } else {
        if (n + add > l.k.size(2))
            throw std::length_error("KvCache: appending " + std::to_string(add) + " tokens to " +
                                    std::to_string(n) + " exceeds capacity " +
                                    std::to_string(l.k.size(2)));
        auto k_slots = l.k.narrow(2, n, add), v_slots = l.v.narrow(2, n, add);
        if (!same_view(k_slots, k)) k_slots.copy_(k);
        if (!same_view(v_slots, v)) v_slots.copy_(v);
    }
    l.length = n + add;
}

std::pair<at::Tensor, at::Tensor> KvCache::next_slots(int64_t layer, int64_t n) const {
    check_layer(layer);
    const Layer& l = layers_[layer];
    if (compact_ || n < 0 || l.length + n > capacity(l)) return {};
    return {l.k.narrow(2, l.length, n), l.v.narrow(2, l.length, n)};
}

std::vector<at::Tensor> KvCache::pieces(const Layer& l, bool values) const {
    std::vector<at::Tensor> out;
    const at::Tensor& base = values ? l.v : l.k;
    if (!compact_) {
        out.push_back(base.narrow(2, 0, l.length));
        return out;
    }
    auto add = [&](int64_t start, int64_t n) {
        if (n > 0) out.push_back(slots(base, start, n));
    };
    if (l.window == 0) {
        add(0, l.stored);
    } else {
        const int64_t filled = l.stored - l.pinned;
        add(0, l.pinned);
        if (filled < l.window) {
            add(l.pinned, filled);  // the ring has not wrapped yet
        } else {
            add(l.pinned + l.head, l.window - l.head);  // oldest first
            add(l.pinned, l.head);
        }
    }
    for (const auto& t : values ? l.staged_v : l.staged_k)
        if (t.size(2) > 0) out.push_back(t);
    return out;
}

void KvCache::rebuild(Layer& l, const std::vector<std::pair<int64_t, int64_t>>& ranges,
                      int64_t capacity) {
    auto k = at::empty({batch_, capacity, heads_, head_dim_}, options_);
    auto v = at::empty({batch_, capacity, heads_, head_dim_}, options_);
    int64_t kept = 0;
    for (int values = 0; values < 2; ++values) {
        const auto parts = pieces(l, values != 0);
        at::Tensor& dst = values ? v : k;
        int64_t pos = 0;
        for (const auto& [start, len] : ranges) {
            int64_t offset = 0;
            for (const auto& p : parts) {
                const int64_t lo = std::max(start, offset),
                              hi = std::min(start + len, offset + p.size(2));
                if (lo < hi) {
                    slots(dst, pos, hi - lo).copy_(p.narrow(2, lo - offset, hi - lo));
                    pos += hi - lo;
                }
                offset += p.size(2);
            }
        }
        kept = pos;
    }
    // Old and new buffers coexist until the old ones are released here.
    const int64_t old_bytes = nbytes(l.k) + nbytes(l.v), new_bytes = nbytes(k) + nbytes(v);
    peak_ = std::max(peak_, held_ + new_bytes);
    held_ += new_bytes - old_bytes;
    l.k = std::move(k);
    l.v = std::move(v);
    l.staged_k.clear();
    l.staged_v.clear();
    l.length = l.stored = kept;
    l.pinned = l.window = l.head = 0;
}

void KvCache::write_staged(Layer& l) {
    if (l.staged_k.empty()) return;
    std::vector<at::Tensor> sk = std::move(l.staged_k), sv = std::move(l.staged_v);
    l.staged_k.clear();
    l.staged_v.clear();
    const int64_t add = total_tokens(sk);
    if (l.window == 0) {
        if (l.stored + add > capacity(l)) {
            // Grow: the written tokens move to a larger buffer once.
            rebuild(l, {{0, l.stored}}, std::max(l.stored + add, l.reserve));
        }
        for (size_t i = 0; i < sk.size(); ++i) {
            const int64_t n = sk[i].size(2);
            if (n == 0) continue;
            slots(l.k, l.stored, n).copy_(sk[i]);
            slots(l.v, l.stored, n).copy_(sv[i]);
            l.stored += n;
        }
    } else {
        // Rolling: each token overwrites the oldest unpinned one once the ring is full.
        const int64_t w = l.window;
        int64_t filled = l.stored - l.pinned;
        for (size_t i = 0; i < sk.size(); ++i) {
            int64_t m = sk[i].size(2), from = 0;
            if (m >= w) {  // only the last `window` tokens survive
                from = m - w;
                m = w;
                l.head = 0;
            }
            const int64_t first = std::min(m, w - l.head);
            if (first > 0) {
                slots(l.k, l.pinned + l.head, first).copy_(sk[i].narrow(2, from, first));
                slots(l.v, l.pinned + l.head, first).copy_(sv[i].narrow(2, from, first));
            }
            if (m > first) {
                slots(l.k, l.pinned, m - first).copy_(sk[i].narrow(2, from + first, m - first));
                slots(l.v, l.pinned, m - first).copy_(sv[i].narrow(2, from + first, m - first));
            }
            l.head = (l.head + m) % w;
            filled = std::min(w, filled + m);
        }
        l.stored = l.pinned + filled;
    }
    l.length = l.stored;
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
    // Nothing dropped; except that a rolling layer whose ring cannot take its staged tokens
    // would drop the oldest when read: it is rebuilt linear below, keeping them all.
    if (kept == l.length && (l.window == 0 || l.length <= l.pinned + l.window)) return;
    if (!compact_) {
        std::vector<at::Tensor> ks, vs;
        for (const auto& [start, len] : ranges) {
            ks.push_back(l.k.narrow(2, start, len));
            vs.push_back(l.v.narrow(2, start, len));
        }
        // Through a copy: the kept ranges may overlap their destination.
        const auto k = at::cat(ks, 2), v = at::cat(vs, 2);
        l.k.narrow(2, 0, kept).copy_(k);
        l.v.narrow(2, 0, kept).copy_(v);
        l.length = kept;
        return;
    }
    if (kept == l.stored && end <= l.stored) {
        // Exactly the tokens written before: the staged appends are dropped, nothing moves.
        l.staged_k.clear();
        l.staged_v.clear();
        l.length = l.stored;
        return;
    }
    rebuild(l, ranges, std::max(kept, l.reserve));
}

void KvCache::assign(int64_t layer, const at::Tensor& k, const at::Tensor& v) {
    check_layer(layer);
    Layer& l = layers_[layer];
    const int64_t n = k.size(2);
    if (compact_) {
        l.staged_k = {k};
        l.staged_v = {v};
        l.stored = 0;
        l.length = n;
        l.pinned = l.window = l.head = 0;
        rebuild(l, {{0, n}}, std::max(n, l.reserve));
        return;
    }
    if (n > l.k.size(2)) throw std::length_error("KvCache: assign exceeds capacity");
    l.k.narrow(2, 0, n).copy_(k);
    l.v.narrow(2, 0, n).copy_(v);
    l.length = n;
}

void KvCache::reserve(int64_t layer, int64_t tokens) {
    check_layer(layer);
    if (!compact_) return;
    Layer& l = layers_[layer];
    l.reserve = tokens;
    if (l.window == 0 && capacity(l) < tokens) {
        // Keep the staged appends staged: rebuild only the written tokens.
        auto sk = std::move(l.staged_k), sv = std::move(l.staged_v);
        const int64_t length = l.length;
        rebuild(l, {{0, l.stored}}, tokens);
        l.staged_k = std::move(sk);
        l.staged_v = std::move(sv);
        l.length = length;
    }
}

void KvCache::set_window(int64_t layer, int64_t pinned, int64_t window) {
    check_layer(layer);
    if (!compact_) throw std::logic_error("KvCache::set_window needs the compact mode");
    Layer& l = layers_[layer];
    if (window < 1 || pinned < 0 || l.stored < pinned || l.stored > pinned + window)
        throw std::invalid_argument("KvCache::set_window: " + std::to_string(l.stored) +
                                    " written tokens do not fit " + std::to_string(pinned) +
                                    " pinned + a window of " + std::to_string(window));
    if (l.window == window && l.pinned == pinned) return;
    const bool in_place = l.window == 0 && capacity(l) == pinned + window;
    if (!in_place) {
        // The written tokens, in sequence order, into a buffer of exactly pinned + window slots.
        auto sk = std::move(l.staged_k), sv = std::move(l.staged_v);
        const int64_t length = l.length;
        rebuild(l, {{0, l.stored}}, pinned + window);
        l.staged_k = std::move(sk);
        l.staged_v = std::move(sv);
        l.length = length;
    }
    // Slots [0, stored) hold the tokens in sequence order: the ring starts at its first slot.
    l.pinned = pinned;
    l.window = window;
    l.head = (l.stored - pinned) % window;
}

std::pair<at::Tensor, at::Tensor> KvCache::view(int64_t layer) {
    check_layer(layer);
    Layer& l = layers_[layer];
    if (!compact_) return {l.k.narrow(2, 0, l.length), l.v.narrow(2, 0, l.length)};
    write_staged(l);
    if (!l.k.defined()) {
        auto none = at::empty({batch_, heads_, 0, head_dim_}, options_);
        return {none, none};
    }
    return {slots(l.k, 0, l.stored), slots(l.v, 0, l.stored)};
}

at::Tensor KvCache::keys(int64_t layer, int64_t start, int64_t length) const {
    const auto parts = key_pieces(layer, start, length);
    if (parts.empty()) return at::empty({batch_, heads_, 0, head_dim_}, options_);
    return parts.size() == 1 ? parts[0] : at::cat(parts, 2);
}

std::vector<at::Tensor> KvCache::key_pieces(int64_t layer, int64_t start, int64_t length) const {
    check_layer(layer);
    const Layer& l = layers_[layer];
    if (start < 0 || length < 0 || start + length > l.length)
        throw std::out_of_range("KvCache::key_pieces: tokens [" + std::to_string(start) + ", " +
                                std::to_string(start + length) + ") of " +
                                std::to_string(l.length));
    std::vector<at::Tensor> parts;
    int64_t offset = 0;
    for (const auto& p : pieces(l, false)) {
        const int64_t lo = std::max(start, offset),
                      hi = std::min(start + length, offset + p.size(2));
        if (lo < hi) parts.push_back(p.narrow(2, lo - offset, hi - lo));
        offset += p.size(2);
    }
    return parts;
}

int64_t KvCache::token_bytes() const {
    return 2 * batch_ * heads_ * head_dim_ *
           static_cast<int64_t>(c10::elementSize(c10::typeMetaToScalarType(options_.dtype())));
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
