// SparVAR's Cross-Scale Local Sparse Attention (CSLA, sparvar.txt §3.3) as a reference: the
// per-scale mask (token mask of csla_mask.h, its block mask, and the token-level mask that the
// block kernel effectively computes) and attention restricted to it.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "core/accel/csla_mask.h"

namespace varscope::sparvar {

struct CslaScaleMask {
    at::Tensor token;   // bool (Lq, Lk): the paper's M^(k)
    at::Tensor block;   // bool (ceil(Lq/B), ceil(Lk/B)): Eq. 3
    at::Tensor attend;  // bool (Lq, Lk): what attention may use (block expansion or token mask)
    double token_sparsity = 0.0;
    double block_sparsity = 0.0;
    bool dense() const;  // attend is all true: nothing is masked
};

// token_mode = false: attention over every token of an active block (the block kernel, the
// paper's default); true: the token-wise mask (Table 1's "sdpa + sparse mask" row).
CslaScaleMask build_csla_scale_mask(const std::vector<int64_t>& patch_nums, int64_t scale,
                                    const CslaSpec& spec, int64_t block, bool token_mode);

// Additive mask (Lq, Lk): 0 where `attend` is true, -inf elsewhere; dtype and device of options.
at::Tensor additive_mask(const at::Tensor& attend, const at::TensorOptions& options);

// Attention of q (B, H, Lq, d) over k, v (B, H, Lk, d) where `attend` (Lq, Lk) is true, through
// an additive -inf mask; q's dtype. Every query keeps its own token, so no row is empty.
at::Tensor csla_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          double softmax_scale, const at::Tensor& attend);

}  // namespace varscope::sparvar
