// Launcher of the key-list kernel (key_lists.cu). Plain C++ so the .cu file never includes
// LibTorch. Every array is contiguous.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace varscope::kernels::cuda {

// For each of P * G output lists r = p * G + g: source row (p, blocks[g] or g), its first
// source_counts[...] (or source_width) ascending ids, mapped through point_map (strictly
// increasing) when given, ids below `sinks` dropped, the sinks [0, sinks) in front, padding
// kv_len (keys) and -1 (attn_keys) behind.
struct KeyListsParams {
    const int64_t* source = nullptr;         // (P, source_groups, source_width)
    const int64_t* source_counts = nullptr;  // (P, source_groups) or null: all valid
    const int64_t* blocks = nullptr;         // (groups) or null: identity
    const int64_t* point_map = nullptr;      // or null: identity
    int64_t lists = 0, groups = 0, source_groups = 0, source_width = 0, width = 0;
    int64_t sinks = 0, kv_len = 0, query_block = 1, q_len = 0, offset_stride = 0;
    int64_t* keys = nullptr;         // (P * groups, width)
    int64_t* counts = nullptr;       // (P * groups)
    int32_t* attn_keys = nullptr;    // (P * groups, width)
    int32_t* attn_counts = nullptr;  // (P * groups)
    double* pairs = nullptr;         // one float64, or null
    double pair_scale = 1.0;
};

cudaError_t launch_key_lists(const KeyListsParams& p, cudaStream_t stream);

}  // namespace varscope::kernels::cuda
