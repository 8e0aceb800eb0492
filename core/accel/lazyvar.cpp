#include "core/accel/lazyvar.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/accel/probe_kinds.h"
#include "kernels/token_ops.h"

namespace varscope {
namespace {

constexpr const char* kMethod = "lazyvar";

int64_t kept_count(double ratio, int64_t tokens) {
    if (ratio >= 1.0) return tokens;
    return std::clamp<int64_t>(std::llround(ratio * static_cast<double>(tokens)), 1, tokens);
}

AccelRecord record(const char* kind, int64_t scale, at::Tensor data,
                   std::map<std::string, double> values) {
    AccelRecord r;
    r.method = kMethod;
    r.kind = kind;
    r.scale = scale;
    r.data = std::move(data);
    r.values = std::move(values);
    return r;
}

at::Tensor kept_mask(const at::Tensor& rows, int64_t pn) {
    auto mask = at::zeros({pn * pn}, at::kBool);
    if (rows.defined())
        mask.index_fill_(0, rows.cpu(), true);
    else
        mask.fill_(true);
    return mask.view({pn, pn});
}

class LazyVar : public SamplingHooks {
  public:
    LazyVar(LazyVarConfig cfg, const VarConfig& model, ProbeSink* probe)
        : cfg_(std::move(cfg)), num_scales_(model.num_scales()), probe_(probe) {
        group_first_ = cfg_.group_size > 1 ? num_scales_ - cfg_.group_size : num_scales_;
        first_pruned_ = num_scales_;
        for (int64_t si = cfg_.start_scale; si < num_scales_; ++si) {
            const int64_t n = model.patch_nums[si] * model.patch_nums[si];
            if (kept_count(cfg_.ratio_at(si), n) < n) {
                first_pruned_ = si;
                break;
            }
        }
    }

    // Capturable: every decision is step-level (the rows come from on_scale_begin, their count
    // from the ratios), so probes may record too.
    std::optional<std::string> graph_signature(const VarConfig&) override {
        return "lazyvar:" + cfg_.to_json().dump();
    }

    int64_t group_size(const ScaleContext& ctx) override {
        return ctx.scale == group_first_ ? cfg_.group_size : 1;
    }

    void on_scale_begin(ScaleContext& ctx) override {
        if (ctx.scale == 0) guide_ = at::Tensor();
        const bool index_later =
            probing_index() ||
            std::any_of(ctx.segments.begin(), ctx.segments.end(),
                        [&](const ScaleSegment& s) { return index_needed(s.scale); });
        // A copy: the index of each segment compares f̂ before and after it.
        prev_fhat_ = index_later ? ctx.f_hat.clone() : at::Tensor();

        std::vector<int64_t> pns;
        std::vector<double> ratios;
        bool pruned = false;
        for (const auto& s : ctx.segments) {
            pns.push_back(s.patch_num);
            ratios.push_back(cfg_.ratio_at(s.scale));
            pruned = pruned || kept_count(ratios.back(), s.tokens()) < s.tokens();
        }
        if (ctx.segments.size() > 1 && wants(probe_kinds::kLazyVarGroup)) report_group(ctx);
        if (!pruned) return;
        if (!guide_.defined())
            throw std::logic_error("lazyvar: no update index before pruned scale " +
                                   std::to_string(ctx.scale));
        const bool cumulative = cfg_.cumulative && ctx.segments.size() > 1;
        auto sel = lazyvar_select_rows(guide_, pns, ratios, cumulative);
        for (size_t i = 0; i < sel.size(); ++i) {
            auto& seg = ctx.segments[i];
            seg.rows = sel[i].rows;
            if (seg.rows.defined() && wants(probe_kinds::kLazyVarKept)) {
                const auto kept = static_cast<double>(seg.rows.numel());
                probe_->on_accel(record(probe_kinds::kLazyVarKept, seg.scale,
                                        kept_mask(seg.rows, seg.patch_num),
                                        {{"kept", kept},
                                         {"ratio", kept / seg.tokens()},
                                         {"rank_begin", static_cast<double>(sel[i].rank_begin)}}));
            }
        }
    }

    void on_scale_end(const ScaleContext& ctx, const ScaleSegment& seg, const at::Tensor&,
                      const at::Tensor& f_hat) override {
        if (!prev_fhat_.defined()) return;
        const bool probing = probing_index();
        if (index_needed(seg.scale) || probing) {
            // = lazyvar_update_index(); the CUDA token kernel on GPU.
            const auto index = kernels::update_index(prev_fhat_, f_hat, kernels::KernelPath::Auto,
                                                     ctx.exec.kernels);
            guide_ = index.mean(0);
            if (probing) {
                auto first = index[0].to(at::kFloat).cpu();
                const double mean = first.mean().item<double>();
                probe_->on_accel(
                    record(probe_kinds::kUpdateIndex, seg.scale, first, {{"mean", mean}}));
            }
        }
        const bool last_of_step = ctx.segments.empty() || seg.scale == ctx.segments.back().scale;
        if (!last_of_step) prev_fhat_ = f_hat.clone();
    }

  private:
    // The index of scale si guides the next step when that step prunes.
    bool index_needed(int64_t si) const {
        const int64_t next = si + 1;
        if (next < group_first_) return next >= first_pruned_ && next < num_scales_;
        // The group's step prunes when any of its scales does; steps inside it do not exist.
        return next == group_first_ && first_pruned_ < num_scales_;
    }
    bool wants(const char* kind) const { return probe_ && probe_->wants_accel(kMethod, kind); }
    bool probing_index() const { return wants(probe_kinds::kUpdateIndex); }

    void report_group(const ScaleContext& ctx) {
        std::vector<int64_t> scales;
        for (const auto& s : ctx.segments) scales.push_back(s.scale);
        probe_->on_accel(record(probe_kinds::kLazyVarGroup, ctx.scale,
                                at::tensor(scales, at::kLong),
                                {{"first_scale", static_cast<double>(ctx.scale)},
                                 {"size", static_cast<double>(scales.size())}}));
    }

    LazyVarConfig cfg_;
    int64_t num_scales_;
    ProbeSink* probe_;
    int64_t group_first_ = 0;   // first scale of the group (num_scales_ = no group)
    int64_t first_pruned_ = 0;  // first scale that keeps fewer than all tokens
    at::Tensor prev_fhat_;      // f̂ before the segment being decoded
    at::Tensor guide_;          // latest update index, batch mean (H, W)
};

}  // namespace

double LazyVarConfig::ratio_at(int64_t si) const {
    if (si < start_scale || ratios.empty()) return 1.0;
    const auto j = std::min<size_t>(static_cast<size_t>(si - start_scale), ratios.size() - 1);
    return ratios[j];
}

const MethodSpec& LazyVarConfig::spec() {
    static const MethodSpec s{
        kMethod,
        "LazyVAR",
        "lazyvar.txt §Method (update index, UIGTP, PGD, cumulative retention index)",
        "Compute only the tokens that the previous scale still updated, and decode the last "
        "scales together in one pass.",
        {counting(
             {"start_scale", "First pruned scale", "i",
              "Index si (0 = the 1x1 scale) of the first scale that computes only its most-updated "
              "tokens; earlier scales run intact (they lay out the image). Paper (Infinity, 13 "
              "scales): the 10th scale, si 9. Default 7 (10x10) for VAR's 1..16 schedule: on the "
              "embedded model 91 % of the 10x10 scale's positions change by cos > 0.95 but only "
              "68 % of the 8x8 one's, and starting at 8x8 doubles the image error.",
              ParamKind::Int, 1, 63, 7},
             ParamCount::Scales, -1),
         counting(
             {"group_size", "Group size", "p",
              "The last p scales are decoded in one forward pass, all fed from the same "
              "accumulated features (1 = off). Paper: 4 on Infinity (5 loses quality). Default 2 "
              "for VAR: with 10 scales the features still move between 8x8 and 13x13, so only "
              "13x13 and 16x16 share an input.",
              ParamKind::Int, 1, 16, 2},
             ParamCount::Scales, -1),
         {"ratios", "Retention ratios (from the first pruned scale)", "n_k / (h_k w_k)",
          "Share of each scale's tokens computed, from the first pruned scale on (a shorter "
          "list repeats its last entry; 1 = no pruning; at least one token is kept). Paper "
          "(Infinity's last four scales, 32..64 tokens wide): [0.2, 0.1, 0.05, 0.01]. Default "
          "[0.5, 0.4, 0.4] for VAR's 10, 13, 16: its maps are 16x smaller, and VAR's last "
          "scale still updates most positions (on the embedded model only 38 % change by "
          "cos > 0.95), so it keeps 40 %, not 1 %.",
          ParamKind::RealList, 0.0, 1.0, nlohmann::json::array({0.5, 0.4, 0.4}), 1, 16},
         {"cumulative", "Cumulative retention index", "cum_i",
          "Inside a group, give the most-updated positions to the largest scale and the next "
          "ranks to the smaller ones, so that the scales decoded together update disjoint "
          "positions. Paper default: on (off loses a little quality).",
          ParamKind::Bool, 0, 1, true}}};
    return s;
}

LazyVarConfig LazyVarConfig::from_json(const nlohmann::json& j) {
    ParamReader r(j, spec());
    LazyVarConfig c;
    c.enabled = r.enabled();
    c.start_scale = r.get_int("start_scale");
    c.group_size = r.get_int("group_size");
    c.ratios = r.get_real_list("ratios");
    c.cumulative = r.get_bool("cumulative");
    return c;
}

nlohmann::json LazyVarConfig::to_json() const {
    return {{"enabled", enabled},
            {"start_scale", start_scale},
            {"group_size", group_size},
            {"ratios", ratios},
            {"cumulative", cumulative}};
}

at::Tensor lazyvar_update_index(const at::Tensor& f_prev, const at::Tensor& f_next) {
    const auto a = f_prev.to(at::kFloat), b = f_next.to(at::kFloat);
    const auto dot = (a * b).sum(1);
    const auto norms = a.norm(2, {1}) * b.norm(2, {1});
    return 1.0 - dot / norms.clamp_min(1e-12);
}

std::vector<LazyVarSelection> lazyvar_select_rows(const at::Tensor& update_index,
                                                  const std::vector<int64_t>& patch_nums,
                                                  const std::vector<double>& ratios,
                                                  bool cumulative) {
    if (patch_nums.size() != ratios.size())
        throw std::invalid_argument("lazyvar_select_rows: one ratio per scale expected");
    const size_t m = patch_nums.size();
    std::vector<int64_t> kept(m);
    for (size_t j = 0; j < m; ++j) kept[j] = kept_count(ratios[j], patch_nums[j] * patch_nums[j]);

    const auto grid =
        update_index.to(at::kFloat).view({1, 1, update_index.size(-2), update_index.size(-1)});
    std::vector<LazyVarSelection> out(m);
    for (size_t j = 0; j < m; ++j) {
        const int64_t pn = patch_nums[j], tokens = pn * pn;
        if (kept[j] >= tokens) continue;
        double claimed = 0.0;  // ranks of scale j already taken by the larger pruned scales
        if (cumulative)
            for (size_t k = j + 1; k < m; ++k) {
                const int64_t tk = patch_nums[k] * patch_nums[k];
                if (kept[k] < tk) claimed += static_cast<double>(kept[k]) * tokens / tk;
            }
        const int64_t begin = std::min<int64_t>(std::llround(claimed), tokens - kept[j]);
        // Area interpolation to pn x pn (adaptive average pooling is F.interpolate's "area").
        const auto scores = at::adaptive_avg_pool2d(grid, {pn, pn}).flatten();
        const auto order = std::get<1>(at::sort(scores, /*stable=*/true, 0, /*descending=*/true));
        out[j].rows = std::get<0>(at::sort(order.narrow(0, begin, kept[j])));
        out[j].rank_begin = begin;
    }
    return out;
}

namespace {

// The first setting of cfg that does not fit a schedule of S scales, as {field, message}; an
// empty field when all fit. make_lazyvar refuses with it; fit_to_schedule moves what it names.
std::pair<std::string, std::string> schedule_misfit(const LazyVarConfig& cfg, int64_t S) {
    if (cfg.start_scale < 1 || cfg.start_scale >= S)
        return {"start_scale", "must be in [1, " + std::to_string(S - 1) + "] for the model's " +
                                   std::to_string(S) + " scales, got " +
                                   std::to_string(cfg.start_scale)};
    if (cfg.group_size < 1 || cfg.group_size > S - 1)
        return {"group_size", "must be in [1, " + std::to_string(S - 1) + "] for the model's " +
                                  std::to_string(S) +
                                  " scales (the first scale cannot join a group), got " +
                                  std::to_string(cfg.group_size)};
    const auto pruned_scales = static_cast<size_t>(S - cfg.start_scale);
    if (cfg.ratios.empty() || cfg.ratios.size() > pruned_scales)
        return {"ratios", "must have 1 to " + std::to_string(pruned_scales) + " entries (scales " +
                              std::to_string(cfg.start_scale) + ".." + std::to_string(S - 1) +
                              " of the model), got " + std::to_string(cfg.ratios.size())};
    return {};
}

}  // namespace

LazyVarConfig fit_to_schedule(const LazyVarConfig& cfg, int64_t scales,
                              std::vector<std::string>* notes) {
    const int64_t S = scales;
    const auto n_in = static_cast<int64_t>(cfg.ratios.size());
    if (!cfg.enabled || schedule_misfit(cfg, S).first.empty() || S < 2 || n_in < 1) return cfg;
    auto note = [&](const std::string& s) {
        if (notes) notes->push_back(std::string(kMethod) + "." + s);
    };
    LazyVarConfig out = cfg;
    const int64_t n = std::min(n_in, S - 1);
    if (n < n_in) {
        out.ratios.erase(out.ratios.begin(), out.ratios.begin() + (n_in - n));
        note("ratios: the last " + std::to_string(n) + " of " + std::to_string(n_in) +
             " kept (the model has " + std::to_string(S) + " scales)");
    }
    if (out.start_scale < 1 || out.start_scale + n > S) {
        out.start_scale = S - n;
        note("start_scale " + std::to_string(cfg.start_scale) + " -> " +
             std::to_string(out.start_scale) + " (its " + std::to_string(n) +
             (n == 1 ? " ratio on the last scale"
                     : " ratios on the last " + std::to_string(n) + " scales") +
             " of the model's " + std::to_string(S) + ")");
    }
    if (out.group_size > S - 1 || out.group_size < 1) {
        out.group_size = std::clamp<int64_t>(out.group_size, 1, S - 1);
        note("group_size " + std::to_string(cfg.group_size) + " -> " +
             std::to_string(out.group_size));
    }
    return out;
}

std::shared_ptr<SamplingHooks> make_lazyvar(const LazyVarConfig& cfg, const VarConfig& model,
                                            ProbeSink* probe) {
    const int64_t S = model.num_scales();
    const auto fail = [](const std::string& field, const std::string& msg) {
        throw AccelConfigError(std::string(kMethod) + "." + field + ": " + msg);
    };
    if (const auto [field, message] = schedule_misfit(cfg, S); !field.empty()) fail(field, message);
    for (size_t i = 0; i < cfg.ratios.size(); ++i)
        if (!(cfg.ratios[i] >= 0.0 && cfg.ratios[i] <= 1.0))
            fail("ratios[" + std::to_string(i) + "]",
                 "must be in [0, 1], got " + std::to_string(cfg.ratios[i]));
    return std::make_shared<LazyVar>(cfg, model, probe);
}

}  // namespace varscope
