// Key lists of gathered sparse attention, one CTA per list (kernels/key_lists.h). The source ids
// are ascending and the map strictly increasing, so the mapped ids are ascending and distinct and
// those below `sinks` are a prefix: the list is the sinks, then the mapped ids from that prefix's
// end, with no sort.
#include "kernels/cuda/key_lists_params.h"

namespace varscope::kernels::cuda {
namespace {

constexpr int kThreads = 128;

__device__ __forceinline__ int64_t mapped(const KeyListsParams& p, int64_t id) {
    return p.point_map ? p.point_map[id] : id;
}

__global__ void __launch_bounds__(kThreads) key_lists_kernel(const KeyListsParams p) {
    __shared__ int below;
    // 32-bit division (the lists number fewer than 2^31): a 64-bit one is a call that spills.
    const int groups = static_cast<int>(p.groups);
    const int64_t r = blockIdx.x, list = static_cast<int>(blockIdx.x) / groups,
                  g = static_cast<int>(blockIdx.x) % groups;
    const int64_t sg = p.blocks ? p.blocks[g] : g;
    const int64_t src_row = list * p.source_groups + sg;
    const int64_t* src = p.source + src_row * p.source_width;
    const int64_t n = p.source_counts ? p.source_counts[src_row] : p.source_width;
    if (threadIdx.x == 0) below = 0;
    __syncthreads();
    int mine = 0;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) mine += mapped(p, src[i]) < p.sinks;
    if (mine) atomicAdd(&below, mine);
    __syncthreads();
    const int64_t skip = below, total = p.sinks + n - skip;
    int64_t* keys = p.keys + r * p.width;
    int32_t* attn = p.attn_keys + r * p.width;
    const int64_t offset = list * p.offset_stride;
    for (int64_t j = threadIdx.x; j < p.width; j += kThreads) {
        const int64_t v =
            j < p.sinks ? j : (j < total ? mapped(p, src[j - p.sinks + skip]) : p.kv_len);
        keys[j] = v;
        attn[j] = j < total ? static_cast<int32_t>(v + offset) : -1;
    }
    if (threadIdx.x == 0) {
        p.counts[r] = total;
        p.attn_counts[r] = static_cast<int32_t>(total);
        if (p.pairs) {
            const int64_t rows = min(p.query_block, max(p.q_len - g * p.query_block, int64_t{0}));
            // Integer-valued terms: the sum is exact whatever order the atomics take.
            atomicAdd(p.pairs, static_cast<double>(total * rows) * p.pair_scale);
        }
    }
}

}  // namespace

cudaError_t launch_key_lists(const KeyListsParams& p, cudaStream_t stream) {
    const int64_t n = p.lists * p.groups;
    if (n == 0) return cudaSuccess;
    key_lists_kernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(p);
    return cudaGetLastError();
}

}  // namespace varscope::kernels::cuda
