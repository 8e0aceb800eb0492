#include "core/sampling/grouped_step.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <limits>
#include <string>

#include "core/models/var.h"
#include "core/sampling/cuda_graph.h"

namespace varscope {

void plan_step_segments(ScaleContext& ctx, SamplingHooks* hooks, int64_t scales_run) {
    const int64_t si = ctx.scale;
    const int64_t group =
        hooks ? std::clamp<int64_t>(hooks->group_size(ctx), 1, scales_run - si) : 1;
    for (int64_t g = 0; g < group; ++g) {
        ScaleSegment seg;
        seg.scale = si + g;
        seg.patch_num = ctx.config.patch_nums[si + g];
        seg.token_begin = ctx.config.scale_begin(si + g);
        ctx.segments.push_back(seg);
    }
}

std::vector<int64_t> place_step_segments(ScaleContext& ctx, const at::Device& device,
                                         DenseStepGraphs* graphs) {
    int64_t offset = 0;
    std::vector<int64_t> layout;
    for (size_t g = 0; g < ctx.segments.size(); ++g) {
        auto& seg = ctx.segments[g];
        if (seg.rows.defined()) {
            seg.rows = seg.rows.to(at::kLong).to(device);
            TORCH_CHECK(seg.rows.dim() == 1 && seg.rows.numel() > 0,
                        "a policy pruned every token of scale ", seg.scale);
            if (graphs) {
                // The graph reads the rows from its own buffer; this call's values go in.
                const auto& rows = seg.rows;
                auto buffer = graphs->step_input(ctx.scale, "rows" + std::to_string(g),
                                                 [&] { return rows.clone(); });
                if (buffer.numel() == rows.numel()) buffer.copy_(rows);
                seg.rows = buffer.numel() == rows.numel() ? buffer : rows;
            }
        }
        seg.offset = offset;
        offset += seg.length();
        layout.insert(layout.end(), {seg.scale, seg.rows.defined() ? seg.rows.numel() : -1});
    }
    return layout;
}

at::Tensor group_mask(const std::vector<ScaleSegment>& segs, const at::TensorOptions& options) {
    std::vector<int64_t> seg_of_row;
    for (size_t i = 0; i < segs.size(); ++i)
        seg_of_row.insert(seg_of_row.end(), segs[i].length(), static_cast<int64_t>(i));
    const auto id = at::tensor(seg_of_row, at::kLong);
    const auto visible = id.unsqueeze(1) >= id.unsqueeze(0);
    return at::zeros(visible.sizes(), options)
        .masked_fill(visible.logical_not().to(options.device()),
                     -std::numeric_limits<double>::infinity());
}

at::Tensor step_group_mask(const ScaleContext& ctx, const at::TensorOptions& options,
                           DenseStepGraphs* graphs) {
    if (ctx.segments.size() < 2) return {};
    auto make = [&] { return group_mask(ctx.segments, options); };
    return graphs ? graphs->step_input(ctx.scale, "mask", make) : make();
}

at::Tensor block_group_mask(const at::Tensor& step_mask, const at::Tensor& rows, int64_t kv_len) {
    TORCH_CHECK(!rows.defined() || rows.dim() == 1,
                "per-row token selection cannot be used in grouped steps");
    const at::Tensor sm =
        rows.defined() ? step_mask.index_select(0, rows).index_select(1, rows) : step_mask;
    const int64_t earlier = kv_len - sm.size(1);
    TORCH_CHECK(earlier >= 0, "KV cache lost keys of the current grouped step");
    return at::cat({at::zeros({sm.size(0), earlier}, sm.options()), sm}, 1);
}

bool block_needs_group_mask(const at::Tensor& step_mask, const at::Tensor& rows, bool eager,
                            bool probe) {
    return step_mask.defined() && (rows.defined() || eager || probe);
}

at::Tensor grouped_attention_sdpa(const std::vector<ScaleSegment>& segs, const at::Tensor& q,
                                  const at::Tensor& k, const at::Tensor& v, double scale) {
    int64_t rows = 0;
    for (const auto& seg : segs) rows += seg.length();
    TORCH_CHECK(q.size(2) == rows, "grouped attention: ", q.size(2), " query rows for segments of ",
                rows);
    const int64_t earlier = k.size(2) - rows;
    TORCH_CHECK(earlier >= 0, "KV cache lost keys of the current grouped step");
    std::vector<at::Tensor> parts;
    parts.reserve(segs.size());
    for (const auto& seg : segs) {
        const int64_t visible = earlier + seg.offset + seg.length();
        parts.push_back(attention_sdpa(q.narrow(2, seg.offset, seg.length()),
                                       k.narrow(2, 0, visible), v.narrow(2, 0, visible), scale));
    }
    return at::cat(parts, 2);
}

at::Tensor step_attention_sdpa(const ScaleContext& ctx, const at::Tensor& step_mask,
                               const at::Tensor& rows, const at::Tensor& block_mask,
                               const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               double scale) {
    if (step_mask.defined() && !rows.defined())
        return grouped_attention_sdpa(ctx.segments, q, k, v, scale);
    return attention_sdpa(q, k, v, scale, block_mask);
}

}  // namespace varscope
