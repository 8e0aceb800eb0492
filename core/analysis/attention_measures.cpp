#include "core/analysis/attention_measures.h"

#include <ATen/ATen.h>

#include <map>
#include <numeric>
#include <stdexcept>

namespace varscope::analysis {
namespace {

std::string str(int64_t v) {
    return std::to_string(v);
}

// An all-true component keeps everything: dropping it makes "keeps all" exact (recall 1, error
// 0 without rounding) and skips its work.
at::Tensor unless_all(const at::Tensor& t) {
    return t.defined() && t.all().item<bool>() ? at::Tensor() : t;
}

// The kept (query, key) pairs of rows [a, a + n) for the measured heads: bool (Hm, n, Lk) with
// Hm = 1 or the measured heads; undefined = every pair.
at::Tensor keep_rows(const KeepMask& m, int64_t a, int64_t n, int64_t lk, const at::Tensor& heads,
                     int64_t all_heads, const at::Device& dev) {
    if (m.keeps_all()) return {};
    auto keep = at::ones({1, n, lk}, at::TensorOptions().dtype(at::kBool).device(dev));
    if (m.queries.defined())
        keep = keep.logical_and(m.queries.to(dev).narrow(0, a, n).view({1, n, 1}));
    if (m.keys.defined()) keep = keep.logical_and(m.keys.to(dev).view({1, 1, lk}));
    if (m.pairs.defined()) {
        auto opt = at::TensorOptions().dtype(at::kLong).device(dev);
        const auto qi = at::arange(a, a + n, opt).div(m.block_q, "floor");
        const auto ki = at::arange(lk, opt).div(m.block_k, "floor");
        auto p = m.pairs.to(dev).index_select(1, qi).index_select(2, ki);
        if (p.size(0) == all_heads && all_heads > 1) p = p.index_select(0, heads);
        keep = keep.logical_and(p);
    }
    return keep;
}

void check_shapes(int64_t scale, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const std::vector<int64_t>& scale_tokens, const KeepMask& m,
                  const at::Tensor& mask) {
    auto fail = [&](const std::string& what) {
        throw std::invalid_argument("attention measures at scale " + str(scale) + ": " + what);
    };
    if (q.dim() != 3 || k.dim() != 3 || v.dim() != 3)
        fail("q, k and v must be (heads, tokens, head_dim)");
    if (k.size(0) != q.size(0) || v.size(0) != q.size(0) || k.size(1) != v.size(1) ||
        k.size(2) != q.size(2))
        fail("q, k and v do not fit together");
    if (static_cast<int64_t>(scale_tokens.size()) != scale + 1)
        fail("token counts of scales 0.." + str(scale) + " needed, got " +
             str(static_cast<int64_t>(scale_tokens.size())));
    const int64_t total = std::accumulate(scale_tokens.begin(), scale_tokens.end(), int64_t{0});
    if (total != k.size(1))
        fail("the cache holds " + str(k.size(1)) + " keys, the scales up to it " + str(total) +
             " (the dense run's cache holds every scale in order)");
    if (scale_tokens.back() != q.size(1))
        fail(str(q.size(1)) + " queries, the scale has " + str(scale_tokens.back()) + " tokens");
    if (m.queries.defined() && m.queries.numel() != q.size(1))
        fail("the query mask has " + str(m.queries.numel()) + " entries for " + str(q.size(1)) +
             " queries");
    if (m.keys.defined() && m.keys.numel() != k.size(1))
        fail("the key mask has " + str(m.keys.numel()) + " entries for " + str(k.size(1)) +
             " keys");
    if (m.pairs.defined()) {
        const auto gq = (q.size(1) + m.block_q - 1) / m.block_q;
        const auto gk = (k.size(1) + m.block_k - 1) / m.block_k;
        if (m.pairs.dim() != 3 || m.pairs.size(1) != gq || m.pairs.size(2) != gk ||
            (m.pairs.size(0) != 1 && m.pairs.size(0) != q.size(0)))
            fail("the pair mask is not (1 or heads, " + str(gq) + ", " + str(gk) + ")");
    }
    if (mask.defined() &&
        (mask.dim() != 2 || mask.size(0) != q.size(1) || mask.size(1) != k.size(1)))
        fail("the additive mask is not (queries, keys)");
}

}  // namespace

KeepMask simplified(const KeepMask& m) {
    KeepMask out = m;
    out.queries = unless_all(m.queries);
    out.keys = unless_all(m.keys);
    out.pairs = unless_all(m.pairs);
    return out;
}

KeepMask intersect(const KeepMask& a, const KeepMask& b) {
    auto both = [](const at::Tensor& x, const at::Tensor& y) {
        if (!x.defined()) return y;
        if (!y.defined()) return x;
        return x.logical_and(y);
    };
    KeepMask out;
    out.queries = both(a.queries, b.queries);
    out.keys = both(a.keys, b.keys);
    if (a.pairs.defined() && b.pairs.defined() &&
        (a.block_q != b.block_q || a.block_k != b.block_k))
        throw std::invalid_argument("two pair masks of different block sizes cannot be combined");
    out.pairs = both(a.pairs, b.pairs);
    const KeepMask& blocks = a.pairs.defined() ? a : b;
    out.block_q = blocks.block_q;
    out.block_k = blocks.block_k;
    return out;
}

BlockMeasures measure_block(int64_t scale, int64_t layer, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, double softmax_scale,
                            const std::vector<int64_t>& scale_tokens, const KeepMask& keep_in,
                            const MeasureOptions& options, const at::Tensor& additive_mask) {
    check_shapes(scale, q, k, v, scale_tokens, keep_in, additive_mask);
    if (options.query_chunk < 1) throw std::invalid_argument("query_chunk must be >= 1");
    const int64_t H = q.size(0), lq = q.size(1), lk = k.size(1);
    const auto dev = q.device();
    std::vector<int64_t> head_ids = options.heads;
    if (head_ids.empty())
        for (int64_t h = 0; h < H; ++h) head_ids.push_back(h);
    for (auto h : head_ids)
        if (h < 0 || h >= H)
            throw std::invalid_argument("head " + str(h) + " does not exist (the model has " +
                                        str(H) + " heads)");
    const auto heads = at::tensor(head_ids, at::kLong).to(dev);
    const int64_t hm = heads.numel();

    const KeepMask keep = simplified(keep_in);

    const auto dtype = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
    const auto qh = q.index_select(0, heads).to(dtype);
    const auto kt = k.index_select(0, heads).to(dtype).transpose(1, 2);
    const auto vh = v.index_select(0, heads).to(dtype);
    const auto dbl = at::TensorOptions().dtype(at::kDouble).device(dev);
    const int64_t S = scale + 1;
    auto recall = at::zeros({hm}, dbl), recall_c = at::zeros({hm}, dbl);
    auto err2 = at::zeros({hm}, dbl), norm2 = at::zeros({hm}, dbl);
    auto entropy = at::zeros({hm}, dbl), pairs = at::zeros({hm}, dbl);
    auto colsum = at::zeros({hm, lk}, dbl), sumsq = at::zeros({hm}, dbl);
    auto by_scale = at::zeros({hm, S}, dbl);
    double computed = 0.0;
    std::vector<at::Tensor> ent_maps, rec_maps;

    for (int64_t a = 0; a < lq; a += options.query_chunk) {
        const int64_t n = std::min(options.query_chunk, lq - a);
        auto scores = at::bmm(qh.narrow(1, a, n), kt).mul_(softmax_scale);
        if (additive_mask.defined())
            scores.add_(additive_mask.narrow(0, a, n).to(dev, dtype).unsqueeze(0));
        const auto p = at::softmax(scores, -1);  // (hm, n, lk)
        const auto o_dense = at::bmm(p, vh);
        const auto keep_c = keep_rows(keep, a, n, lk, heads, H, dev);
        at::Tensor kept;  // (hm, n) mass on kept keys
        if (keep_c.defined()) {
            const auto pk = p.mul(keep_c);
            kept = pk.sum(-1);
            const auto o_sparse =
                at::bmm(pk.div(kept.clamp_min(1e-30).unsqueeze(-1)), vh) * kept.gt(0).unsqueeze(-1);
            err2 += (o_sparse - o_dense).to(at::kDouble).pow(2).sum({1, 2});
            pairs += keep_c.expand({hm, n, lk}).to(at::kDouble).sum({1, 2});
        } else {
            kept = at::ones({hm, n}, p.options());
            pairs += static_cast<double>(n * lk);
        }
        norm2 += o_dense.to(at::kDouble).pow(2).sum({1, 2});
        const auto qkeep = keep.queries.defined()
                               ? keep.queries.to(dev).narrow(0, a, n).to(at::kDouble)
                               : at::ones({n}, dbl);
        computed += qkeep.sum().item<double>();
        recall += kept.to(at::kDouble).sum(1);
        recall_c += (kept.to(at::kDouble) * qkeep.unsqueeze(0)).sum(1);
        const auto ent = at::xlogy(p, p).neg().sum(-1);  // (hm, n)
        entropy += ent.to(at::kDouble).sum(1);
        colsum += p.to(at::kDouble).sum(1);
        sumsq += p.to(at::kDouble).pow(2).sum({1, 2});
        int64_t begin = 0;
        for (int64_t j = 0; j < S; ++j) {
            by_scale.select(1, j) +=
                p.narrow(2, begin, scale_tokens[j]).to(at::kDouble).sum({1, 2});
            begin += scale_tokens[j];
        }
        if (options.query_maps) {
            ent_maps.push_back(ent.to(at::kFloat).cpu());
            rec_maps.push_back(kept.to(at::kFloat).cpu());
        }
    }

    const auto cpu = [](const at::Tensor& t) { return t.cpu(); };
    const auto rc = cpu(recall), rcc = cpu(recall_c), e2 = cpu(err2), n2 = cpu(norm2);
    const auto en = cpu(entropy), pr = cpu(pairs), cs = cpu(colsum), sq = cpu(sumsq);
    const auto bs = cpu(by_scale);
    const auto vert = cs.pow(2).sum(1).div(sq.mul(static_cast<double>(lq)));
    BlockMeasures out;
    const double log_lk = lk > 1 ? std::log(static_cast<double>(lk)) : 1.0;
    for (int64_t i = 0; i < hm; ++i) {
        HeadMeasures r;
        r.scale = scale;
        r.layer = layer;
        r.head = head_ids[i];
        r.queries = lq;
        r.keys = lk;
        r.query_kept = computed / static_cast<double>(lq);
        r.pair_density = pr[i].item<double>() / static_cast<double>(lq * lk);
        r.recall = rc[i].item<double>() / static_cast<double>(lq);
        r.recall_computed = computed > 0 ? rcc[i].item<double>() / computed : 0.0;
        const double nn = n2[i].item<double>();
        r.output_error = nn > 0 ? std::sqrt(e2[i].item<double>() / nn) : 0.0;
        for (int64_t j = 0; j < S; ++j) {
            const double m = bs[i][j].item<double>() / static_cast<double>(lq);
            r.mass_by_scale.push_back(m);
            if (j == scale)
                r.mass_local += m;
            else if (j < options.sink_scales)
                r.mass_sink += m;
            else
                r.mass_rest += m;
        }
        r.entropy = en[i].item<double>() / static_cast<double>(lq);
        r.entropy_normalized = lk > 1 ? r.entropy / log_lk : 0.0;
        r.verticality = vert[i].item<double>();
        out.heads.push_back(std::move(r));
    }
    if (options.query_maps) {
        out.entropy_map = at::cat(ent_maps, 1);
        out.recall_map = at::cat(rec_maps, 1);
    }
    return out;
}

std::vector<HeadType> type_heads(const std::vector<HeadMeasures>& records, const TypingRule& rule) {
    std::map<std::pair<int64_t, int64_t>, std::pair<double, int64_t>> acc;
    for (const auto& r : records) {
        if (r.queries < rule.min_queries) continue;
        auto& [sum, n] = acc[{r.layer, r.head}];
        sum += r.verticality;
        ++n;
    }
    std::vector<HeadType> out;
    for (const auto& [key, v] : acc) {
        const double mean = v.first / static_cast<double>(v.second);
        out.push_back({key.first, key.second, mean,
                       mean >= rule.verticality_threshold ? "contextual" : "structural"});
    }
    return out;
}

std::vector<LayerType> type_layers(const std::vector<HeadMeasures>& records,
                                   const TypingRule& rule) {
    std::map<int64_t, std::pair<double, int64_t>> acc;
    for (const auto& r : records) {
        if (r.queries < rule.min_queries) continue;
        auto& [sum, n] = acc[r.layer];
        sum += r.mass_local;
        ++n;
    }
    std::vector<LayerType> out;
    for (const auto& [layer, v] : acc) {
        const double mean = v.first / static_cast<double>(v.second);
        out.push_back({layer, mean, mean >= rule.local_threshold ? "refiner" : "drafter"});
    }
    return out;
}

}  // namespace varscope::analysis
