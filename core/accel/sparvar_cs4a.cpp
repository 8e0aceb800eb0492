#include "core/accel/sparvar_cs4a.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "core/accel/resample.h"
#include "kernels/key_lists.h"

namespace varscope::sparvar {
namespace {

std::vector<int64_t> scale_begins(const std::vector<int64_t>& pns) {
    std::vector<int64_t> begin(pns.size() + 1, 0);
    for (size_t s = 0; s < pns.size(); ++s) begin[s + 1] = begin[s] + pns[s] * pns[s];
    return begin;
}

void check_scales(const std::vector<int64_t>& pns, int64_t S, int64_t K) {
    if (S < 0 || K <= S || K >= static_cast<int64_t>(pns.size()))
        throw std::invalid_argument("sparvar: need 0 <= decision scale < target scale < " +
                                    std::to_string(pns.size()) + ", got S=" + std::to_string(S) +
                                    " K=" + std::to_string(K));
}

}  // namespace

at::Tensor block_column_sums(const at::Tensor& probs, int64_t query_block) {
    const int64_t lq = probs.size(2);
    const int64_t g = (lq + query_block - 1) / query_block;
    // Zero rows pad the last block; they add nothing to its sums.
    auto p = at::constant_pad_nd(probs.to(at::kFloat), {0, 0, 0, g * query_block - lq}, 0);
    return p.view({probs.size(0), probs.size(1), g, query_block, probs.size(3)}).sum(3);
}

int64_t top_k_count(double alpha, int64_t kv_len) {
    const auto k = static_cast<int64_t>(std::ceil(alpha * static_cast<double>(kv_len) - 1e-9));
    return std::clamp<int64_t>(k, 1, kv_len);
}

at::Tensor top_k_indices(const at::Tensor& column_sums, int64_t k) {
    auto idx = std::get<1>(column_sums.topk(k, -1, /*largest=*/true, /*sorted=*/true));
    return std::get<0>(idx.sort(-1));
}

at::Tensor selection_from_indices(const at::Tensor& indices, int64_t kv_len) {
    auto sizes = indices.sizes().vec();
    sizes.back() = kv_len;
    auto sel = at::zeros(sizes, indices.options().dtype(at::kBool));
    return sel.scatter_(-1, indices, true);
}

std::vector<int64_t> query_block_homography(int64_t target_blocks, int64_t source_blocks) {
    std::vector<int64_t> phi(target_blocks);
    for (int64_t g = 0; g < target_blocks; ++g) {
        const double x = (g + 0.5) / static_cast<double>(target_blocks) * source_blocks - 0.5;
        phi[g] = std::clamp<int64_t>(static_cast<int64_t>(std::nearbyint(x)), 0, source_blocks - 1);
    }
    return phi;
}

at::Tensor relative_scale_alignment(const std::vector<int64_t>& pns, int64_t S, int64_t K) {
    check_scales(pns, S, K);
    const auto begin = scale_begins(pns);
    auto map = at::empty({begin[S + 1]}, at::kLong);
    auto acc = map.accessor<int64_t, 1>();
    for (int64_t l = 0; l <= S; ++l) {
        const int64_t lt = K - (S - l);  // relative alignment: same distance to the query scale
        const int64_t h = pns[l], ht = pns[lt];
        for (int64_t d = 0; d < h * h; ++d) {
            const int64_t u = d / h, v = d % h;  // de-linearise, project with floor (Eq. 5)
            acc[begin[l] + d] = begin[lt] + (u * ht / h) * ht + (v * ht / h);
        }
    }
    return map;
}

at::Tensor patch_alignment(const std::vector<int64_t>& pns, int64_t S, int64_t K) {
    check_scales(pns, S, K);
    const auto begin = scale_begins(pns);
    auto map = at::full({begin[K + 1]}, -1, at::kLong);
    auto acc = map.accessor<int64_t, 1>();
    for (int64_t lt = K - S; lt <= K; ++lt) {
        const int64_t l = lt - (K - S);
        const int64_t h = pns[l], ht = pns[lt];
        // Target cell t belongs to the last source cell c with floor(c * ht / h) <= t, i.e.
        // c = ceil((t + 1) * h / ht) - 1 (grids grow with the scale, so the patches tile it).
        auto owner = [&](int64_t t) { return ((t + 1) * h + ht - 1) / ht - 1; };
        for (int64_t u = 0; u < ht; ++u)
            for (int64_t v = 0; v < ht; ++v)
                acc[begin[lt] + u * ht + v] = begin[l] + owner(u) * h + owner(v);
    }
    return map;
}

SelectionMap SelectionMap::to(const at::Device& device) const {
    return {blocks.to(device), keys.to(device), kv_len, patch, fanout, increasing};
}

SelectionMap selection_map(const std::vector<int64_t>& pns, int64_t S, int64_t K,
                           int64_t query_block, int64_t source_blocks, bool patch) {
    SelectionMap m;
    m.keys = patch ? patch_alignment(pns, S, K) : relative_scale_alignment(pns, S, K);  // checks
    const auto begin = scale_begins(pns);
    const int64_t n_k = pns[K] * pns[K];
    const int64_t g_k = (n_k + query_block - 1) / query_block;
    m.blocks = at::tensor(query_block_homography(g_k, source_blocks), at::kLong);
    m.kv_len = begin[K + 1];
    m.patch = patch;
    const int64_t n = m.keys.numel();
    m.increasing =
        !patch &&
        (n < 2 || m.keys.narrow(0, 1, n - 1).gt(m.keys.narrow(0, 0, n - 1)).all().item<bool>());
    if (patch) {
        const auto owners = m.keys.masked_select(m.keys.ge(0));
        m.fanout = owners.numel() > 0 ? at::bincount(owners).max().item<int64_t>() : 1;
    }
    return m;
}

at::Tensor map_selection(const at::Tensor& src, const SelectionMap& map, int64_t sink_tokens) {
    auto per_block = src.index_select(2, map.blocks);
    at::Tensor out;
    if (map.patch) {
        auto covered = map.keys.ge(0);
        out = per_block.index_select(3, map.keys.clamp_min(0)).logical_and(covered);
    } else {
        // Several source keys may land on one target key: OR them (amax over uint8).
        auto sizes = per_block.sizes().vec();
        sizes.back() = map.kv_len;
        auto idx = map.keys.expand(per_block.sizes());
        out = at::zeros(sizes, per_block.options().dtype(at::kByte))
                  .scatter_reduce(3, idx, per_block.to(at::kByte), "amax")
                  .to(at::kBool);
    }
    if (sink_tokens > 0) out.narrow(3, 0, std::min(sink_tokens, map.kv_len)).fill_(true);
    return out;
}

at::Tensor map_selection(const at::Tensor& src, const std::vector<int64_t>& pns, int64_t S,
                         int64_t K, int64_t query_block, int64_t sink_tokens, bool patch) {
    const auto map = selection_map(pns, S, K, query_block, src.size(2), patch).to(src.device());
    return map_selection(src, map, sink_tokens);
}

KeyLists per_head(const kernels::GatheredKeyLists& r, int64_t B, int64_t H) {
    const int64_t G = r.keys.size(1);
    return {r.keys.view({B, H, G, r.keys.size(2)}), r.counts.view({B, H, G})};
}

KeyLists decision_key_lists(const at::Tensor& top, int64_t sink_tokens, int64_t kv_len) {
    kernels::KeyListsSpec spec;
    spec.sinks = sink_tokens;
    spec.kv_len = kv_len;
    const int64_t B = top.size(0), H = top.size(1), G = top.size(2);
    spec.q_len = G;  // no pairs counted: any covering value
    const auto r =
        kernels::reference::key_lists(top.reshape({B * H, G, top.size(3)}), {}, {}, {}, spec);
    return per_head(r, B, H);
}

KeyLists map_key_lists(const KeyLists& src, const SelectionMap& map, int64_t sink_tokens) {
    TORCH_CHECK(!map.patch, "map_key_lists: the point mapping only");
    const int64_t B = src.keys.size(0), H = src.keys.size(1), G = src.keys.size(2);
    kernels::KeyListsSpec spec;
    spec.sinks = sink_tokens;
    spec.kv_len = map.kv_len;
    spec.q_len = map.blocks.size(0);
    const auto r =
        kernels::reference::key_lists(src.keys.reshape({B * H, G, src.keys.size(3)}),
                                      src.counts.reshape({B * H, G}), map.blocks, map.keys, spec);
    return per_head(r, B, H);
}

at::Tensor selection_from_lists(const KeyLists& lists, int64_t kv_len) {
    auto sizes = lists.keys.sizes().vec();
    sizes.back() = kv_len + 1;  // the padding lands in the extra column
    return at::zeros(sizes, lists.keys.options().dtype(at::kBool))
        .scatter_(-1, lists.keys, true)
        .narrow(-1, 0, kv_len);
}

at::Tensor expand_query_blocks(const at::Tensor& selection, int64_t query_block, int64_t q_len) {
    // Row r takes block r / C: an index_select, which needs no host sync (a graph captures it).
    const auto block_of_row =
        at::arange(q_len, selection.options().dtype(at::kLong)).div(query_block, "floor");
    return selection.index_select(2, block_of_row);
}

at::Tensor masked_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            double softmax_scale, const at::Tensor& mask) {
    auto scores =
        at::matmul(q.to(at::kFloat).mul(softmax_scale), k.to(at::kFloat).transpose(-2, -1));
    scores.masked_fill_(mask.logical_not(), -std::numeric_limits<float>::infinity());
    return at::matmul(at::softmax(scores, -1), v.to(at::kFloat));
}

at::Tensor upsample_cache(const at::Tensor& cache, int64_t pn_source, int64_t pn_target) {
    const int64_t B = cache.size(0), H = cache.size(1), d = cache.size(3);
    auto grid = cache.permute({0, 1, 3, 2}).reshape({B, H * d, pn_source, pn_source});
    auto up = upsample_bilinear_planes(grid, pn_target);
    return up.reshape({B, H, d, pn_target * pn_target}).permute({0, 1, 3, 2}).contiguous();
}

at::Tensor selection_lists(const at::Tensor& selection) {
    auto sel = selection[0].cpu();  // (H, G, Lk)
    const int64_t lk = sel.size(2);
    const int64_t width = sel.sum(-1).max().item<int64_t>();
    auto ids = at::arange(lk, at::kLong).expand_as(sel);
    auto keyed = at::where(sel, ids, at::full({}, lk, at::kLong));
    auto sorted = std::get<0>(keyed.sort(-1)).narrow(-1, 0, width);
    return sorted.masked_fill(sorted == lk, -1);
}

}  // namespace varscope::sparvar
