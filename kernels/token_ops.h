// Fused per-token operations of the token-level accelerators, with LibTorch references beside
// them. Each entry point picks the CUDA kernel for CUDA tensors when this build has kernels for
// the device, and the reference otherwise; KernelPolicy::reference (exec_policy.h) always selects
// the reference.
//
//   FastVAR pivotal token selection (fastvar.txt §3.2): score_n = ||x_n - mean_m x_m||^2 over the
//   channels, then the K highest-scoring tokens of each row (ascending ids; ties to the lower id).
//   LazyVAR update index (lazyvar.txt): 1 - cos(f_prev, f_next) along the channels, per position.
//
// Both compute in float32 whatever the input precision, as the references do.
#pragma once

#include <ATen/ATen.h>

#include <string>

#include "kernels/attention_dispatch.h"

namespace varscope::kernels {

struct PivotalSelection {
    at::Tensor scores;  // float32 (R, N)
    at::Tensor kept;    // int64 (R, K): the K highest scores of each row, ids ascending
};

// x (R, N, C), float32/float16/bfloat16 -> float32 (R, N).
at::Tensor pivotal_scores(const at::Tensor& x, KernelPath path = KernelPath::Auto,
                          const KernelPolicy& policy = {});

// The ids of the `keep` (1..N) highest scores of each row of (R, N) scores, ascending; among equal
// scores the lower ids first, NaN above every number (the reference: a stable descending sort; on
// CUDA one radix-select kernel, the same ids).
at::Tensor top_rows(const at::Tensor& scores, int64_t keep, KernelPath path = KernelPath::Auto,
                    const KernelPolicy& policy = {});

// Scores and the `keep` (1..N) highest-scoring tokens of each row (top_rows of the scores).
PivotalSelection pivotal_token_selection(const at::Tensor& x, int64_t keep,
                                         KernelPath path = KernelPath::Auto,
                                         const KernelPolicy& policy = {});

// f_prev, f_next (B, C, H, W) (or any (B, C, ...)) -> float32 (B, H, W): 1 - dot / max(|a| |b|,
// 1e-12) along C.
at::Tensor update_index(const at::Tensor& f_prev, const at::Tensor& f_next,
                        KernelPath path = KernelPath::Auto, const KernelPolicy& policy = {});

// Whether the CUDA token kernels would run for x (device, dtype, build, policy).
bool cuda_token_ops_supported(const at::Tensor& x, const KernelPolicy& policy = {},
                              std::string* why_not = nullptr);

namespace reference {
at::Tensor pivotal_scores(const at::Tensor& x);
at::Tensor top_rows(const at::Tensor& scores, int64_t keep);
PivotalSelection pivotal_token_selection(const at::Tensor& x, int64_t keep);
at::Tensor update_index(const at::Tensor& f_prev, const at::Tensor& f_next);
}  // namespace reference

}  // namespace varscope::kernels
