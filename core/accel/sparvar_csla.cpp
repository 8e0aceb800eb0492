#include "core/accel/sparvar_csla.h"

#include <ATen/ATen.h>

#include <limits>

#include "core/models/var.h"

namespace varscope::sparvar {

bool CslaScaleMask::dense() const {
    return attend.all().item<bool>();
}

CslaScaleMask build_csla_scale_mask(const std::vector<int64_t>& patch_nums, int64_t scale,
                                    const CslaSpec& spec, int64_t block, bool token_mode) {
    CslaScaleMask m;
    m.token = csla_token_mask(patch_nums, scale, spec);
    m.block = csla_block_mask(m.token, block, block);
    m.attend = token_mode
                   ? m.token
                   : expand_block_mask(m.block, block, block, m.token.size(0), m.token.size(1));
    m.token_sparsity = mask_sparsity(m.token);
    m.block_sparsity = mask_sparsity(m.block);
    return m;
}

at::Tensor additive_mask(const at::Tensor& attend, const at::TensorOptions& options) {
    return at::zeros(attend.sizes(), options)
        .masked_fill_(attend.to(options.device()).logical_not(),
                      -std::numeric_limits<float>::infinity());
}

at::Tensor csla_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          double softmax_scale, const at::Tensor& attend) {
    return attention_sdpa(q, k, v, softmax_scale, additive_mask(attend, q.options()));
}

}  // namespace varscope::sparvar
