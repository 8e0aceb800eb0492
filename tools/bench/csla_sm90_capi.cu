// A C entry point to the sm_90a CSLA kernel, for tools/bench/csla_vs_torch.py: FlexAttention is
// Python-only, so timing it and our kernel in one process, call after call, needs our kernel
// reachable from Python. ctypes and raw device pointers keep this free of LibTorch and pybind.
//   nvcc -O3 -std=c++17 -shared -Xcompiler -fPIC -gencode=arch=compute_90a,code=sm_90a
//     --expt-relaxed-constexpr -I. tools/bench/csla_sm90_capi.cu
//     kernels/cuda/csla_attention_sm90_d{64,128}.cu kernels/block_list_order.cpp
//     -o libvarscope_csla_capi.so
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/block_list_order.h"
#include "kernels/cuda/attention_params.h"

namespace varscope::kernels::cuda {
cudaError_t launch_csla_sm90_d64_bf16(const AttentionParams&, cudaStream_t);
cudaError_t launch_csla_sm90_d128_bf16(const AttentionParams&, cudaStream_t);
}  // namespace varscope::kernels::cuda

namespace vc = varscope::kernels::cuda;

// Block-sparse attention of contiguous bf16 (batch, heads, len, head_dim) tensors. lists/counts are
// device int32 arrays: lists[qb * list_stride + i] (i < counts[qb]) are query block qb's active
// key blocks, in any order (core's list builder orders them with varscope_order_block_lists'
// rule). The dispatch's kernel for the head dim (12 at d128, 10 at d64). Returns a cudaError_t; 1
// (cudaErrorInvalidValue) for arguments the kernels do not take.
extern "C" int varscope_csla_sm90_bf16(const void* q, const void* k, const void* v, void* o,
                                       int batch, int heads, int len_q, int len_k, int head_dim,
                                       const int32_t* lists, const int32_t* counts, int list_stride,
                                       int block, void* stream) {
    if (q == nullptr || k == nullptr || v == nullptr || o == nullptr || lists == nullptr ||
        counts == nullptr || batch <= 0 || heads <= 0 || len_q <= 0 || len_k <= 0 ||
        list_stride <= 0 || (head_dim != 64 && head_dim != 128) || block <= 0 ||
        block % vc::kKeyTile != 0)
        return static_cast<int>(cudaErrorInvalidValue);
    vc::AttentionParams p;
    p.q = q;
    p.k = k;
    p.v = v;
    p.o = o;
    vc::set_contiguous_strides(p.q_stride, heads, len_q, head_dim);
    vc::set_contiguous_strides(p.o_stride, heads, len_q, head_dim);
    vc::set_contiguous_strides(p.k_stride, heads, len_k, head_dim);
    vc::set_contiguous_strides(p.v_stride, heads, len_k, head_dim);
    p.batch = batch;
    p.heads = heads;
    p.len_q = len_q;
    p.len_k = len_k;
    p.scale_log2 = vc::scale_log2_of(1.0 / std::sqrt(static_cast<double>(head_dim)));
    p.lists = lists;
    p.counts = counts;
    p.list_stride = list_stride;
    p.block_q = p.block_k = block;
    p.num_query_blocks = (len_q + block - 1) / block;
    const auto s = static_cast<cudaStream_t>(stream);
    return static_cast<int>(head_dim == 64 ? vc::launch_csla_sm90_d64_bf16(p, s)
                                           : vc::launch_csla_sm90_d128_bf16(p, s));
}

// Core's order of the lists (kernels/block_list_order.h), on host int32 arrays in the layout
// above, in place. Returns 0, or 1 for arguments it does not take.
extern "C" int varscope_order_block_lists(int32_t* lists, const int32_t* counts,
                                          int64_t num_query_blocks, int64_t list_stride) {
    if (lists == nullptr || counts == nullptr || num_query_blocks < 0 || list_stride <= 0) return 1;
    varscope::kernels::order_block_lists_for_shared_reads(lists, counts, num_query_blocks,
                                                          list_stride);
    return 0;
}
