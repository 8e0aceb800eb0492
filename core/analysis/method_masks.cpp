#include "core/analysis/method_masks.h"

#include <ATen/ATen.h>

#include <stdexcept>

#include "core/accel/probe_kinds.h"

namespace varscope::analysis {
namespace {

std::string str(int64_t v) {
    return std::to_string(v);
}

bool is(const AccelRecord& r, const char* method, const char* kind) {
    return r.method == method && r.kind == kind;
}

void check_scale(const ScheduleLayout& layout, int64_t scale, const std::string& what) {
    if (scale < 0 || scale >= static_cast<int64_t>(layout.sides.size()))
        throw std::invalid_argument(what + " record of scale " + str(scale) +
                                    " does not fit the model's " +
                                    str(static_cast<int64_t>(layout.sides.size())) + " scales");
}

// Token pruning (FastVAR per layer, LazyVAR for all): a layer computes only the kept tokens of
// a pruned scale, and only their keys enter its cache, for that scale and every later one.
// kept: (scale, layer) -> bool (tokens); layer -1 = every layer.
void add_token_pruning(MaskSet& set, const std::map<std::pair<int64_t, int64_t>, at::Tensor>& kept,
                       const ScheduleLayout& layout) {
    const int64_t S = static_cast<int64_t>(layout.sides.size());
    for (int64_t l = 0; l < layout.layers; ++l) {
        std::vector<at::Tensor> per_scale(S);
        bool any = false;
        for (int64_t s = 0; s < S; ++s) {
            auto it = kept.find({s, l});
            if (it == kept.end()) it = kept.find({s, -1});
            if (it != kept.end()) {
                per_scale[s] = it->second;
                any = true;
            }
        }
        if (!any) continue;
        for (int64_t t = 0; t < S; ++t) {
            std::vector<at::Tensor> keys;
            bool pruned = false;
            for (int64_t j = 0; j <= t; ++j) {
                pruned = pruned || per_scale[j].defined();
                keys.push_back(per_scale[j].defined() ? per_scale[j]
                                                      : at::ones({layout.tokens(j)}, at::kBool));
            }
            if (!pruned) continue;
            KeepMask m;
            m.keys = at::cat(keys);
            if (per_scale[t].defined()) m.queries = per_scale[t];
            set.restrict(t, l, m);
        }
    }
}

at::Tensor kept_tokens(const AccelRecord& r, const ScheduleLayout& layout) {
    check_scale(layout, r.scale, r.method + " " + r.kind);
    if (!r.data.defined() || r.data.numel() != layout.tokens(r.scale))
        throw std::invalid_argument(r.method + " " + r.kind + " record of scale " + str(r.scale) +
                                    " does not hold one entry per token (" +
                                    str(layout.tokens(r.scale)) + ")");
    return r.data.reshape({-1}).to(at::kBool);
}

}  // namespace

int64_t ScheduleLayout::tokens_through(int64_t scale) const {
    int64_t n = 0;
    for (int64_t s = 0; s <= scale; ++s) n += tokens(s);
    return n;
}

const KeepMask& MaskSet::at(int64_t scale, int64_t layer) const {
    static const KeepMask all;
    const auto it = masks_.find({scale, layer});
    return it == masks_.end() ? all : it->second;
}

void MaskSet::restrict(int64_t scale, int64_t layer, const KeepMask& m) {
    const KeepMask s = simplified(m);
    if (s.keeps_all()) return;  // only entries that drop something are kept (and counted)
    auto& slot = masks_[{scale, layer}];
    slot = intersect(slot, s);
}

void add_skip_masks(MaskSet& set, const std::vector<ScaleRecord>& scales,
                    const ScheduleLayout& layout) {
    for (const auto& r : scales) {
        if (!r.skipped) continue;
        check_scale(layout, r.scale, "skipped-scale");
        KeepMask m;
        m.queries = at::zeros({layout.tokens(r.scale)}, at::kBool);
        for (int64_t l = 0; l < layout.layers; ++l) set.restrict(r.scale, l, m);
    }
}

void add_fastvar_masks(MaskSet& set, const std::vector<AccelRecord>& records,
                       const ScheduleLayout& layout) {
    std::map<std::pair<int64_t, int64_t>, at::Tensor> kept;
    for (const auto& r : records)
        if (is(r, "fastvar", probe_kinds::kPtsKept)) {
            if (r.layer < 0 || r.layer >= layout.layers)
                throw std::invalid_argument("fastvar pts_kept record of layer " + str(r.layer) +
                                            " does not fit the model's " + str(layout.layers) +
                                            " layers");
            kept[{r.scale, r.layer}] = kept_tokens(r, layout);
        }
    add_token_pruning(set, kept, layout);
}

void add_lazyvar_masks(MaskSet& set, const std::vector<AccelRecord>& records,
                       const ScheduleLayout& layout) {
    std::map<std::pair<int64_t, int64_t>, at::Tensor> kept;
    for (const auto& r : records)
        if (is(r, "lazyvar", probe_kinds::kLazyVarKept))
            kept[{r.scale, -1}] = kept_tokens(r, layout);
    add_token_pruning(set, kept, layout);
}

void add_ams_kv_masks(MaskSet& set, const std::vector<AccelRecord>& records,
                      const ScheduleLayout& layout) {
    const int64_t S = static_cast<int64_t>(layout.sides.size());
    for (const auto& r : records) {
        if (!is(r, "ams_kv", probe_kinds::kKvOccupancy)) continue;
        check_scale(layout, r.scale, "ams_kv kv_occupancy");
        if (!r.data.defined() || r.data.dim() != 2 || r.data.size(0) != layout.layers ||
            r.data.size(1) != S)
            throw std::invalid_argument("ams_kv kv_occupancy record of scale " + str(r.scale) +
                                        " is not (layers " + str(layout.layers) + ", scales " +
                                        str(S) + ")");
        const auto occ = r.data.to(at::kLong).contiguous();
        const auto acc = occ.accessor<int64_t, 2>();
        for (int64_t l = 0; l < layout.layers; ++l) {
            std::vector<at::Tensor> keys;
            bool evicted = false;
            for (int64_t j = 0; j <= r.scale; ++j) {
                const int64_t n = layout.tokens(j);
                const int64_t held = std::min(std::max(acc[l][j], int64_t{0}), n);
                evicted = evicted || held < n;
                // CLRU keeps a scale's most recent rows: the last `held` tokens.
                auto k = at::zeros({n}, at::kBool);
                k.narrow(0, n - held, held).fill_(true);
                keys.push_back(k);
            }
            if (!evicted) continue;
            KeepMask m;
            m.keys = at::cat(keys);
            set.restrict(r.scale, l, m);
        }
    }
}

void add_sparvar_masks(MaskSet& set, const std::vector<AccelRecord>& records,
                       const SparVarConfig& config, const ScheduleLayout& layout) {
    const int64_t cs4a_layers = config.cs4a_layers(layout.layers);
    const char* csla_kind =
        config.token_mask ? probe_kinds::kCslaTokenMask : probe_kinds::kCslaBlockMask;
    for (const auto& r : records) {
        if (is(r, "sparvar", csla_kind)) {
            check_scale(layout, r.scale, std::string("sparvar ") + csla_kind);
            const int64_t block = config.token_mask ? 1 : config.block;
            KeepMask m;
            m.pairs = r.data.to(at::kBool).unsqueeze(0);
            m.block_q = block;
            m.block_k = block;
            const int64_t gq = (layout.tokens(r.scale) + block - 1) / block;
            const int64_t gk = (layout.tokens_through(r.scale) + block - 1) / block;
            if (r.data.dim() != 2 || r.data.size(0) != gq || r.data.size(1) != gk)
                throw std::invalid_argument("sparvar " + std::string(csla_kind) +
                                            " record of scale " + str(r.scale) + " is not (" +
                                            str(gq) + ", " + str(gk) + ")");
            for (int64_t l = cs4a_layers; l < layout.layers; ++l) set.restrict(r.scale, l, m);
        } else if (is(r, "sparvar", probe_kinds::kCs4aMapped)) {
            check_scale(layout, r.scale, "sparvar cs4a_mapped");
            const int64_t lk = layout.tokens_through(r.scale);
            const int64_t C = config.query_block;
            const int64_t gq = (layout.tokens(r.scale) + C - 1) / C;
            if (r.data.dim() != 3 || r.data.size(1) != gq || r.layer < 0 ||
                r.layer >= layout.layers)
                throw std::invalid_argument("sparvar cs4a_mapped record of scale " + str(r.scale) +
                                            " layer " + str(r.layer) +
                                            " is not (heads, query blocks " + str(gq) +
                                            ", keys) of a model layer");
            // (H, G, m) key ids, -1 padded -> bool (H, G, Lk); padding goes to a spare column.
            const auto ids = r.data.to(at::kLong);
            auto sel = at::zeros({ids.size(0), gq, lk + 1}, at::kBool);
            sel.scatter_(2, ids.where(ids.ge(0), at::full_like(ids, lk)), true);
            KeepMask m;
            m.pairs = sel.narrow(2, 0, lk).contiguous();
            m.block_q = C;
            set.restrict(r.scale, r.layer, m);
        }
    }
}

at::Tensor dense_keep(const KeepMask& m, int64_t heads, int64_t lq, int64_t lk) {
    const auto fits = [&](const at::Tensor& t, int64_t n) {
        return !t.defined() || t.numel() == n;
    };
    if (!fits(m.queries, lq) || !fits(m.keys, lk))
        throw std::invalid_argument("mask of " + std::to_string(lq) + " queries x " +
                                    std::to_string(lk) + " keys: its query or key part differs");
    auto keep = at::ones({1, lq, lk}, at::kBool);
    if (m.queries.defined()) keep = keep.logical_and(m.queries.cpu().view({1, lq, 1}));
    if (m.keys.defined()) keep = keep.logical_and(m.keys.cpu().view({1, 1, lk}));
    if (m.pairs.defined()) {
        const auto gq = (lq + m.block_q - 1) / m.block_q, gk = (lk + m.block_k - 1) / m.block_k;
        if (m.pairs.dim() != 3 || m.pairs.size(1) != gq || m.pairs.size(2) != gk ||
            (m.pairs.size(0) != 1 && m.pairs.size(0) != heads))
            throw std::invalid_argument("block mask does not fit " + std::to_string(lq) + " x " +
                                        std::to_string(lk) + " attention of " +
                                        std::to_string(heads) + " heads");
        const auto qi = at::arange(lq, at::kLong).div(m.block_q, "floor");
        const auto ki = at::arange(lk, at::kLong).div(m.block_k, "floor");
        keep = keep.logical_and(m.pairs.cpu().index_select(1, qi).index_select(2, ki));
    }
    return keep.contiguous();
}

MaskSet masks_of_run(const AccelConfig& config, const std::vector<AccelRecord>& records,
                     const std::vector<ScaleRecord>& scales, const ScheduleLayout& layout) {
    MaskSet set;
    add_skip_masks(set, scales, layout);  // skipped scales, whichever method skipped them
    if (config.fastvar.enabled) add_fastvar_masks(set, records, layout);
    if (config.lazyvar.enabled) add_lazyvar_masks(set, records, layout);
    if (config.ams_kv.enabled) add_ams_kv_masks(set, records, layout);
    if (config.sparvar.enabled) add_sparvar_masks(set, records, config.sparvar, layout);
    return set;
}

}  // namespace varscope::analysis
