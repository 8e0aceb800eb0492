#include "core/accel/fastvar.h"

#include <ATen/ATen.h>

#include <cmath>
#include <utility>

#include "core/accel/probe_kinds.h"
#include "kernels/token_ops.h"

namespace varscope {
namespace fastvar {

at::Tensor pivotal_scores(const at::Tensor& x) {
    const auto xf = x.to(at::kFloat);
    return (xf - xf.mean(1, /*keepdim=*/true)).pow(2).sum(-1);
}

int64_t kept_tokens(int64_t n, double ratio) {
    return n - static_cast<int64_t>(std::floor(ratio * static_cast<double>(n)));
}

}  // namespace fastvar

namespace {

constexpr const char* kMethod = "fastvar";

// (R, pc*pc, C) token map -> (R, pn*pn, C), area interpolation (the official CTR mode).
at::Tensor area_resize(const at::Tensor& t, int64_t pc, int64_t pn) {
    const int64_t R = t.size(0), C = t.size(2);
    auto map = t.view({R, pc, pc, C}).permute({0, 3, 1, 2});
    return at::adaptive_avg_pool2d(map, {pn, pn}).permute({0, 2, 3, 1}).reshape({R, pn * pn, C});
}

class FastVar : public SamplingHooks {
  public:
    FastVar(std::vector<double> ratios, const VarConfig& model, ProbeSink* probe)
        : ratios_(std::move(ratios)), probe_(probe) {
        const int64_t S = model.num_scales();
        first_pruned_ = S - static_cast<int64_t>(ratios_.size());
        cache_scale_ = first_pruned_ - 1;
        cache_patch_num_ = model.patch_nums[cache_scale_];
        skipped_ = 0;
        for (auto r : ratios_) skipped_ += r >= 1.0 ? 1 : 0;
        cache_in_.resize(model.depth);
        cache_update_.resize(model.depth);
    }

    int64_t scales_to_run(const VarConfig& c) override { return c.num_scales() - skipped_; }

    // Capturable: K is fixed per scale by the ratios, the selection is a device Top-K, and the
    // cached updates are written inside the cache scale's graph and read by the later ones.
    // Probe records read values: eager then.
    std::optional<std::string> graph_signature(const VarConfig&) override {
        if (probe_ && (probe_->wants_accel(kMethod, probe_kinds::kPtsScores) ||
                       probe_->wants_accel(kMethod, probe_kinds::kPtsKept)))
            return std::nullopt;
        std::string sig = "fastvar:";
        for (double r : ratios_) sig += std::to_string(r) + ",";
        return sig;
    }

    void on_scale_begin(ScaleContext& ctx) override {
        if (ctx.scale == 0) {  // a new run: drop the previous run's cache
            selected_ = {-1, -1};
            for (auto& t : cache_in_) t = at::Tensor();
            for (auto& t : cache_update_) t = at::Tensor();
        }
    }

    at::Tensor select_tokens(const BlockContext& ctx, const at::Tensor& x) override {
        const auto& s = ctx.scale;
        if (s.scale == cache_scale_ && x.size(1) == s.patch_num * s.patch_num)
            cache_in_[ctx.layer] = x.clone();
        const double ratio = ratio_at(s.scale);
        const int64_t n = s.patch_num * s.patch_num;
        // Another policy that already left tokens out (x.size(1) < n) is not pruned further.
        if (ratio <= 0.0 || x.size(1) != n || !cache_update_[ctx.layer].defined()) return {};
        const int64_t keep = fastvar::kept_tokens(n, ratio);
        if (keep >= n) return {};

        const int64_t B = s.batch;
        selected_ = {s.scale, ctx.layer};
        // Conditional rows; the CUDA token kernel on GPU, the LibTorch reference otherwise.
        const auto [scores, kept] = kernels::pivotal_token_selection(
            x.narrow(0, 0, B), keep, kernels::KernelPath::Auto, s.exec.kernels);
        report(ctx, ratio, keep, scores, kept);
        return kept.repeat({2, 1});  // the unconditional row of image b shares its selection
    }

    at::Tensor restore_tokens(const BlockContext& ctx, const at::Tensor& x, const at::Tensor& rows,
                              const at::Tensor& h) override {
        const auto& s = ctx.scale;
        if (selected_ != std::pair<int64_t, int64_t>{s.scale, ctx.layer}) return {};  // not ours
        const int64_t C = x.size(2);
        auto out = x + area_resize(cache_update_[ctx.layer], cache_patch_num_, s.patch_num)
                           .to(x.scalar_type());
        const auto index = rows.dim() == 2 ? rows : rows.unsqueeze(0).expand({x.size(0), -1});
        return out.scatter_(1, index.unsqueeze(-1).expand({-1, -1, C}), h);
    }

    void on_block_output(const BlockContext& ctx, const at::Tensor& y) override {
        if (ctx.scale.scale != cache_scale_ || !cache_in_[ctx.layer].defined()) return;
        cache_update_[ctx.layer] = y - cache_in_[ctx.layer];
        cache_in_[ctx.layer] = at::Tensor();
    }

  private:
    double ratio_at(int64_t scale) const {
        return scale >= first_pruned_ ? ratios_[scale - first_pruned_] : 0.0;
    }

    void report(const BlockContext& ctx, double ratio, int64_t keep, const at::Tensor& scores,
                const at::Tensor& kept) {
        if (!probe_) return;
        const int64_t pn = ctx.scale.patch_num;
        const std::map<std::string, double> values{{"ratio", ratio},
                                                   {"kept", static_cast<double>(keep)}};
        if (ctx.layer == 0 && probe_->wants_accel(kMethod, probe_kinds::kPtsScores))
            probe_->on_accel({kMethod, probe_kinds::kPtsScores, ctx.scale.scale, ctx.layer,
                              scores[0].view({pn, pn}).cpu(), values});
        if (probe_->wants_accel(kMethod, probe_kinds::kPtsKept)) {
            auto mask = at::zeros({pn * pn}, at::TensorOptions().dtype(at::kByte));
            mask.index_fill_(0, kept[0].cpu(), 1);
            probe_->on_accel({kMethod, probe_kinds::kPtsKept, ctx.scale.scale, ctx.layer,
                              mask.view({pn, pn}), values});
        }
    }

    std::vector<double> ratios_;
    ProbeSink* probe_;
    int64_t first_pruned_ = 0, cache_scale_ = 0, cache_patch_num_ = 0, skipped_ = 0;
    std::pair<int64_t, int64_t> selected_{-1, -1};  // (scale, layer) of our last selection
    std::vector<at::Tensor> cache_in_;              // per layer: block input at the cache scale
    std::vector<at::Tensor> cache_update_;          // per layer: output - input at the cache scale
};

}  // namespace

const MethodSpec& FastVarConfig::spec() {
    static const MethodSpec s{
        "fastvar",
        "FastVAR",
        "fastvar.txt §3, App. G",
        "Prune flat tokens in the blocks of the last scales; restore them from the cached "
        "update of the last unpruned scale.",
        {{"ratios", "Pruning ratios (last N scales)", "ρ",
          "Fraction of tokens each block leaves out at the last N scales (N = entries, smallest "
          "scale first); 1 = skip the scale. Paper: {0.4, 0.5, 1, 1} Infinity, {0.5, 0.75} HART. "
          "Default {0.4, 0.5} on VAR's 13x13 and 16x16 maps (62 % of the 256px tokens): VAR's "
          "16x16 maps and small models tolerate less pruning (App. A, E), so moderate ratios "
          "and no skipped scale.",
          ParamKind::RealList, 0.0, 1.0, nlohmann::json::array({0.4, 0.5}), 1, 16}}};
    return s;
}

FastVarConfig FastVarConfig::from_json(const nlohmann::json& j) {
    ParamReader r(j, spec());
    FastVarConfig c;
    c.enabled = r.enabled();
    c.ratios = r.get_real_list("ratios");
    return c;
}

nlohmann::json FastVarConfig::to_json() const {
    return {{"enabled", enabled}, {"ratios", ratios}};
}

std::shared_ptr<SamplingHooks> make_fastvar(const FastVarConfig& cfg, const VarConfig& model,
                                            ProbeSink* probe) {
    const auto n = static_cast<int64_t>(cfg.ratios.size());
    const int64_t S = model.num_scales();
    if (n < 1 || n >= S)
        throw AccelConfigError("fastvar.ratios: has " + std::to_string(n) +
                               " entries, but the model's " + std::to_string(S) +
                               " scales allow 1 to " + std::to_string(S - 1) +
                               " (one unpruned scale must come first, for the cache)");
    for (int64_t i = 0; i < n; ++i) {
        const double r = cfg.ratios[i];
        if (!(r >= 0.0 && r <= 1.0))
            throw AccelConfigError("fastvar.ratios[" + std::to_string(i) +
                                   "]: must be in [0, 1], got " + std::to_string(r));
        if (i > 0 && cfg.ratios[i - 1] >= 1.0 && r < 1.0)
            throw AccelConfigError("fastvar.ratios[" + std::to_string(i) +
                                   "]: a skipped scale (ratio 1) can only be followed by skipped "
                                   "scales, got " +
                                   std::to_string(r));
    }
    return std::make_shared<FastVar>(cfg.ratios, model, probe);
}

}  // namespace varscope
