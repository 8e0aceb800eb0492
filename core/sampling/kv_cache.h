// Per-layer key/value cache for next-scale sampling. Keys and values are (B, H, L, c) per layer,
// appended step by step in sequence order.
//
// Two storage modes:
//  * Preallocated (the baseline): one buffer per layer for the whole schedule, allocated once;
//    appends are copies into place. Fastest, but holds the full schedule's memory from the start.
//  * Compact (for eviction policies such as AMS-KV): each layer holds one buffer sized to what
//    the policy keeps, so the memory held follows the policy's budget. An append is staged (no
//    copy) until the layer is read (view()), so a policy can inspect the new keys and decide
//    before anything is written; reading writes the staged tokens into the buffer once.
//    Compact buffers are stored token-major, (B, capacity, H, c), and read through a permuted
//    (B, H, L, c) view: a scale's keys are then (B, tokens, H*c) matrices without a copy, in the
//    same layout as the model's freshly projected keys (AMS-KV's similarity is a batched GEMM).
//    A compact layer is either
//      - linear: tokens in sequence order in slots [0, n); the buffer grows when an append does
//        not fit (to the reserve() hint, at least), or
//      - rolling (set_window): the first `pinned` tokens stay for good and the others live in a
//        ring of `window` slots; reading writes staged tokens over the oldest unpinned ones,
//        i.e. the layer keeps its pinned tokens plus the `window` most recent others (AMS-KV's
//        CLRU) without moving any kept token. view() then lists the ring in slot order, not in
//        sequence order (attention does not depend on the order of its keys); keys() and the
//        range arguments of retain() always count in sequence order.
//    retain() (any eviction) and assign() rebuild a linear layer in sequence order.
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

    // Appends k, v (B, H, l, c) to `layer`. Read the result with view(). Where k and v are the
    // next_slots() of this append (a kernel wrote them in place), nothing is copied.
    void append(int64_t layer, const at::Tensor& k, const at::Tensor& v);
    // Preallocated mode: the (B, H, n, c) slots the next append of n tokens to `layer` fills, for
    // a kernel that writes the keys and values there itself (kernels/qk_norm.h); append() must
    // follow. Undefined tensors in compact mode or where n tokens do not fit (append() throws).
    std::pair<at::Tensor, at::Tensor> next_slots(int64_t layer, int64_t n) const;
    // Replaces a layer's cache with the given keys and values (copied; compact mode holds a
    // buffer of exactly that size, or of the reserve() hint).
    void assign(int64_t layer, const at::Tensor& k, const at::Tensor& v);
    // Keeps only the token ranges {start, length} of `layer` (ascending, not overlapping, in
    // sequence order); the rest is dropped. Keeping exactly the tokens written before the staged
    // appends only drops those (no copy, the layer's mode stays). Keeping more tokens than a
    // rolling layer's ring holds makes it linear.
    void retain(int64_t layer, const std::vector<std::pair<int64_t, int64_t>>& ranges);
    // Keys and values of everything cached in `layer`, (B, H, length, c).
    std::pair<at::Tensor, at::Tensor> view(int64_t layer);
    // Keys of tokens [start, start + length) of `layer` in sequence order, without writing staged
    // appends (a view where the range lies in one piece).
    at::Tensor keys(int64_t layer, int64_t start, int64_t length) const;
    // The same as views of the pieces it lies in, in order, never a copy: a rolling layer's
    // range that crosses the ring's end is two pieces (kernels/scale_similarity.h reads them so).
    std::vector<at::Tensor> key_pieces(int64_t layer, int64_t start, int64_t length) const;

    // Compact mode: the layer's buffer holds at least `tokens` slots from now on (grows it now if
    // needed); later growth allocates at least this much. No-op in preallocated mode.
    void reserve(int64_t layer, int64_t tokens);
    // Compact mode: makes `layer` rolling: its first `pinned` tokens stay, the others roll
    // through `window` slots (see above). The tokens written so far (staged ones excluded) must
    // number between pinned and pinned + window. The buffer is resized to pinned + window slots
    // (a copy only when its size or the ring changes). Throws in preallocated mode.
    void set_window(int64_t layer, int64_t pinned, int64_t window);
    bool is_rolling(int64_t layer) const { return layers_.at(layer).window > 0; }

    bool is_compact() const { return compact_; }
    int64_t length(int64_t layer) const { return layers_.at(layer).length; }
    int64_t layers() const { return static_cast<int64_t>(layers_.size()); }
    int64_t bytes(int64_t layer) const;  // bytes of live keys + values in `layer`
    int64_t total_bytes() const;
    // Bytes the cache owns now: the preallocated buffers, or the compact buffers (their slots).
    int64_t allocated_bytes() const;
    // Highest allocated_bytes() so far, including the moment a compact layer holds both its old
    // and its new buffer.
    int64_t peak_bytes() const { return peak_; }
    int64_t token_bytes() const;  // bytes of one token's key + value over the batch and heads

  private:
    struct Layer {
        // Preallocated: (B, H, capacity, c). Compact: (B, capacity, H, c) or undefined.
        at::Tensor k, v;
        std::vector<at::Tensor> staged_k, staged_v;  // compact: appends not yet written
        int64_t length = 0;                          // tokens: written + staged
        int64_t stored = 0;                          // compact: tokens written to the buffer
        int64_t reserve = 0;                         // compact: least buffer size
        int64_t pinned = 0, window = 0;              // compact rolling layer; window 0 = linear
        int64_t head = 0;                            // rolling: next ring slot to write
    };
    KvCache(int64_t layers, int64_t batch, int64_t heads, int64_t head_dim,
            const at::TensorOptions& options, bool compact);
    // Pieces of the layer in sequence order (written first, then staged), keys or values, each
    // (B, H, l, c).
    std::vector<at::Tensor> pieces(const Layer& l, bool values) const;
    // Token-major slots [start, start + n) of a compact buffer as (B, H, n, c).
    static at::Tensor slots(const at::Tensor& buffer, int64_t start, int64_t n);
    // Copies the given token ranges (sequence order) into slots [0, kept) of new compact
    // buffers of `capacity` slots, which replace the layer's: it becomes linear.
    void rebuild(Layer& l, const std::vector<std::pair<int64_t, int64_t>>& ranges,
                 int64_t capacity);
    void write_staged(Layer& l);  // compact: staged tokens into the buffer
    int64_t capacity(const Layer& l) const;
    void check_layer(int64_t layer) const;

    bool compact_;
    int64_t batch_, heads_, head_dim_;
    at::TensorOptions options_;
    std::vector<Layer> layers_;
    int64_t held_ = 0;  // compact: bytes of the buffers
    int64_t peak_ = 0;
};

}  // namespace varscope
