// Cases and a set-based oracle for kernels/key_lists.h, shared by the CPU test of the reference
// and the GPU test of the CUDA kernel.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kernels/key_lists.h"

namespace varscope::testing {

struct KeyListCase {
    std::string name;
    at::Tensor source, counts, blocks, map;  // CPU, int64
    kernels::KeyListsSpec spec;
};

struct KeyListWant {
    at::Tensor keys, counts, attn_keys, attn_counts;
    double pairs = 0.0;
};

// Ascending distinct ids in [0, kv) for each of (P, G, W) rows; `full`: all W valid, otherwise
// a random count per row (the rest padded with kv).
inline std::pair<at::Tensor, at::Tensor> ascending_rows(int64_t P, int64_t G, int64_t W, int64_t kv,
                                                        bool full) {
    const auto order = at::rand({P * G, kv}).argsort(/*dim=*/int64_t{-1}).narrow(-1, 0, W);
    auto ids = std::get<0>(order.sort(-1)).view({P, G, W}).contiguous();
    auto counts = full ? at::full({P, G}, W, at::kLong) : at::randint(0, W + 1, {P, G}, at::kLong);
    if (!full) ids.masked_fill_(at::arange(W, at::kLong).ge(counts.unsqueeze(-1)), kv);
    return std::make_pair(ids, counts);
}

// A strictly increasing map from kv_source ids into [0, kv_target).
inline at::Tensor increasing_map(int64_t kv_source, int64_t kv_target) {
    const auto picks = at::rand({kv_target}).argsort(/*dim=*/int64_t{0}).narrow(0, 0, kv_source);
    return std::get<0>(picks.sort()).contiguous();
}

inline std::vector<KeyListCase> key_list_cases() {
    std::vector<KeyListCase> out;
    // Fields in order: sinks, kv_len, query_block, q_len, offset_stride, increasing_map.
    using Spec = kernels::KeyListsSpec;
    {  // decision scale: Top-k ids, every entry valid, sinks in and out of the list
        auto [ids, counts] = ascending_rows(4, 3, 9, 40, true);
        out.push_back({"decision", ids, {}, {}, {}, Spec{6, 40, 5, 13, 40, false}});
        out.push_back({"decision no sinks", ids, {}, {}, {}, Spec{0, 40, 5, 11, 40, false}});
        out.push_back({"sinks beyond kv", ids, {}, {}, {}, Spec{55, 40, 5, 15, 40, false}});
    }
    {  // a later scale: counts, the block homography, an increasing point map
        auto [ids, counts] = ascending_rows(3, 4, 12, 50, false);
        const auto blocks = at::tensor({0, 0, 1, 2, 2, 3, 3}, at::kLong);
        const auto map = increasing_map(50, 130);
        out.push_back({"mapped", ids, counts, blocks, map, Spec{7, 130, 6, 40, 130, true}});
        out.push_back(
            {"mapped, wide stride", ids, counts, blocks, map, Spec{1, 130, 64, 400, 1000, true}});
        out.push_back({"empty rows", ids.narrow(2, 0, 1).contiguous() * 0,
                       at::zeros({3, 4}, at::kLong), blocks, map, Spec{3, 130, 6, 42, 130, true}});
    }
    {  // the size SparVAR meets at 1024^2: 2 x 16 heads, 9 blocks from 6
        auto [ids, counts] = ascending_rows(32, 6, 626, 2521, false);
        const auto blocks = at::tensor({0, 1, 1, 2, 3, 3, 4, 5, 5}, at::kLong);
        out.push_back({"large", ids, counts, blocks, increasing_map(2521, 4121),
                       Spec{121, 4121, 192, 1600, 4121, true}});
    }
    return out;
}

inline KeyListWant key_list_oracle(const KeyListCase& c, double pair_scale) {
    const int64_t P = c.source.size(0), Gs = c.source.size(1), Ws = c.source.size(2);
    const int64_t G = c.blocks.defined() ? c.blocks.size(0) : Gs;
    const int64_t s = std::min(c.spec.sinks, c.spec.kv_len), W = s + Ws;
    KeyListWant w;
    w.keys = at::full({P, G, W}, c.spec.kv_len, at::kLong);
    w.counts = at::zeros({P, G}, at::kLong);
    w.attn_keys = at::full({P * G, W}, -1, at::kInt);
    w.attn_counts = at::zeros({P * G}, at::kInt);
    const auto src = c.source.contiguous();
    const auto sa = src.accessor<int64_t, 3>();
    auto ka = w.keys.accessor<int64_t, 3>();
    auto ca = w.counts.accessor<int64_t, 2>();
    auto aa = w.attn_keys.accessor<int32_t, 2>();
    auto ac = w.attn_counts.accessor<int32_t, 1>();
    const auto map = c.map.defined() ? c.map.contiguous() : at::Tensor();
    const int64_t* m = map.defined() ? map.data_ptr<int64_t>() : nullptr;
    for (int64_t p = 0; p < P; ++p)
        for (int64_t g = 0; g < G; ++g) {
            const int64_t sg = c.blocks.defined() ? c.blocks[g].item<int64_t>() : g;
            const int64_t n = c.counts.defined() ? c.counts[p][sg].item<int64_t>() : Ws;
            std::set<int64_t> keys;
            for (int64_t j = 0; j < s; ++j) keys.insert(j);
            for (int64_t i = 0; i < n; ++i) keys.insert(m ? m[sa[p][sg][i]] : sa[p][sg][i]);
            int64_t j = 0;
            for (const int64_t k : keys) {
                ka[p][g][j] = k;
                aa[p * G + g][j] = static_cast<int32_t>(k + p * c.spec.offset_stride);
                ++j;
            }
            ca[p][g] = j;
            ac[p * G + g] = static_cast<int32_t>(j);
            const int64_t rows =
                std::clamp<int64_t>(c.spec.q_len - g * c.spec.query_block, 0, c.spec.query_block);
            w.pairs += static_cast<double>(j * rows) * pair_scale;
        }
    return w;
}

}  // namespace varscope::testing
