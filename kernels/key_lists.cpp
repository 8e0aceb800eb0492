#include "kernels/key_lists.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <climits>
#include <utility>

#include "kernels/cuda_path.h"

#ifdef VARSCOPE_KERNELS_CUDA
#include "kernels/cuda/key_lists_cuda.h"
#endif

namespace varscope::kernels {
namespace {

void check_index(const at::Tensor& t, int64_t dim, const at::Tensor& source, const char* name) {
    if (!t.defined()) return;
    TORCH_CHECK(t.dim() == dim && t.scalar_type() == at::kLong, "key lists: ", name, " must be a ",
                dim, "-D int64 tensor, got ", t.sizes(), " ", t.scalar_type());
    TORCH_CHECK(t.device() == source.device(), "key lists: ", name, " must be on ", source.device(),
                ", got ", t.device());
}

void check_inputs(const at::Tensor& source, const at::Tensor& source_counts,
                  const at::Tensor& blocks, const at::Tensor& point_map, const KeyListsSpec& spec,
                  const at::Tensor& pairs) {
    TORCH_CHECK(source.defined() && source.dim() == 3 && source.scalar_type() == at::kLong,
                "key lists: source must be int64 (P, G_s, W_s)");
    check_index(source_counts, 2, source, "source_counts");
    check_index(blocks, 1, source, "blocks");
    check_index(point_map, 1, source, "point_map");
    if (source_counts.defined())
        TORCH_CHECK(
            source_counts.size(0) == source.size(0) && source_counts.size(1) == source.size(1),
            "key lists: source_counts ", source_counts.sizes(), " must be (P, G_s) of ",
            source.sizes());
    TORCH_CHECK(spec.sinks >= 0 && spec.kv_len >= 1 && spec.query_block >= 1 && spec.q_len >= 0 &&
                    spec.offset_stride >= 0,
                "key lists: sinks, q_len and offset_stride must be >= 0, kv_len and query_block "
                ">= 1");
    const int64_t groups = blocks.defined() ? blocks.size(0) : source.size(1);
    TORCH_CHECK(groups * spec.query_block >= spec.q_len, "key lists: ", groups, " query blocks of ",
                spec.query_block, " rows do not cover ", spec.q_len, " queries");
    TORCH_CHECK(source.size(0) * spec.offset_stride + spec.kv_len <= INT_MAX,
                "key lists: the attention ids would not fit in int32");
    if (pairs.defined())
        TORCH_CHECK(pairs.numel() == 1 && pairs.scalar_type() == at::kDouble &&
                        pairs.device() == source.device(),
                    "key lists: pairs must be one float64 on ", source.device());
}

}  // namespace

namespace reference {

GatheredKeyLists key_lists(const at::Tensor& source, const at::Tensor& source_counts,
                           const at::Tensor& blocks, const at::Tensor& point_map,
                           const KeyListsSpec& spec, const at::Tensor& pairs, double pair_scale) {
    check_inputs(source, source_counts, blocks, point_map, spec, pairs);
    const auto lopt = source.options();
    const int64_t P = source.size(0), Ws = source.size(2), pad = spec.kv_len;
    const auto ids = blocks.defined() ? source.index_select(1, blocks) : source;
    const int64_t G = ids.size(1);
    const auto counts_in =
        !source_counts.defined()
            ? at::full({P, G}, Ws, lopt)
            : (blocks.defined() ? source_counts.index_select(1, blocks) : source_counts);
    const auto valid = at::arange(Ws, lopt).lt(counts_in.unsqueeze(-1));
    const auto mapped =
        point_map.defined()
            ? point_map.index_select(0, ids.clamp(0, point_map.size(0) - 1).reshape({-1}))
                  .view(ids.sizes())
            : ids;
    const auto target = at::where(valid, mapped, at::full({}, pad, lopt));
    // The sinks first (repeats of them in the list become padding), then ascending unique ids:
    // sort, turn repeats into padding, sort again.
    const int64_t s = std::min(spec.sinks, spec.kv_len);
    auto sorted = std::get<0>(
        at::cat({at::arange(s, lopt).expand({P, G, s}), target.masked_fill(target.lt(s), pad)}, -1)
            .sort(-1));
    const int64_t W = sorted.size(-1);
    if (W > 1) {
        const auto repeat = sorted.narrow(-1, 1, W - 1).eq(sorted.narrow(-1, 0, W - 1));
        sorted.narrow(-1, 1, W - 1).masked_fill_(repeat, pad);
        sorted = std::get<0>(sorted.sort(-1));
    }
    GatheredKeyLists r;
    r.keys = sorted;
    r.counts = sorted.lt(pad).sum(-1);
    const auto offset = at::arange(P, lopt).mul(spec.offset_stride).view({P, 1, 1});
    r.attn_keys = at::where(sorted.lt(pad), sorted + offset, at::full({}, -1, lopt))
                      .reshape({P * G, W})
                      .to(at::kInt);
    r.attn_counts = r.counts.reshape({P * G}).to(at::kInt);
    if (pairs.defined()) {
        // Rows of each query block: C, the last one what is left of q_len.
        const auto rows =
            (spec.q_len - at::arange(G, lopt).mul(spec.query_block)).clamp(0, spec.query_block);
        pairs.add_(r.counts.mul(rows).sum().to(at::kDouble).mul(pair_scale).view(pairs.sizes()));
    }
    return r;
}

}  // namespace reference

bool cuda_key_lists_supported(const at::Tensor& source, const at::Tensor& point_map,
                              const KeyListsSpec& spec, const KernelPolicy& policy,
                              std::string* why_not) {
    if (!source.defined()) return unsupported(why_not, "an undefined tensor");
    if (auto why = cuda_path_blocker(policy, {source}); !why.empty())
        return unsupported(why_not, std::move(why));
    if (point_map.defined() && !spec.increasing_map)
        return unsupported(why_not, "the CUDA key lists need a strictly increasing point map");
    return true;
}

GatheredKeyLists key_lists(const at::Tensor& source, const at::Tensor& source_counts,
                           const at::Tensor& blocks, const at::Tensor& point_map,
                           const KeyListsSpec& spec, const at::Tensor& pairs, double pair_scale,
                           KernelPath path, const KernelPolicy& policy) {
    check_inputs(source, source_counts, blocks, point_map, spec, pairs);
    if (path != KernelPath::Reference) {
        std::string why;
        const bool ok = cuda_key_lists_supported(source, point_map, spec, policy, &why);
        TORCH_CHECK(ok || path != KernelPath::Cuda, "CUDA key lists requested but ", why);
#ifdef VARSCOPE_KERNELS_CUDA
        if (ok)
            return cuda::key_lists(source, source_counts, blocks, point_map, spec, pairs,
                                   pair_scale);
#endif
    }
    return reference::key_lists(source, source_counts, blocks, point_map, spec, pairs, pair_scale);
}

}  // namespace varscope::kernels
