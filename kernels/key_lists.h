// Key lists of gathered sparse attention (SparVAR's CS4A, sparvar.txt App. A): from each query
// block's ascending kept-key ids, the list the block attends to: the sink keys [0, sinks) first,
// then the kept ids (moved to a larger scale by a point map, optionally), ascending, padded; and
// the same list as the gathered-attention kernel reads it (each (batch row, head) its own stretch
// of one long sequence). The LibTorch reference sorts and removes repeats (any map); the CUDA
// kernel writes every list in one launch, for ascending ids under a strictly increasing map (the
// caller says so: KeyListsSpec::increasing_map), replacing about twenty ATen launches per layer.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "kernels/attention_dispatch.h"

namespace varscope::kernels {

struct KeyListsSpec {
    int64_t sinks = 0;          // keys [0, sinks) lead every list (capped at kv_len)
    int64_t kv_len = 0;         // keys of the target sequence: the padding value of `keys`
    int64_t query_block = 1;    // query rows per block ...
    int64_t q_len = 0;          // ... of q_len rows (the last block may be partial): the pair count
    int64_t offset_stride = 0;  // attention ids: key + p * offset_stride for row group p
    bool increasing_map = false;  // point_map is strictly increasing (the CUDA kernel needs it
                                  // where a map is given)
};

struct GatheredKeyLists {
    at::Tensor keys;         // int64 (P, G, W): ascending kept keys, then kv_len
    at::Tensor counts;       // int64 (P, G)
    at::Tensor attn_keys;    // int32 (P * G, W): keys + p * offset_stride, then -1
    at::Tensor attn_counts;  // int32 (P * G)
};

// source: int64 (P, G_s, W_s), each row's first source_counts (P, G_s) entries (all W_s when
// source_counts is undefined) ascending distinct ids; blocks: int64 (G) source block of each
// target block (undefined: G = G_s, block g reads block g); point_map: int64 target id of every
// source id (undefined: ids stay). W = min(sinks, kv_len) + W_s. `pairs` (optional): a float64
// scalar on the lists' device that gets pair_scale * sum over lists of count * (rows of its query
// block) added, on the device (integer-valued, so exact in any order).
GatheredKeyLists key_lists(const at::Tensor& source, const at::Tensor& source_counts,
                           const at::Tensor& blocks, const at::Tensor& point_map,
                           const KeyListsSpec& spec, const at::Tensor& pairs = {},
                           double pair_scale = 1.0, KernelPath path = KernelPath::Auto,
                           const KernelPolicy& policy = {});

// Whether the CUDA kernel would run for these inputs (build, device, policy, the map's promise).
bool cuda_key_lists_supported(const at::Tensor& source, const at::Tensor& point_map,
                              const KeyListsSpec& spec, const KernelPolicy& policy = {},
                              std::string* why_not = nullptr);

namespace reference {
GatheredKeyLists key_lists(const at::Tensor& source, const at::Tensor& source_counts,
                           const at::Tensor& blocks, const at::Tensor& point_map,
                           const KeyListsSpec& spec, const at::Tensor& pairs = {},
                           double pair_scale = 1.0);
}  // namespace reference

}  // namespace varscope::kernels
