#include "core/accel/lazymar.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>

#include "core/accel/probe_kinds.h"
#include "core/sampling/gaussian_diffusion.h"  // HeadCacheStats
#include "core/sampling/mar_sampler.h"         // mar_step_plan

namespace varscope {

// ----------------------------------------------------------------------------- config

const MethodSpec& LazyMarConfig::spec() {
    static const MethodSpec s{
        "lazymar",
        "LazyMAR",
        "lazymar.txt §3.2, §4.1",
        "MAR: reuse the features of positions that barely change (token cache) and the CFG "
        "residual (condition cache) between periodic full refreshes.",
        {{"token_cache", "Token cache", "",
          "Compute only the least similar positions after "
          "block ℓ and the newly known tokens in the encoder; reuse cached features for the rest.",
          ParamKind::Bool, 0, 1, true},
         {"condition_cache", "Condition cache", "C_cond",
          "Between refreshes run only the conditional branch; unconditional = conditional + "
          "the cached residual (uncond - cond).",
          ParamKind::Bool, 0, 1, true},
         counting({"start_step", "First cached step", "s₀",
                   "Steps before it compute everything (0 = the paper's: 5 at 64 steps, 4 at 32).",
                   ParamKind::Int, 0, 4096, 0},
                  ParamCount::Steps, -1),
         counting(
             {"period", "Refresh period", "τ",
              "Steps per refresh period from s₀ on; the first of each is a full refresh (0 = the "
              "paper's: 9 at 64 steps, 5 at 32).",
              ParamKind::Int, 0, 4096, 0},
             ParamCount::Steps, 0),
         {"keep_ratio", "Computed share", "N / n",
          "Share of the decoder positions (buffer + tokens) computed after block ℓ at cached "
          "steps. Paper: ~270 of 320 skipped at 64 steps (0.16), ~250 at 32 (0.22).",
          ParamKind::Real, 0, 1, 0.16},
         counting(
             {"similarity_layer", "Similarity block", "ℓ",
              "Decoder block (0-based) whose attention values V are compared with the previous "
              "step; blocks up to it compute every position. Official code: 3.",
              ParamKind::Int, 0, 255, 3},
             ParamCount::DecoderBlocks, -1),
         {"min_similarity", "Similarity threshold", "",
          "> 0: also compute every position whose similarity is below this (one host sync per "
          "cached step). 0 = fixed count only.",
          ParamKind::Real, 0, 1, 0.0},
         {"force_decoded", "Always compute decoded", "",
          "Positions decoded in this and the previous step are always computed (official code).",
          ParamKind::Bool, 0, 1, true},
         {"encoder_cache", "Encoder cache", "",
          "Encoder: compute only the buffer and the tokens that became known in the previous "
          "step; reuse the other known tokens' features (official code).",
          ParamKind::Bool, 0, 1, true},
         {"head_cfg_period", "Head condition cache", "",
          "DiffLoss head (released code, 7): every this many diffusion steps run both CFG "
          "halves and keep eps_cond - eps_uncond; in between only the conditional half. 0 = off.",
          ParamKind::Int, 0, 1000, 0},
         {"head_mlp_period", "Head MLP cache", "",
          "DiffLoss head (released code, 7): every this many diffusion steps all blocks compute; "
          "in between blocks 1-4 reuse their output change and the others their MLP output "
          "(in the first 10 % of steps the others compute every step). 0 = off.",
          ParamKind::Int, 0, 1000, 0}}};
    return s;
}

LazyMarConfig LazyMarConfig::from_json(const nlohmann::json& j) {
    ParamReader r(j, spec());
    LazyMarConfig c;
    c.enabled = r.enabled();
    c.token_cache = r.get_bool("token_cache");
    c.condition_cache = r.get_bool("condition_cache");
    c.start_step = r.get_int("start_step");
    c.period = r.get_int("period");
    c.keep_ratio = r.get_real("keep_ratio");
    c.similarity_layer = r.get_int("similarity_layer");
    c.min_similarity = r.get_real("min_similarity");
    c.force_decoded = r.get_bool("force_decoded");
    c.encoder_cache = r.get_bool("encoder_cache");
    c.head_cfg_period = r.get_int("head_cfg_period");
    c.head_mlp_period = r.get_int("head_mlp_period");
    return c;
}

nlohmann::json LazyMarConfig::to_json() const {
    return {{"enabled", enabled},
            {"token_cache", token_cache},
            {"condition_cache", condition_cache},
            {"start_step", start_step},
            {"period", period},
            {"keep_ratio", keep_ratio},
            {"similarity_layer", similarity_layer},
            {"min_similarity", min_similarity},
            {"force_decoded", force_decoded},
            {"encoder_cache", encoder_cache},
            {"head_cfg_period", head_cfg_period},
            {"head_mlp_period", head_mlp_period}};
}

LazyMarSchedule LazyMarSchedule::resolve(const LazyMarConfig& cfg, int64_t num_iter) {
    // The paper's two settings (32: 4/5, 64: 5/9), joined linearly in the step count.
    const double t = (double(num_iter) - 32.0) / 32.0;
    LazyMarSchedule s;
    s.start = cfg.start_step > 0 ? cfg.start_step : std::max<int64_t>(1, std::llround(4.0 + t));
    s.period = cfg.period > 0 ? cfg.period : std::max<int64_t>(2, std::llround(5.0 + 4.0 * t));
    return s;
}

at::Tensor lazymar_select_positions(const at::Tensor& similarity, const at::Tensor& forced,
                                    int64_t count) {
    at::Tensor score = similarity.to(at::kFloat).clone();
    if (forced.defined() && forced.numel() > 0)
        score.scatter_(1, forced, -std::numeric_limits<float>::infinity());
    auto idx = std::get<1>(score.topk(count, 1, /*largest=*/false, /*sorted=*/false));
    return std::get<0>(idx.sort(1));
}

namespace {

// (R, H, n, d) index for gathering/scattering along the sequence dim of keys/values.
at::Tensor kv_index(const at::Tensor& pos, const at::Tensor& like) {
    return pos.unsqueeze(1).unsqueeze(-1).expand(
        {pos.size(0), like.size(1), pos.size(1), like.size(3)});
}

// (R, n, C) index for gathering/scattering along the sequence dim of block outputs.
at::Tensor row_index(const at::Tensor& pos, int64_t channels) {
    return pos.unsqueeze(-1).expand({pos.size(0), pos.size(1), channels});
}

}  // namespace

// ----------------------------------------------------------------------------- plan

int64_t lazymar_decoder_positions(const LazyMarConfig& cfg, int64_t n, int64_t forced) {
    int64_t count = std::llround(cfg.keep_ratio * double(n));
    if (cfg.force_decoded) count = std::max(count, forced);
    return std::clamp<int64_t>(count, 1, n);
}

LazyMarStepStats lazymar_planned_step(const MarConfig& m, const LazyMarConfig& cfg,
                                      const std::vector<MarStepPlan>& plan, int64_t step,
                                      int64_t batch, bool guided) {
    const bool on = cfg.enabled && (cfg.token_cache || cfg.condition_cache);
    const auto schedule = LazyMarSchedule::resolve(cfg, int64_t(plan.size()));
    const bool lazy = on && step > 0 && !schedule.refresh(step);  // step 0 fills the caches
    const bool tokens = lazy && cfg.token_cache;
    const MarStepPlan& p = plan.at(size_t(step));
    const int64_t buf = m.buffer_size, n = m.total_len();
    LazyMarStepStats st;
    st.step = step;
    st.refresh = !lazy;
    st.rows = guided && !(lazy && cfg.condition_cache) ? 2 * batch : batch;
    // Encoder: buffer + known tokens; a lazy step computes the buffer and the tokens decoded
    // in the previous step. Decoder: every position up to block ℓ, then N (+ forced).
    const int64_t enc_n = buf + m.seq_len() - p.masked_before;
    const int64_t enc_q = tokens && cfg.encoder_cache ? buf + plan[step - 1].decoded() : enc_n;
    st.total.assign(size_t(m.encoder_depth), enc_n);
    st.computed.assign(size_t(m.encoder_depth), enc_q);
    const int64_t dec_q =
        tokens ? lazymar_decoder_positions(cfg, n, p.decoded() + plan[step - 1].decoded()) : n;
    for (int64_t l = 0; l < m.decoder_depth; ++l) {
        st.total.push_back(n);
        st.computed.push_back(tokens && l > cfg.similarity_layer ? dec_q : n);
    }
    return st;
}

// ----------------------------------------------------------------------------- token cache

// Every cache (per encoder block: keys, values, outputs by position; per decoder block after ℓ:
// keys, values, outputs; block ℓ's values for the similarity) is a MarHookState tensor: written
// in full at refresh steps, scattered into at lazy steps, so whole-step CUDA graphs can replay
// it. Which steps are lazy and how many rows each block computes come from the plan
// (lazymar_planned_step), which select_tokens checks against the rows it really selects.
class LazyMarTokenCache : public MarSamplingHooks {
  public:
    LazyMarTokenCache(const LazyMarConfig& cfg, const MarConfig& model, ProbeSink* probe)
        : cfg_(cfg), model_(model), probe_(probe), state_("lazymar.tokens.") {}

    std::optional<std::string> graph_signature() const override {
        // Records made inside the blocks (they read tensors, or run only while capturing), and
        // a threshold (it reads the computed count back: a data-dependent shape), need eager
        // steps.
        if (cfg_.min_similarity > 0) return std::nullopt;
        if (probe_ && (probe_->wants_accel("lazymar", probe_kinds::kLazyMarSimilarity) ||
                       probe_->wants_accel("lazymar", probe_kinds::kLazyMarComputedRows) ||
                       probe_->wants_accel("lazymar", probe_kinds::kLazyMarTokens)))
            return std::nullopt;
        return "lazymar.tokens " + cfg_.to_json().dump();
    }

    void on_step_begin(MarStepContext& ctx) override {
        if (ctx.step == 0 || plan_.empty()) {
            plan_ = mar_step_plan(model_.seq_len(), ctx.num_iter, 1.0, CfgSchedule::Linear);
            stats_.clear();
        }
        stats_.push_back(lazymar_planned_step(model_, cfg_, plan_, ctx.step, ctx.batch, ctx.cfg));
        refresh_ = stats_.back().refresh;
        dec_rows_ = enc_rows_ = enc_rows_pos_ = at::Tensor();
    }

    at::Tensor select_tokens(const MarBlockContext& ctx, const at::Tensor& x) override {
        at::Tensor rows;
        if (!refresh_ && ctx.stage == MarStage::Encoder && cfg_.encoder_cache) {
            if (ctx.layer == 0) plan_encoder_rows(ctx);
            rows = enc_rows_;
        } else if (!refresh_ && ctx.stage == MarStage::Decoder &&
                   ctx.layer > cfg_.similarity_layer) {
            rows = dec_rows_;
        }
        record_block(ctx, rows.defined() ? rows.size(1) : x.size(1), x.size(1));
        return rows;
    }

    void on_keys_values(const MarBlockContext& ctx, const at::Tensor& rows, at::Tensor& k,
                        at::Tensor& v) override {
        const MarStepContext& s = ctx.step;
        const int64_t R = s.rows();
        if (ctx.stage == MarStage::Encoder) {
            if (!cfg_.encoder_cache) return;
            const std::string name = "enc" + std::to_string(ctx.layer);
            if (refresh_) {
                // Position-indexed (R, H, buffer + seq_len, d): the encoder's sequence changes
                // from step to step, positions do not.
                const std::vector<int64_t> sizes{R, k.size(1), model_.total_len(), k.size(3)};
                auto ck = state_.get(s, name + ".k", sizes, k.options());
                auto cv = state_.get(s, name + ".v", sizes, v.options());
                ck.zero_();
                cv.zero_();
                ck.scatter_(2, kv_index(ctx.positions, k), k);
                cv.scatter_(2, kv_index(ctx.positions, v), v);
                return;
            }
            auto ck = state_.get(s, name + ".k").narrow(0, 0, R);
            auto cv = state_.get(s, name + ".v").narrow(0, 0, R);
            ck.scatter_(2, kv_index(enc_rows_pos_, k), k);
            cv.scatter_(2, kv_index(enc_rows_pos_, v), v);
            k = ck.gather(2, kv_index(ctx.positions, k));
            v = cv.gather(2, kv_index(ctx.positions, v));
            return;
        }
        // Decoder: positions are the sequence indices 0 .. n-1 for every row.
        const int64_t l = ctx.layer, ell = cfg_.similarity_layer;
        if (l < ell) return;
        if (l == ell) {
            if (refresh_) {
                state_.get(s, "sim_v", v.sizes(), v.options()).copy_(v);
                return;
            }
            plan_decoder_rows(ctx, v);
            state_.get(s, "sim_v").narrow(0, 0, R).copy_(v);
            return;
        }
        const std::string name = "dec" + std::to_string(l);
        if (refresh_) {
            state_.get(s, name + ".k", k.sizes(), k.options()).copy_(k);
            state_.get(s, name + ".v", v.sizes(), v.options()).copy_(v);
            return;
        }
        auto ck = state_.get(s, name + ".k").narrow(0, 0, R);
        auto cv = state_.get(s, name + ".v").narrow(0, 0, R);
        if (!rows.defined()) {  // every position computed (keep_ratio 1)
            ck.copy_(k);
            cv.copy_(v);
            return;
        }
        ck.scatter_(2, kv_index(rows, k), k);
        cv.scatter_(2, kv_index(rows, v), v);
        k = ck;
        v = cv;
    }

    at::Tensor restore_tokens(const MarBlockContext& ctx, const at::Tensor& x,
                              const at::Tensor& rows, const at::Tensor& h) override {
        const int64_t R = ctx.step.rows(), C = h.size(2);
        if (ctx.stage == MarStage::Encoder) {
            auto out =
                state_.get(ctx.step, "enc" + std::to_string(ctx.layer) + ".out").narrow(0, 0, R);
            out.scatter_(1, row_index(enc_rows_pos_, C), h);
            return out.gather(1, row_index(ctx.positions, C));
        }
        auto out = state_.get(ctx.step, "dec" + std::to_string(ctx.layer) + ".out").narrow(0, 0, R);
        out.scatter_(1, row_index(rows, C), h);
        return out;  // the cache itself: rewritten in place only at the next step
    }

    void on_block_output(const MarBlockContext& ctx, const at::Tensor& x) override {
        const MarStepContext& s = ctx.step;
        const int64_t R = s.rows();
        if (ctx.stage == MarStage::Encoder) {
            if (!cfg_.encoder_cache || !refresh_) return;
            auto out = state_.get(s, "enc" + std::to_string(ctx.layer) + ".out",
                                  {R, model_.total_len(), x.size(2)}, x.options());
            out.zero_();
            out.scatter_(1, row_index(ctx.positions, x.size(2)), x);
            return;
        }
        if (ctx.layer <= cfg_.similarity_layer) return;
        const std::string name = "dec" + std::to_string(ctx.layer) + ".out";
        if (refresh_)
            state_.get(s, name, x.sizes(), x.options()).copy_(x);
        else if (!dec_rows_.defined())
            state_.get(s, name).narrow(0, 0, R).copy_(x);
    }

    const std::vector<LazyMarStepStats>& stats() const { return stats_; }

  private:
    // Encoder rows of a lazy step: the buffer slots and the tokens decoded in the previous
    // step (known now, not at the step the cache holds them from).
    void plan_encoder_rows(const MarBlockContext& ctx) {
        const auto& s = ctx.step;
        const int64_t R = s.rows(), buf = model_.buffer_size;
        const int64_t n = ctx.positions.size(1);
        const auto image_pos = ctx.positions.narrow(1, buf, n - buf).contiguous();
        const auto fresh = s.decoded_prev.repeat({R / s.batch, 1}) + buf;
        const auto fresh_idx = at::searchsorted(image_pos, fresh) + buf;
        const auto buffer_idx = at::arange(buf, fresh.options()).unsqueeze(0).expand({R, buf});
        enc_rows_ = at::cat({buffer_idx, fresh_idx}, 1);
        enc_rows_pos_ = ctx.positions.gather(1, enc_rows_);
    }

    // Decoder rows after block ℓ: least similar values first, decoded positions forced.
    void plan_decoder_rows(const MarBlockContext& ctx, const at::Tensor& v) {
        const auto& s = ctx.step;
        const int64_t R = s.rows(), n = v.size(2), buf = model_.buffer_size;
        const auto sim =
            at::cosine_similarity(v.to(at::kFloat),
                                  state_.get(s, "sim_v").narrow(0, 0, R).to(at::kFloat), -1)
                .mean(1);  // (R, n)
        at::Tensor forced;
        if (cfg_.force_decoded) {
            forced = s.decoded;
            if (s.decoded_prev.defined()) forced = at::cat({forced, s.decoded_prev}, 1);
            forced = forced.repeat({R / s.batch, 1}) + buf;
        }
        int64_t count = lazymar_decoder_positions(cfg_, n, forced.defined() ? forced.size(1) : 0);
        if (cfg_.min_similarity > 0) {  // eager only (no graph signature): a host read
            count = std::clamp<int64_t>(
                std::max(count, sim.lt(cfg_.min_similarity).sum(1).max().item<int64_t>()), 1, n);
            auto& st = stats_.back();
            for (size_t g = size_t(model_.encoder_depth + cfg_.similarity_layer + 1);
                 g < st.computed.size(); ++g)
                st.computed[g] = count;
        }
        dec_rows_ = count >= n ? at::Tensor() : lazymar_select_positions(sim, forced, count);
        if (probe_ && probe_->wants_accel("lazymar", probe_kinds::kLazyMarSimilarity)) {
            probe_->on_accel(
                {"lazymar",
                 probe_kinds::kLazyMarSimilarity,
                 s.step,
                 ctx.global_layer(),
                 sim[0].cpu(),
                 {{"mean", sim[0].mean().item<double>()}, {"computed", double(count)}}});
        }
        if (probe_ && probe_->wants_accel("lazymar", probe_kinds::kLazyMarComputedRows)) {
            const auto rows = dec_rows_.defined() ? dec_rows_.dim() == 2 ? dec_rows_[0] : dec_rows_
                                                  : at::arange(n, sim.options().dtype(at::kLong));
            probe_->on_accel({"lazymar",
                              probe_kinds::kLazyMarComputedRows,
                              s.step,
                              ctx.global_layer(),
                              rows.cpu(),
                              {{"computed", double(count)}}});
        }
    }

    // The plan's count must be what the block computes (graph replays rely on the plan).
    void record_block(const MarBlockContext& ctx, int64_t computed, int64_t total) {
        const auto& st = stats_.back();
        const auto g = size_t(ctx.global_layer());
        TORCH_CHECK(
            ctx.step.rows() == st.rows && computed == st.computed.at(g) && total == st.total.at(g),
            "LazyMAR: step ", st.step, " block ", g, " computes ", computed, " of ", total,
            " positions in ", ctx.step.rows(), " rows; the plan says ", st.computed[g], " of ",
            st.total[g], " in ", st.rows);
        if (probe_ && probe_->wants_accel("lazymar", probe_kinds::kLazyMarTokens))
            probe_->on_accel({"lazymar",
                              probe_kinds::kLazyMarTokens,
                              ctx.step.step,
                              ctx.global_layer(),
                              {},
                              {{"computed", double(computed)},
                               {"cached", double(total - computed)},
                               {"total", double(total)},
                               {"refresh", st.refresh ? 1.0 : 0.0}}});
    }

    LazyMarConfig cfg_;
    MarConfig model_;
    ProbeSink* probe_;
    MarHookState state_;
    std::vector<MarStepPlan> plan_;  // of the current run (decoded counts per step)
    bool refresh_ = true;
    at::Tensor dec_rows_, enc_rows_, enc_rows_pos_;  // this step's computed rows
    std::vector<LazyMarStepStats> stats_;
};

// ----------------------------------------------------------------------------- condition cache

// The residual is a MarHookState tensor; whether a step skips the unconditional branch follows
// from the schedule alone (step 0 and refresh steps compute both branches and cache it).
class LazyMarConditionCache : public MarSamplingHooks {
  public:
    LazyMarConditionCache(const LazyMarConfig& cfg, ProbeSink* probe)
        : cfg_(cfg), probe_(probe), state_("lazymar.condition.") {}

    std::optional<std::string> graph_signature() const override {
        // The drift record reads the residual inside the step.
        if (probe_ && probe_->wants_accel("lazymar", probe_kinds::kLazyMarCondition))
            return std::nullopt;
        return "lazymar.condition " + cfg_.to_json().dump();
    }

    void on_step_begin(MarStepContext& ctx) override {
        if (ctx.step == 0) {
            cached_ = false;
            skipped_.clear();
        }
        refresh_ = ctx.step == 0 || LazyMarSchedule::resolve(cfg_, ctx.num_iter).refresh(ctx.step);
        drift_ = -1.0;
    }

    bool skip_unconditional(const MarStepContext&) override { return !refresh_; }

    at::Tensor unconditional_rows(const MarStepContext& ctx, const at::Tensor& x_cond) override {
        return x_cond + state_.get(ctx, "residual");
    }

    void on_cfg_branches(const MarStepContext& ctx, const at::Tensor& x) override {
        const int64_t B = ctx.batch;
        auto fresh = x.narrow(0, B, B) - x.narrow(0, 0, B);
        // cached_ is host state set only where this runs (eager, or while capturing): for the
        // probe, which keeps the loop eager.
        if (probe_ && cached_ && probe_->wants_accel("lazymar", probe_kinds::kLazyMarCondition)) {
            const auto old = state_.get(ctx, "residual");
            if (old.sizes() == fresh.sizes()) {
                const auto f = fresh.to(at::kFloat);
                drift_ = (f - old.to(at::kFloat)).norm().item<double>() /
                         std::max(f.norm().item<double>(), 1e-12);
            }
        }
        age_ = ctx.step - cached_step_;
        state_.get(ctx, "residual", fresh.sizes(), fresh.options()).copy_(fresh);
        cached_ = true;
        cached_step_ = ctx.step;
    }

    void on_step_end(const MarStepContext& ctx, const at::Tensor&, const at::Tensor&) override {
        if (ctx.skip_unconditional) skipped_.push_back(ctx.step);
        if (!probe_ || !ctx.cfg) return;
        std::map<std::string, double> values{{"skipped", ctx.skip_unconditional ? 1.0 : 0.0}};
        if (drift_ >= 0) {
            values["drift"] = drift_;
            values["age"] = double(age_);
        }
        probe_->on_accel({"lazymar", probe_kinds::kLazyMarCondition, ctx.step, -1, {}, values});
    }

    const std::vector<int64_t>& skipped() const { return skipped_; }

  private:
    LazyMarConfig cfg_;
    ProbeSink* probe_;
    MarHookState state_;  // "residual" (B, buffer + seq_len, Cd): uncond - cond, last block
    bool refresh_ = true, cached_ = false;
    int64_t cached_step_ = 0, age_ = 0;
    double drift_ = -1.0;
    std::vector<int64_t> skipped_;
};

// ----------------------------------------------------------------------------- planned FLOPs

MarFlops lazymar_planned_flops(const MarConfig& m, const LazyMarConfig& cfg, int64_t num_iter,
                               int64_t batch, double guidance, int64_t diffusion_steps) {
    const bool guided = guidance != 1.0;
    const auto head = LazyMarHeadCache::from_config(cfg);
    const auto plan = mar_step_plan(m.seq_len(), num_iter, guidance, CfgSchedule::Linear);
    const int64_t n = m.total_len(), Ce = m.encoder_embed_dim, Cd = m.decoder_embed_dim;
    MarFlops f;
    // One block: computed rows `q` of R, attending to `k` keys (the loop's 4 R Lq Lk d H).
    auto block = [&](int64_t dim, int64_t R, int64_t q, int64_t k) {
        f.linear += mar_block_linear_flops(m, dim, R * q);
        f.attention += 4.0 * double(R) * double(q) * double(k) * double(dim);
    };
    for (int64_t s = 0; s < num_iter; ++s) {
        const auto st = lazymar_planned_step(m, cfg, plan, s, batch, guided);
        for (int64_t l = 0; l < m.encoder_depth; ++l)
            block(Ce, st.rows, st.computed[size_t(l)], st.total[size_t(l)]);
        for (int64_t l = 0; l < m.decoder_depth; ++l)
            block(Cd, st.rows, st.computed[size_t(m.encoder_depth + l)], n);
        const int64_t sampled = batch * plan[size_t(s)].decoded();
        f.diffusion += mar_head_flops(m, sampled, guided, diffusion_steps,
                                      head.head_cfg_cache_period(), head.head_mlp_cache_period());
    }
    return f;
}

// ----------------------------------------------------------------------------- head caches

LazyMarHeadCache::LazyMarHeadCache(int64_t cfg_period, int64_t mlp_period, ProbeSink* probe)
    : cfg_period_(cfg_period), mlp_period_(mlp_period), probe_(probe) {
    if (cfg_period < 0 || mlp_period < 0)
        throw std::invalid_argument("LazyMAR head cache periods must be >= 0, got " +
                                    std::to_string(cfg_period) + " and " +
                                    std::to_string(mlp_period));
}

LazyMarHeadCache LazyMarHeadCache::from_config(const LazyMarConfig& cfg, ProbeSink* probe) {
    return LazyMarHeadCache(cfg.enabled && cfg.condition_cache ? cfg.head_cfg_period : 0,
                            cfg.enabled ? cfg.head_mlp_period : 0, probe);
}

std::optional<std::string> LazyMarHeadCache::graph_signature() const {
    if (wants_head_cache_stats()) return std::nullopt;  // the drift is read inside the step
    return "lazymar.head cfg " + std::to_string(cfg_period_) + " mlp " +
           std::to_string(mlp_period_);
}

bool LazyMarHeadCache::wants_head_cache_stats() const {
    return on() && probe_ && probe_->wants_accel("lazymar", probe_kinds::kLazyMarHeadCache);
}

void LazyMarHeadCache::on_head_cache_stats(int64_t step, const HeadCacheStats& stats) {
    if (!wants_head_cache_stats()) return;  // a chain tells every hook
    probe_->on_accel({"lazymar",
                      probe_kinds::kLazyMarHeadCache,
                      step,
                      -1,
                      {},
                      {{"mlp_drift", stats.mlp_drift()},
                       {"mlp_refreshes", double(stats.mlp_refreshes)},
                       {"cfg_drift", stats.cfg_drift()},
                       {"cfg_refreshes", double(stats.cfg_refreshes)}}});
}

// ----------------------------------------------------------------------------- factory

const std::vector<LazyMarStepStats>& LazyMarHooks::token_stats() const {
    static const std::vector<LazyMarStepStats> none;
    return tokens ? tokens->stats() : none;
}

std::vector<int64_t> LazyMarHooks::skipped_unconditional_steps() const {
    return condition ? condition->skipped() : std::vector<int64_t>{};
}

LazyMarHooks make_lazymar_hooks(const LazyMarConfig& cfg, const MarConfig& model,
                                ProbeSink* probe) {
    LazyMarHooks h;
    auto head = std::make_shared<LazyMarHeadCache>(LazyMarHeadCache::from_config(cfg, probe));
    if (!cfg.enabled || (!cfg.token_cache && !cfg.condition_cache && !head->on())) return h;
    if (cfg.token_cache && cfg.similarity_layer >= model.decoder_depth)
        throw AccelConfigError("lazymar.similarity_layer: must be below the model's " +
                               std::to_string(model.decoder_depth) + " decoder blocks, got " +
                               std::to_string(cfg.similarity_layer));
    h.chain = std::make_shared<MarHookChain>();
    if (cfg.condition_cache) {
        h.condition = std::make_shared<LazyMarConditionCache>(cfg, probe);
        h.chain->add(h.condition);
    }
    if (cfg.token_cache) {
        h.tokens = std::make_shared<LazyMarTokenCache>(cfg, model, probe);
        h.chain->add(h.tokens);
    }
    if (head->on()) {
        h.head = head;
        h.chain->add(h.head);
    }
    return h;
}

std::shared_ptr<MarSamplingHooks> make_lazymar(const LazyMarConfig& cfg, const MarConfig& model,
                                               ProbeSink* probe) {
    return make_lazymar_hooks(cfg, model, probe).chain;
}

}  // namespace varscope
