#include "core/accel/sparvar.h"

#include <ATen/ATen.h>

#include <cmath>
#include <map>
#include <set>
#include <stdexcept>
#include <string>

#include "core/accel/probe_kinds.h"
#include "core/accel/resample.h"
#include "core/accel/sparvar_cs4a.h"
#include "core/accel/sparvar_csla.h"
#include "kernels/attention_dispatch.h"
#include "kernels/key_lists.h"
#include "kernels/sdpa_lse.h"
#include "kernels/token_ops.h"
#include "kernels/upsample_add.h"

namespace varscope {
namespace {

constexpr const char* kMethod = "sparvar";

std::string str(int64_t v) {
    return std::to_string(v);
}

// attend()'s FLOP report to the loop (BlockContext::attention_flops, hooks.h).
void report_flops(const BlockContext& ctx, double pairs, int64_t head_dim) {
    ctx.attention_flops = 4.0 * pairs * static_cast<double>(head_dim);
}

double dense_pairs(const at::Tensor& q, const at::Tensor& k) {
    return static_cast<double>(q.size(0) * q.size(1)) * static_cast<double>(q.size(2)) *
           static_cast<double>(k.size(2));
}

// (query, key) pairs of per-query-block key counts (B, H, G) over lq query rows: a double
// scalar on the counts' device (read later: take_deferred_attention_flops).
at::Tensor pairs_of_counts(const at::Tensor& counts, int64_t query_block, int64_t lq) {
    const int64_t G = counts.size(2);
    const auto c = counts.to(at::kDouble);
    // Every block has query_block rows but the last, which has G * query_block - lq fewer.
    return c.sum().mul(static_cast<double>(query_block)) -
           c.select(2, G - 1).sum().mul(static_cast<double>(G * query_block - lq));
}
at::Tensor selected_pairs(const at::Tensor& selection, int64_t query_block, int64_t lq) {
    return pairs_of_counts(selection.sum({-1}, false, at::kDouble), query_block, lq);
}

// Each (b, h) of a (B, H, L, d) KV view is a stretch of one long row sequence for the gathered
// kernel. A KV cache narrowed from its capacity (rows contiguous, heads and batch rows evenly
// spaced, K and V alike) is that sequence already, with stretches of its capacity: no copy. Any
// other layout is copied (stretch L).
int64_t kv_stretch(const at::Tensor& k, const at::Tensor& v) {
    const int64_t H = k.size(1), L = k.size(2), d = k.size(3);
    const auto s = k.strides();
    const bool in_place = k.strides() == v.strides() && s[3] == 1 && s[2] == d && d > 0 &&
                          s[1] % d == 0 && s[1] / d >= L && s[0] == H * s[1];
    return in_place ? s[1] / d : L;
}
at::Tensor as_sequence(const at::Tensor& t, int64_t stretch) {
    const int64_t B = t.size(0), H = t.size(1), L = t.size(2), d = t.size(3);
    if (stretch == L) return t.reshape({1, 1, B * H * L, d});
    const int64_t rows = (B * H - 1) * stretch + L;  // the last stretch ends at its L-th row
    return t.as_strided({1, 1, rows, d}, {rows * d, rows * d, d, 1});
}

// The gathered kernel over per-(b, h, query block) key lists `keys` (n, W) and `counts` (n),
// whose ids were offset by `stretch` (kv_stretch of k and v, or Lk for a copy) per (b, h); cast
// to int32 here (the key-list kernel writes int32 already). `part`: how the cost model books the
// kernel (the decision scale's residual pass is the method's overhead).
at::Tensor gathered_on_lists(const BlockContext& ctx, const at::Tensor& q, const at::Tensor& k,
                             const at::Tensor& v, const at::Tensor& keys, const at::Tensor& counts,
                             int64_t stretch, int64_t query_block, double softmax_scale,
                             CostPart part) {
    const int64_t B = q.size(0), H = q.size(1), lq = q.size(2), d = q.size(3);
    const int64_t G = keys.size(0) / (B * H);
    const auto qf = at::constant_pad_nd(q, {0, 0, 0, G * query_block - lq}, 0)
                        .reshape({1, 1, B * H * G * query_block, d});
    kernels::AttentionOptions opt;
    opt.scale = softmax_scale;
    opt.path = kernels::KernelPath::Cuda;
    opt.policy = ctx.scale.exec.kernels;
    const auto kf = as_sequence(k, stretch), vf = as_sequence(v, stretch);
    ctx.mark(part);
    const auto out = kernels::gathered_attention(qf, kf, vf, keys.to(at::kInt), counts.to(at::kInt),
                                                 query_block, opt)
                         .out;
    return out.view({B, H, G * query_block, d}).narrow(2, 0, lq);
}

// Gathered attention with its own key set per (batch row, head, query block): selection bool
// (B, H, G, Lk). The kernel shares its lists across batch rows and heads, so each (b, h) becomes
// its own stretch of one long sequence: queries padded to whole blocks, key ids offset by
// (b * H + h) * Lk. Output (B, H, Lq, d) in q's dtype. `width`: the lists' width, a bound on
// every block's count known from the settings (the kernel reads `counts` entries of each list),
// so nothing here waits for the device and a CUDA graph can capture it; eager runs use the same
// width, so both launch the same kernel on the same lists.
at::Tensor gathered_per_head(const BlockContext& ctx, const at::Tensor& q, const at::Tensor& k,
                             const at::Tensor& v, const at::Tensor& selection, int64_t query_block,
                             double softmax_scale, int64_t width) {
    const int64_t B = q.size(0), H = q.size(1), lk = k.size(2);
    const int64_t G = selection.size(2), n = B * H * G;
    const auto sel = selection.reshape({n, lk});
    const auto counts = sel.sum(-1);
    const auto lopt = counts.options().dtype(at::kLong);
    const auto keys = at::arange(lk, lopt).unsqueeze(0) +
                      at::arange(n, lopt).div(G, "floor").mul(lk).unsqueeze(1);
    // Selected key j goes to slot (number of selected keys before it); the rest to a dropped slot.
    const auto slot = at::where(sel, sel.to(at::kLong).cumsum(-1) - 1, width);
    const auto lists =
        at::full({n, width + 1}, -1, lopt).scatter_(1, slot, keys).narrow(1, 0, width);
    return gathered_on_lists(ctx, q, k, v, lists, counts, /*stretch=*/lk, query_block,
                             softmax_scale, CostPart::Attention);
}

class SparVar : public SamplingHooks {
  public:
    SparVar(const SparVarConfig& cfg, const VarConfig& model, ProbeSink* probe)
        : cfg_(cfg), probe_(probe) {
        const int64_t S = model.num_scales();
        first_sparse_ = S - cfg.sparse_scales;
        decision_ = first_sparse_ - 1;
        cs4a_layers_ = cfg.cs4a_layers(model.depth);
        // top_k = 1 keeps every key: CS4A is exactly dense attention, so leave it to the loop.
        cs4a_off_ = cfg.top_k >= 1.0;
        for (int64_t s = 0; s < std::min(cfg.sink_scales, S); ++s)
            sink_tokens_ += model.patch_nums[s] * model.patch_nums[s];
        states_.resize(model.depth);
        csla_used_ = cs4a_layers_ < model.depth;
    }

    // Capturable: CSLA's masks are fixed per scale and staged on the device by on_scale_begin;
    // CS4A's Top-K has a fixed k, its index maps are staged by on_scale_begin, its key lists
    // have a width bounded by the settings (cs4a_width), and the pairs it attends are counted
    // on the device (take_deferred_attention_flops). Probe records: eager.
    std::optional<std::string> graph_signature(const VarConfig&) override {
        for (const char* kind : {probe_kinds::kCslaTokenMask, probe_kinds::kCslaBlockMask,
                                 probe_kinds::kCs4aSelected, probe_kinds::kCs4aMapped})
            if (wants(kind)) return std::nullopt;
        return "sparvar:" + cfg_.to_json().dump();
    }

    // Before a decision or sparse step (and its capture): the scale's CSLA mask, its block
    // lists and token mask, CS4A's index maps and the FLOP counter on the device, so that
    // attend() copies nothing from the host.
    void on_scale_begin(ScaleContext& ctx) override {
        const auto device = ctx.f_hat.device();
        for (const auto& seg : ctx.segments) {
            if (cs4a_used() && seg.scale >= decision_) {
                counter(ctx.config, device);
                if (seg.scale > decision_) {
                    cs4a_map(ctx.config, seg.scale, device);
                    if (cfg_.use_cache) cache_taps(ctx.config, seg.scale, device);
                }
            }
            if (csla_used_ && seg.scale >= first_sparse_) {
                auto& e = csla_host_entry(ctx.config, seg.scale);
                if (!e.dense) stage(e, device);
            }
        }
    }

    double take_deferred_attention_flops(const ScaleContext& ctx) override {
        double sum = 0.0;
        for (const auto& seg : ctx.segments)
            if (deferred_scales_.count(seg.scale) && pairs_.defined()) {
                auto slot = pairs_.select(0, seg.scale);
                sum += slot.item<double>();
                slot.zero_();
            }
        return sum;
    }

    at::Tensor attend(const BlockContext& ctx, const at::Tensor& q, const at::Tensor& k,
                      const at::Tensor& v, double softmax_scale) override {
        const int64_t scale = ctx.scale.scale;
        const bool sparse = scale >= first_sparse_, decision = scale == decision_;
        const bool cs4a = ctx.layer < cs4a_layers_;
        if (!(sparse || (decision && cs4a))) return {};
        if (cs4a && cs4a_off_) return {};
        check_layout(ctx, q, k);
        if (!cs4a) return csla(ctx, q, k, v, softmax_scale);
        return decision ? cs4a_decide(ctx, q, k, v, softmax_scale)
                        : cs4a_sparse(ctx, q, k, v, softmax_scale);
    }

  private:
    struct Cs4aState {
        // The decision scale's kept keys (sinks included): key lists on the kernel path, the
        // bool mask (2B, H, G_S, N_<=S) on the reference path and for the patch mapping.
        sparvar::KeyLists lists;
        at::Tensor selection;
        int64_t kv_len = 0;  // N_<=S
        // O_cache = O_dense - O_sparse at S (2B, H, N_S, d): float32 in `cache`, or on the kernel
        // path both outputs kept (cache = O_dense, cache_sparse = O_sparse) and subtracted per
        // cell by the upsampling kernel, as the float32 subtraction would; or undefined.
        at::Tensor cache, cache_sparse;
        int64_t rows() const {
            return lists.keys.defined()  ? lists.keys.size(0)
                   : selection.defined() ? selection.size(0)
                                         : -1;
        }
        at::Tensor mask() const {
            return selection.defined() ? selection : sparvar::selection_from_lists(lists, kv_len);
        }
    };
    struct CslaEntry {
        sparvar::CslaScaleMask mask;
        at::Tensor additive;  // on the attention's device and dtype (reference path)
        at::Tensor attend;    // mask.attend on the attention's device
        BlockLists lists;     // on the attention's device (kernel path)
        double pairs = 0.0;   // active (query, key) pairs of one head
        bool dense = false;
    };

    // The reference assumes one whole scale per step over the full KV prefix.
    void check_layout(const BlockContext& ctx, const at::Tensor& q, const at::Tensor& k) const {
        const auto& sc = ctx.scale;
        const auto& pns = sc.config.patch_nums;
        const int64_t pn = pns[sc.scale];
        int64_t prefix = 0;
        for (int64_t s = 0; s <= sc.scale; ++s) prefix += pns[s] * pns[s];
        const bool grouped = sc.segments.size() > 1;
        const bool pruned = !sc.segments.empty() && sc.segments.front().rows.defined();
        if (grouped || pruned || q.size(2) != pn * pn || k.size(2) != prefix)
            throw std::logic_error(
                "sparvar: scale " + str(sc.scale) + " layer " + str(ctx.layer) + " has " +
                str(q.size(2)) + " queries and " + str(k.size(2)) + " cached keys, expected " +
                str(pn * pn) + " and " + str(prefix) +
                " (SparVAR needs whole scales over the full KV prefix: no token pruning, KV "
                "eviction or grouped steps at the decision and sparse scales)");
    }

    bool wants(const char* kind) const { return probe_ && probe_->wants_accel(kMethod, kind); }
    bool cs4a_used() const { return cs4a_layers_ > 0 && !cs4a_off_; }

    // FLOPs per scale counted on the device (created outside any capture; kept, since captured
    // steps add to it).
    at::Tensor& counter(const VarConfig& config, const at::Device& device) {
        if (!pairs_.defined() || pairs_.device() != device)
            pairs_ = at::zeros({config.num_scales()}, at::TensorOptions(device).dtype(at::kDouble));
        return pairs_;
    }
    void defer_flops(const BlockContext& ctx, const at::Tensor& pairs, int64_t head_dim) {
        pair_slot(ctx, pairs.device()).add_(pairs.mul(4.0 * static_cast<double>(head_dim)));
    }
    // The step's FLOP slot, for the key-list kernel to add to on the device.
    at::Tensor pair_slot(const BlockContext& ctx, const at::Device& device) {
        deferred_scales_.insert(ctx.scale.scale);
        return counter(ctx.scale.config, device).select(0, ctx.scale.scale);
    }
    kernels::KeyListsSpec list_spec(int64_t query_block, int64_t q_len, int64_t kv_len,
                                    int64_t stretch, bool increasing_map) const {
        return {sink_tokens_, kv_len, query_block, q_len, stretch, increasing_map};
    }
    // O_cache's bilinear taps from the decision scale's grid to `scale`'s, on `device` (staged
    // by on_scale_begin: a captured step copies nothing from the host).
    const BilinearTaps& cache_taps(const VarConfig& config, int64_t scale,
                                   const at::Device& device) {
        auto& t = taps_[scale];
        if (!t.ids.defined() || t.ids.device() != device) {
            const auto host = bilinear_taps(config.patch_nums[decision_], config.patch_nums[scale]);
            t = {host.ids.to(device), host.weights.to(device)};
        }
        return t;
    }

    // CS4A's index maps from the decision scale to `scale`, on `device`.
    const sparvar::SelectionMap& cs4a_map(const VarConfig& config, int64_t scale,
                                          const at::Device& device) {
        auto& m = maps_[scale];
        if (!m.blocks.defined() || m.blocks.device() != device) {
            const auto& pns = config.patch_nums;
            const int64_t source_blocks =
                (pns[decision_] * pns[decision_] + cfg_.query_block - 1) / cfg_.query_block;
            m = sparvar::selection_map(pns, decision_, scale, cfg_.query_block, source_blocks,
                                       cfg_.patch_mapping)
                    .to(device);
        }
        return m;
    }
    // Most keys a query block keeps at the decision scale (Top-k plus sinks) over lk keys.
    int64_t decision_width(int64_t lk) const {
        return std::min(lk, sparvar::top_k_count(cfg_.top_k, lk) + sink_tokens_);
    }

    // ------------------------------------------------------------------ CSLA
    // The scale's masks, built on the host once.
    CslaEntry& csla_host_entry(const VarConfig& config, int64_t scale) {
        auto it = csla_.find(scale);
        if (it == csla_.end()) {
            CslaEntry e;
            e.mask = sparvar::build_csla_scale_mask(config.patch_nums, scale, cfg_.csla_spec(),
                                                    cfg_.block, cfg_.token_mask);
            e.dense = e.mask.dense();
            e.pairs = static_cast<double>(e.mask.attend.sum().item<int64_t>());
            it = csla_.emplace(scale, std::move(e)).first;
        }
        return it->second;
    }

    // Block lists and token mask on `device` (host-to-device copies: outside graph capture).
    void stage(CslaEntry& e, const at::Device& device) {
        if (!e.lists.indices.defined() || e.lists.indices.device() != device) {
            const auto host = csla_block_lists(e.mask.block);
            e.lists = {host.indices.to(device), host.counts.to(device)};
        }
        if (!e.attend.defined() || e.attend.device() != device) e.attend = e.mask.attend.to(device);
    }

    const CslaEntry& csla_entry(const BlockContext& ctx, const at::Tensor& q) {
        auto& e = csla_host_entry(ctx.scale.config, ctx.scale.scale);
        if (e.dense) return e;
        stage(e, q.device());  // done already by on_scale_begin
        if (!csla_kernels(q, ctx.scale.exec.kernels) &&
            (!e.additive.defined() || e.additive.device() != q.device() ||
             e.additive.scalar_type() != q.scalar_type()))
            e.additive = sparvar::additive_mask(e.attend, q.options());  // device ops only
        return e;
    }

    // The CUDA kernels run for these inputs under the run's kernel policy
    // (kernels/attention_dispatch.h) and are not disabled.
    bool kernels_for(const at::Tensor& q, int64_t block_q, int64_t block_k,
                     const kernels::KernelPolicy& kp) const {
        return !cfg_.reference_kernels &&
               kernels::cuda_attention_supported(q, block_q, block_k, kp);
    }
    // The block kernel computes whole blocks; the token-wise mask stays with the reference.
    bool csla_kernels(const at::Tensor& q, const kernels::KernelPolicy& kp) const {
        return !cfg_.token_mask && kernels_for(q, cfg_.block, cfg_.block, kp);
    }
    bool cs4a_kernels(const at::Tensor& q, const kernels::KernelPolicy& kp) const {
        return kernels_for(q, cfg_.query_block, 64, kp);
    }

    at::Tensor csla(const BlockContext& ctx, const at::Tensor& q, const at::Tensor& k,
                    const at::Tensor& v, double softmax_scale) {
        const auto& e = csla_entry(ctx, q);
        const auto& kp = ctx.scale.exec.kernels;
        const bool on_kernels = csla_kernels(q, kp);
        if (ctx.layer == cs4a_layers_) emit_csla(ctx.scale.scale, e.mask, on_kernels);  // per scale
        if (e.dense) return {};
        report_flops(ctx, e.pairs * static_cast<double>(q.size(0) * q.size(1)), q.size(3));
        if (on_kernels) {
            kernels::AttentionOptions opt;
            opt.scale = softmax_scale;
            opt.path = kernels::KernelPath::Cuda;
            opt.policy = kp;
            return kernels::block_sparse_attention(q, k, v, e.lists.indices, e.lists.counts,
                                                   cfg_.block, cfg_.block, opt)
                .out;
        }
        return attention_sdpa(q, k, v, softmax_scale, e.additive);
    }

    void emit_csla(int64_t scale, const sparvar::CslaScaleMask& m, bool on_kernels) {
        if (wants(probe_kinds::kCslaTokenMask))
            probe_->on_accel(
                {kMethod,
                 probe_kinds::kCslaTokenMask,
                 scale,
                 -1,
                 m.token.clone(),
                 {{"sparsity", m.token_sparsity}, {"cuda_kernels", on_kernels ? 1.0 : 0.0}}});
        if (wants(probe_kinds::kCslaBlockMask))
            probe_->on_accel({kMethod,
                              probe_kinds::kCslaBlockMask,
                              scale,
                              -1,
                              m.block.clone(),
                              {{"token_sparsity", m.token_sparsity},
                               {"block_sparsity", m.block_sparsity},
                               {"block", static_cast<double>(cfg_.block)}}});
    }

    // ------------------------------------------------------------------ CS4A
    // Decision scale: dense attention (returned as the output), column sums, Top-k, O_cache.
    at::Tensor cs4a_decide(const BlockContext& ctx, const at::Tensor& q, const at::Tensor& k,
                           const at::Tensor& v, double softmax_scale) {
        const int64_t C = cfg_.query_block, lq = q.size(2), lk = k.size(2);
        const auto& kp = ctx.scale.exec.kernels;
        const bool use_kernels = cs4a_kernels(q, kp);
        // Kernels: SDPA (the backend attention_sdpa would take, bitwise the same output) with its
        // rows' log-sum-exp, then the column-sum kernel in one QK^T pass (two, the log-sum-exp
        // first, where the backend gives none); reference: one eager pass whose probabilities
        // give both.
        at::Tensor o_dense, sums;
        // FLOPs per dense pair in units of 4 * d: SDPA 1 (QK^T and PV), each QK^T pass 1/2.
        double passes = 1.0;
        if (use_kernels) {
            auto dense = kernels::sdpa_with_lse(q, k, v, softmax_scale);
            o_dense = std::move(dense.out);
            ctx.mark(CostPart::Overhead);  // scoring: the column sums' QK^T pass(es)
            sums = kernels::block_column_sum(q, k, C, softmax_scale, kernels::KernelPath::Cuda, kp,
                                             dense.lse);
            passes = dense.lse.defined() ? 1.5 : 2.0;
        } else {
            at::Tensor probs;
            o_dense = attention_eager(q, k, v, softmax_scale, {}, &probs);
            sums = sparvar::block_column_sums(probs, C);
        }
        const double pairs = dense_pairs(q, k) * passes;
        ctx.mark(CostPart::Overhead);  // scoring, Top-K, the residual's sparse pass
        const int64_t top = sparvar::top_k_count(cfg_.top_k, lk);
        const int64_t B = q.size(0), H = q.size(1), G = sums.size(2);
        // Kernels: one radix-select launch gives the ascending ids (ties to the lower id; ATen's
        // topk and a sort otherwise).
        const auto inds = use_kernels ? kernels::top_rows(sums.reshape({-1, lk}), top,
                                                          kernels::KernelPath::Cuda, kp)
                                            .view({B, H, G, top})
                                      : sparvar::top_k_indices(sums, top);
        if (wants(probe_kinds::kCs4aSelected))
            probe_->on_accel({kMethod,
                              probe_kinds::kCs4aSelected,
                              ctx.scale.scale,
                              ctx.layer,
                              inds[0].cpu(),
                              {{"top_k", static_cast<double>(top)},
                               {"query_block", static_cast<double>(C)},
                               {"kv_len", static_cast<double>(lk)}}});
        auto& st = states_[ctx.layer];
        st.kv_len = lk;
        // Sinks join the set at S too, so O_cache is the residual of the same kind of set that
        // the later scales attend to. Kernels: the lists, the attention kernel's copy of them and
        // the residual pass's pair count in one launch.
        kernels::GatheredKeyLists lists;
        const int64_t stretch = kv_stretch(k, v);
        st.lists = sparvar::KeyLists{};
        if (use_kernels) {
            lists = kernels::key_lists(
                inds.view({B * H, G, top}), {}, {}, {}, list_spec(C, lq, lk, stretch, false),
                cfg_.use_cache ? pair_slot(ctx, q.device()) : at::Tensor(),
                4.0 * static_cast<double>(q.size(3)), kernels::KernelPath::Cuda, kp);
            st.lists = sparvar::per_head(lists, B, H);
        }
        st.selection = at::Tensor();
        if (!use_kernels || cfg_.patch_mapping) {
            st.selection = sparvar::selection_from_indices(inds, lk);
            if (sink_tokens_ > 0) st.selection.narrow(3, 0, std::min(sink_tokens_, lk)).fill_(true);
        }
        st.cache = st.cache_sparse = at::Tensor();
        if (cfg_.use_cache) {
            at::Tensor o_sparse;
            if (use_kernels) {
                o_sparse = gathered_on_lists(ctx, q, k, v, lists.attn_keys, lists.attn_counts,
                                             stretch, C, softmax_scale, CostPart::Overhead);
            } else {
                defer_flops(ctx, selected_pairs(st.selection, C, lq), q.size(3));
                o_sparse = sparvar::masked_attention(
                    q, k, v, softmax_scale, sparvar::expand_query_blocks(st.selection, C, lq));
            }
            if (use_kernels && o_sparse.scalar_type() == o_dense.scalar_type()) {
                st.cache = o_dense;  // the difference is formed where it is upsampled
                st.cache_sparse = o_sparse;
            } else {
                // In float32 (a bf16 o_sparse is widened inside the subtraction).
                st.cache = at::sub(o_dense.to(at::kFloat), o_sparse);
            }
        }
        report_flops(ctx, pairs, q.size(3));
        return o_dense;
    }

    // Later scale: mapped selection, sparse attention, plus the upsampled O_cache.
    at::Tensor cs4a_sparse(const BlockContext& ctx, const at::Tensor& q, const at::Tensor& k,
                           const at::Tensor& v, double softmax_scale) {
        const auto& st = states_[ctx.layer];
        if (st.rows() != q.size(0))
            throw std::logic_error("sparvar: layer " + str(ctx.layer) + " reached scale " +
                                   str(ctx.scale.scale) + " without its decision scale " +
                                   str(decision_));
        ctx.mark(CostPart::Overhead);  // index maps and key lists
        const auto& map = cs4a_map(ctx.scale.config, ctx.scale.scale, q.device());
        report_flops(ctx, 0.0, q.size(3));  // the pairs follow on the device
        const bool use_kernels = cs4a_kernels(q, ctx.scale.exec.kernels);
        auto probe_mapped = [&](const at::Tensor& sel) {
            if (wants(probe_kinds::kCs4aMapped))
                probe_->on_accel({kMethod,
                                  probe_kinds::kCs4aMapped,
                                  ctx.scale.scale,
                                  ctx.layer,
                                  sparvar::selection_lists(sel),
                                  {{"kept_fraction", sel[0].to(at::kFloat).mean().item<double>()},
                                   {"decision_scale", static_cast<double>(decision_)}}});
        };
        at::Tensor o;
        if (use_kernels && !map.patch && st.lists.keys.defined()) {
            // The kernel path maps the lists themselves: O(kept keys) per block, no masks; one
            // launch writes them, the attention kernel's copy and the pair count.
            const int64_t B = q.size(0), H = q.size(1), Gs = st.lists.keys.size(2);
            const int64_t stretch = kv_stretch(k, v);
            const auto lists = kernels::key_lists(
                st.lists.keys.view({B * H, Gs, st.lists.keys.size(3)}),
                st.lists.counts.view({B * H, Gs}), map.blocks, map.keys,
                list_spec(cfg_.query_block, q.size(2), map.kv_len, stretch, map.increasing),
                pair_slot(ctx, q.device()), 4.0 * static_cast<double>(q.size(3)),
                kernels::KernelPath::Auto, ctx.scale.exec.kernels);
            if (wants(probe_kinds::kCs4aMapped))
                probe_mapped(
                    sparvar::selection_from_lists(sparvar::per_head(lists, B, H), map.kv_len));
            o = gathered_on_lists(ctx, q, k, v, lists.attn_keys, lists.attn_counts, stretch,
                                  cfg_.query_block, softmax_scale, CostPart::Attention);
        } else {
            const auto sel = sparvar::map_selection(st.mask(), map, sink_tokens_);
            probe_mapped(sel);
            defer_flops(ctx, selected_pairs(sel, cfg_.query_block, q.size(2)), q.size(3));
            // Mapped keys: at most fanout per key kept at S, plus the sinks.
            const int64_t width =
                std::min(map.kv_len, decision_width(st.kv_len) * map.fanout + sink_tokens_);
            o = use_kernels
                    ? gathered_per_head(ctx, q, k, v, sel, cfg_.query_block, softmax_scale, width)
                    : sparvar::masked_attention(
                          q, k, v, softmax_scale,
                          sparvar::expand_query_blocks(sel, cfg_.query_block, q.size(2)));
        }
        ctx.mark(CostPart::Overhead);  // O_cache upsampled and added
        if (!st.cache.defined()) return o.to(q.scalar_type()).contiguous();
        // o + upsampled O_cache in float32, rounded once: one kernel on CUDA.
        const auto& taps = cache_taps(ctx.scale.config, ctx.scale.scale, q.device());
        const auto& kp = ctx.scale.exec.kernels;
        return (st.cache_sparse.defined()
                    ? kernels::upsample_add_difference(o, st.cache, st.cache_sparse, taps.ids,
                                                       taps.weights, kernels::KernelPath::Auto, kp)
                    : kernels::upsample_add(o, st.cache, taps.ids, taps.weights,
                                            kernels::KernelPath::Auto, kp))
            .to(q.scalar_type());
    }

    SparVarConfig cfg_;
    ProbeSink* probe_;
    int64_t first_sparse_ = 0, decision_ = 0, cs4a_layers_ = 0, sink_tokens_ = 0;
    bool cs4a_off_ = false;
    bool csla_used_ = false;  // some layers use CSLA
    std::vector<Cs4aState> states_;
    std::map<int64_t, CslaEntry> csla_;  // per scale: the same mask for every CSLA layer
    std::map<int64_t, sparvar::SelectionMap> maps_;  // CS4A index maps per sparse scale
    std::map<int64_t, BilinearTaps> taps_;           // O_cache's upsampling per sparse scale
    at::Tensor pairs_;                   // double (scales): CS4A's attention FLOPs per scale
    std::set<int64_t> deferred_scales_;  // scales whose FLOPs wait in pairs_
};

}  // namespace

const MethodSpec& SparVarConfig::spec() {
    using K = ParamKind;
    static const MethodSpec s{
        "sparvar",
        "SparVAR",
        "sparvar.txt §3.2-3.3, App. A-C",
        "Sparse attention at the last scales: cross-scale reuse of a decision scale's Top-K "
        "pattern (CS4A, shallow layers) and sink + local block masks (CSLA, deep layers).",
        {
            counting({"sparse_scales", "Sparse scales (last N)", "",
                      "Number of final scales computed with sparse attention; the scale before "
                      "them is the sparse decision scale S, computed densely. Paper: 2 of 13 "
                      "(S = scale 11).",
                      K::Int, 1, 30, 2},
                     ParamCount::Scales, -1),
            {"cs4a_fraction", "CS4A share of layers", "",
             "Fraction of layers, shallowest first, using CS4A; the deeper rest use CSLA. "
             "Paper default 0.6 (App. C: ratio 6:4).",
             K::Real, 0, 1, 0.6},
            {"top_k", "Top-K fraction", "α",
             "Fraction of the decision scale's keys kept per query block (Top-K on the column "
             "sums). Paper: about 0.2 (§4.3). 1 keeps every key (CS4A off).",
             K::Real, 0.001, 1, 0.2},
            {"query_block", "Query block", "C",
             "Query rows per block for the column sums and the index mapping. Paper: 192 "
             "(App. A.2; 128 also mentioned in App. B).",
             K::Int, 1, 4096, 192},
            {"use_cache", "Add O_cache", "O_cache",
             "Add the decision scale's residual O_dense - O_sparse, upsampled, to the sparse "
             "output (Table 5: +0.7 dB PSNR). Paper default on.",
             K::Bool, 0, 1, true},
            {"patch_mapping", "Patch mapping", "",
             "Map each selected key to its whole upsampled patch at the target scale instead of "
             "App. A's single floor-projected point (Eq. 5). Paper: off (point mapping).",
             K::Bool, 0, 1, false},
            counting(
                {"sink_scales", "Sink scales", "𝒮",
                 "Scales [0, n) whose tokens every query attends to (CS4A and CSLA), at most up "
                 "to the decision scale (larger values are capped there). Paper: the first 5 "
                 "scales (\"scale <= 5\", Table 4).",
                 K::Int, 0, 30, 5},
                ParamCount::Scales, -2),
            {"windows", "Local windows (last scales)", "w_h",
             "CSLA window sizes of the key scales just before and at the query scale (last entry "
             "= the query's own scale); radius floor(w/2) after rescaling. Paper: [3, 5, 7].",
             K::IntList, 1, 255, nlohmann::json::array({3, 5, 7}), 1, 30},
            {"middle_window", "Local window (middle scales)", "w_h",
             "CSLA window size of the non-sink key scales before those in the list. Paper: 3.",
             K::Int, 1, 255, 3},
            {"block", "Block size", "B",
             "CSLA block size: a B x B tile is computed when any token pair in it is local "
             "(Eq. 3). Paper: 128 (Table 1 also 64).",
             K::Int, 1, 1024, 128},
            {"token_mask", "Token-wise mask", "",
             "Restrict attention to the token-wise mask instead of whole active blocks (Table 1's "
             "\"sdpa + sparse mask\" row). Paper default off (block-wise).",
             K::Bool, 0, 1, false},
            {"reference_kernels", "Reference kernels", "",
             "Debugging: always run the LibTorch reference instead of the CUDA kernels (the "
             "kernels otherwise run on CUDA for bf16/fp16, head dim 64/128 and block sizes that "
             "are multiples of 64). VARSCOPE_REFERENCE_KERNELS=1 forces it for every method.",
             K::Bool, 0, 1, false},
        }};
    return s;
}

SparVarConfig SparVarConfig::from_json(const nlohmann::json& j) {
    ParamReader r(j, spec());
    SparVarConfig c;
    c.enabled = r.enabled();
    c.sparse_scales = r.get_int("sparse_scales");
    c.cs4a_fraction = r.get_real("cs4a_fraction");
    c.top_k = r.get_real("top_k");
    c.query_block = r.get_int("query_block");
    c.use_cache = r.get_bool("use_cache");
    c.patch_mapping = r.get_bool("patch_mapping");
    c.sink_scales = r.get_int("sink_scales");
    c.windows = r.get_int_list("windows");
    c.middle_window = r.get_int("middle_window");
    c.block = r.get_int("block");
    c.token_mask = r.get_bool("token_mask");
    c.reference_kernels = r.get_bool("reference_kernels");
    return c;
}

nlohmann::json SparVarConfig::to_json() const {
    return {{"enabled", enabled},
            {"sparse_scales", sparse_scales},
            {"cs4a_fraction", cs4a_fraction},
            {"top_k", top_k},
            {"query_block", query_block},
            {"use_cache", use_cache},
            {"patch_mapping", patch_mapping},
            {"sink_scales", sink_scales},
            {"windows", windows},
            {"middle_window", middle_window},
            {"block", block},
            {"token_mask", token_mask},
            {"reference_kernels", reference_kernels}};
}

int64_t SparVarConfig::cs4a_layers(int64_t depth) const {
    return std::clamp<int64_t>(std::llround(cs4a_fraction * static_cast<double>(depth)), 0, depth);
}

std::shared_ptr<SamplingHooks> make_sparvar(const SparVarConfig& cfg, const VarConfig& model,
                                            ProbeSink* probe) {
    const int64_t S = model.num_scales();
    if (cfg.sparse_scales < 1 || cfg.sparse_scales >= S)
        throw AccelConfigError(
            "sparvar.sparse_scales: must be in [1, " + str(S - 1) + "] for this " + str(S) +
            "-scale model (one earlier scale decides), got " + str(cfg.sparse_scales));
    const int64_t decision = S - cfg.sparse_scales - 1;
    if (cfg.sink_scales < 0)
        throw AccelConfigError("sparvar.sink_scales: must be >= 0, got " + str(cfg.sink_scales));
    if (static_cast<int64_t>(cfg.windows.size()) > S)
        throw AccelConfigError("sparvar.windows: at most " + str(S) +
                               " entries (one per scale of this model), got " +
                               str(cfg.windows.size()));
    for (size_t i = 0; i < cfg.windows.size(); ++i)
        if (cfg.windows[i] < 1)
            throw AccelConfigError("sparvar.windows[" + str(i) + "]: must be >= 1, got " +
                                   str(cfg.windows[i]));
    if (cfg.middle_window < 1)
        throw AccelConfigError("sparvar.middle_window: must be >= 1, got " +
                               str(cfg.middle_window));
    if (!(cfg.top_k > 0.0 && cfg.top_k <= 1.0))
        throw AccelConfigError("sparvar.top_k: must be in (0, 1], got " +
                               std::to_string(cfg.top_k));
    if (!(cfg.cs4a_fraction >= 0.0 && cfg.cs4a_fraction <= 1.0))
        throw AccelConfigError("sparvar.cs4a_fraction: must be in [0, 1], got " +
                               std::to_string(cfg.cs4a_fraction));
    if (cfg.query_block < 1)
        throw AccelConfigError("sparvar.query_block: must be >= 1, got " + str(cfg.query_block));
    if (cfg.block < 1) throw AccelConfigError("sparvar.block: must be >= 1, got " + str(cfg.block));
    // Sinks end at the decision scale: the paper's 5 (a 13-scale 1024^2 schedule) would pass it
    // on short schedules (the 7-scale emoji text-to-image model decides at scale 4), where the
    // preset refused to run. Capped, not refused, so one preset serves every schedule.
    SparVarConfig c = cfg;
    c.sink_scales = std::min(cfg.sink_scales, decision);
    return std::make_shared<SparVar>(c, model, probe);
}

}  // namespace varscope
