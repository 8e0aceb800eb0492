// The FLOPs one transformer block books for the cost model (step_cost.h), shared by the VAR and
// Infinity loops: both count 2 FLOPs per multiply-add from the shapes.
#pragma once

#include <ATen/core/Tensor.h>

#include "core/sampling/step_cost.h"

namespace varscope {

// The block's attention: the hook's own count when it attended and reported one (ctx's
// attention_flops >= 0), else dense softmax(QK^T)V over q (B, H, Lq, d) and k (B, H, Lk, d).
inline double block_attention_flops(const at::Tensor& hook_output, double hook_flops,
                                    const at::Tensor& q, const at::Tensor& k) {
    if (hook_output.defined() && hook_flops >= 0) return hook_flops;
    return 4.0 * static_cast<double>(q.size(0)) * q.size(1) * q.size(2) * k.size(2) * q.size(3);
}

// Projections of `projection_widths` x C outputs per row (VAR: QKV 3C + output C = 4), the FFN's
// two layers and the attention, for `rows` rows of width `width`.
inline void add_block_flops(const CostRecorder& rec, double rows, double width,
                            double projection_widths, double hidden, double attention_flops) {
    rec.add_flops(CostPart::Projection, 2.0 * rows * width * projection_widths * width);
    rec.add_flops(CostPart::Ffn, 4.0 * rows * width * hidden);
    rec.add_flops(CostPart::Attention, attention_flops);
}

}  // namespace varscope
