#include "kernels/cuda/key_lists_cuda.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <climits>

#include "kernels/cuda/key_lists_params.h"
#include "kernels/cuda/torch_glue.h"

namespace varscope::kernels::cuda {
namespace {

const int64_t* ids_of(const at::Tensor& t) {
    return t.defined() ? t.data_ptr<int64_t>() : nullptr;
}

}  // namespace

GatheredKeyLists key_lists(const at::Tensor& source_in, const at::Tensor& source_counts,
                           const at::Tensor& blocks, const at::Tensor& point_map,
                           const KeyListsSpec& spec, const at::Tensor& pairs, double pair_scale) {
    const c10::cuda::CUDAGuard guard(source_in.device());
    const auto source = source_in.contiguous();
    const auto counts = source_counts.defined() ? source_counts.contiguous() : at::Tensor();
    const auto block_map = blocks.defined() ? blocks.contiguous() : at::Tensor();
    const auto map = point_map.defined() ? point_map.contiguous() : at::Tensor();
    const int64_t P = source.size(0), G = block_map.defined() ? block_map.size(0) : source.size(1);
    const int64_t s = std::min(spec.sinks, spec.kv_len), W = s + source.size(2);
    TORCH_CHECK(P * G < INT_MAX, "key lists: too many lists for one launch");
    const auto lopt = source.options();
    GatheredKeyLists r;
    r.keys = at::empty({P, G, W}, lopt);
    r.counts = at::empty({P, G}, lopt);
    r.attn_keys = at::empty({P * G, W}, lopt.dtype(at::kInt));
    r.attn_counts = at::empty({P * G}, lopt.dtype(at::kInt));
    KeyListsParams p;
    p.source = ids_of(source);
    p.source_counts = ids_of(counts);
    p.blocks = ids_of(block_map);
    p.point_map = ids_of(map);
    p.lists = P;
    p.groups = G;
    p.source_groups = source.size(1);
    p.source_width = source.size(2);
    p.width = W;
    p.sinks = s;
    p.kv_len = spec.kv_len;
    p.query_block = spec.query_block;
    p.q_len = spec.q_len;
    p.offset_stride = spec.offset_stride;
    p.keys = r.keys.data_ptr<int64_t>();
    p.counts = r.counts.data_ptr<int64_t>();
    p.attn_keys = r.attn_keys.data_ptr<int32_t>();
    p.attn_counts = r.attn_counts.data_ptr<int32_t>();
    // The caller's scalar itself (a view into its counter): updated in place.
    p.pairs = pairs.defined() ? pairs.data_ptr<double>() : nullptr;
    p.pair_scale = pair_scale;
    check_cuda(launch_key_lists(p, stream_of(source)), "key lists kernel");
    return r;
}

}  // namespace varscope::kernels::cuda
