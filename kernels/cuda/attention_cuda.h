// LibTorch-facing wrappers of the CUDA attention kernels (only built with CUDA). Inputs are
// validated by the dispatch (kernels/attention_dispatch.cpp); these check what the kernels need.
#pragma once

#include <string>

#include "kernels/attention_dispatch.h"

namespace varscope::kernels::cuda {

// Whether the kernels were compiled for this device's architecture.
bool device_has_kernel_image(int device, std::string* why_not);

// sm90: the sm_90a kernels where they apply (KernelPolicy::sm90_attention), else the sm_80 ones.
AttentionResult block_sparse_attention(const at::Tensor& q, const at::Tensor& k,
                                       const at::Tensor& v, const at::Tensor& block_indices,
                                       const at::Tensor& block_counts, int64_t block_q,
                                       int64_t block_k, double scale, bool return_lse,
                                       at::Tensor out, bool sm90);

AttentionResult gathered_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const at::Tensor& key_indices, const at::Tensor& key_counts,
                                   int64_t block_q, double scale, bool return_lse, at::Tensor out,
                                   bool sm90);

// lse (B, H, Lq), optional: given, only the column-sum pass runs (no LseOnly pass).
at::Tensor block_column_sum(const at::Tensor& q, const at::Tensor& k, int64_t block_q, double scale,
                            const at::Tensor& lse);

// Declared in attention_params.h too (the .cu side); here for the dispatch (no CUDA headers).
int sm90_ws_fallback_count();

}  // namespace varscope::kernels::cuda
