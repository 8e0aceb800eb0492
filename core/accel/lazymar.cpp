#include "core/accel/lazymar.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

#include "core/sampling/mar_sampler.h"  // mar_step_plan

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
         {"start_step", "First cached step", "s₀",
          "Steps before it compute everything (0 = the paper's: 5 at 64 steps, 4 at 32).",
          ParamKind::Int, 0, 4096, 0},
         {"period", "Refresh period", "τ",
          "Steps per refresh period from s₀ on; the first of each is a full refresh (0 = the "
          "paper's: 9 at 64 steps, 5 at 32).",
          ParamKind::Int, 0, 4096, 0},
         {"keep_ratio", "Computed share", "N / n",
          "Share of the decoder positions (buffer + tokens) computed after block ℓ at cached "
          "steps. Paper: ~270 of 320 skipped at 64 steps (0.16), ~250 at 32 (0.22).",
          ParamKind::Real, 0, 1, 0.16},
         {"similarity_layer", "Similarity block", "ℓ",
          "Decoder block (0-based) whose attention values V are compared with the previous "
          "step; blocks up to it compute every position. Official code: 3.",
          ParamKind::Int, 0, 255, 3},
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
          "(all compute in the first 10 % of steps). Module path only. 0 = off.",
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

// ----------------------------------------------------------------------------- token cache

class LazyMarTokenCache : public MarSamplingHooks {
  public:
    LazyMarTokenCache(const LazyMarConfig& cfg, const MarConfig& model, ProbeSink* probe)
        : cfg_(cfg), model_(model), probe_(probe) {
        enc_.resize(model.encoder_depth);
        dec_.resize(model.decoder_depth);
    }

    void on_step_begin(MarStepContext& ctx) override {
        schedule_ = LazyMarSchedule::resolve(cfg_, ctx.num_iter);
        if (ctx.step == 0) {
            valid_ = false;
            stats_.clear();
        }
        refresh_ = schedule_.refresh(ctx.step) || !valid_ || !ctx.decoded_prev.defined();
        dec_rows_ = enc_rows_ = enc_rows_pos_ = at::Tensor();
        LazyMarStepStats st;
        st.step = ctx.step;
        st.refresh = refresh_;
        stats_.push_back(st);
    }

    at::Tensor select_tokens(const MarBlockContext& ctx, const at::Tensor& x) override {
        const bool lazy = lazy_block(ctx);
        stats_.back().refresh = !lazy;  // a lazy step with more rows than cached runs fully
        at::Tensor rows;
        if (lazy && ctx.stage == MarStage::Encoder && cfg_.encoder_cache) {
            if (ctx.layer == 0) plan_encoder_rows(ctx);
            rows = enc_rows_;
        } else if (lazy && ctx.stage == MarStage::Decoder && ctx.layer > cfg_.similarity_layer) {
            rows = dec_rows_;
        }
        record_block(ctx, rows.defined() ? rows.size(1) : x.size(1), x.size(1), !lazy);
        return rows;
    }

    void on_keys_values(const MarBlockContext& ctx, const at::Tensor& rows, at::Tensor& k,
                        at::Tensor& v) override {
        const bool lazy = lazy_block(ctx);
        const int64_t R = ctx.step.rows();
        if (ctx.stage == MarStage::Encoder) {
            if (!cfg_.encoder_cache) return;
            LayerCache& c = enc_[ctx.layer];
            if (!lazy) {
                // Position-indexed (R, H, buffer + seq_len, d): the encoder's sequence changes
                // from step to step, positions do not.
                c.k = at::zeros({R, k.size(1), model_.total_len(), k.size(3)}, k.options());
                c.v = at::zeros_like(c.k);
                c.k.scatter_(2, kv_index(ctx.positions, k), k);
                c.v.scatter_(2, kv_index(ctx.positions, v), v);
                return;
            }
            auto ck = c.k.narrow(0, 0, R), cv = c.v.narrow(0, 0, R);
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
            if (lazy) plan_decoder_rows(ctx, v);
            if (!lazy || sim_v_.size(0) < R)
                sim_v_ = v.clone(at::MemoryFormat::Contiguous);
            else
                sim_v_.narrow(0, 0, R).copy_(v);
            return;
        }
        LayerCache& c = dec_[l];
        if (!lazy) {
            c.k = k.clone(at::MemoryFormat::Contiguous);
            c.v = v.clone(at::MemoryFormat::Contiguous);
            return;
        }
        auto ck = c.k.narrow(0, 0, R), cv = c.v.narrow(0, 0, R);
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
            auto out = enc_[ctx.layer].out.narrow(0, 0, R);
            out.scatter_(1, row_index(enc_rows_pos_, C), h);
            return out.gather(1, row_index(ctx.positions, C));
        }
        auto out = dec_[ctx.layer].out.narrow(0, 0, R);
        out.scatter_(1, row_index(rows, C), h);
        return out;  // the cache itself: rewritten in place only at the next step
    }

    void on_block_output(const MarBlockContext& ctx, const at::Tensor& x) override {
        const bool lazy = lazy_block(ctx);
        const int64_t R = ctx.step.rows();
        if (ctx.stage == MarStage::Encoder) {
            if (!cfg_.encoder_cache || lazy) return;
            auto& out = enc_[ctx.layer].out;
            out = at::zeros({R, model_.total_len(), x.size(2)}, x.options());
            out.scatter_(1, row_index(ctx.positions, x.size(2)), x);
            if (ctx.layer == model_.encoder_depth - 1) mark_filled(ctx);
            return;
        }
        if (ctx.layer <= cfg_.similarity_layer) {
            if (!lazy && ctx.layer == model_.decoder_depth - 1) mark_filled(ctx);
            return;
        }
        auto& out = dec_[ctx.layer].out;
        if (!lazy) {
            out = x.clone(at::MemoryFormat::Contiguous);
            if (ctx.layer == model_.decoder_depth - 1) mark_filled(ctx);
        } else if (!dec_rows_.defined()) {
            out.narrow(0, 0, R).copy_(x);
        }
    }

    const std::vector<LazyMarStepStats>& stats() const { return stats_; }

  private:
    struct LayerCache {
        at::Tensor k, v, out;
    };

    // Caches complete after a full step's last decoder block.
    void mark_filled(const MarBlockContext& ctx) {
        if (ctx.stage != MarStage::Decoder) return;
        valid_ = true;
        cache_rows_ = ctx.step.rows();
    }

    bool lazy_block(const MarBlockContext& ctx) const {
        return !refresh_ && valid_ && ctx.step.rows() <= cache_rows_;
    }

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
            at::cosine_similarity(v.to(at::kFloat), sim_v_.narrow(0, 0, R).to(at::kFloat), -1)
                .mean(1);  // (R, n)
        at::Tensor forced;
        if (cfg_.force_decoded) {
            forced = s.decoded;
            if (s.decoded_prev.defined()) forced = at::cat({forced, s.decoded_prev}, 1);
            forced = forced.repeat({R / s.batch, 1}) + buf;
        }
        int64_t count = std::llround(cfg_.keep_ratio * double(n));
        if (forced.defined()) count = std::max(count, forced.size(1));
        if (cfg_.min_similarity > 0)
            count = std::max(count, sim.lt(cfg_.min_similarity).sum(1).max().item<int64_t>());
        count = std::clamp<int64_t>(count, 1, n);
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

    void record_block(const MarBlockContext& ctx, int64_t computed, int64_t total, bool full) {
        auto& st = stats_.back();
        st.rows = ctx.step.rows();
        st.computed.push_back(computed);
        st.total.push_back(total);
        if (probe_)
            probe_->on_accel({"lazymar",
                              probe_kinds::kLazyMarTokens,
                              ctx.step.step,
                              ctx.global_layer(),
                              {},
                              {{"computed", double(computed)},
                               {"cached", double(total - computed)},
                               {"total", double(total)},
                               {"refresh", full ? 1.0 : 0.0}}});
    }

    LazyMarConfig cfg_;
    MarConfig model_;
    ProbeSink* probe_;
    LazyMarSchedule schedule_;
    std::vector<LayerCache> enc_, dec_;
    at::Tensor sim_v_;  // values of block ℓ at the last step (R, H, n, d)
    bool valid_ = false, refresh_ = true;
    int64_t cache_rows_ = 0;
    at::Tensor dec_rows_, enc_rows_, enc_rows_pos_;
    std::vector<LazyMarStepStats> stats_;
};

// ----------------------------------------------------------------------------- condition cache

class LazyMarConditionCache : public MarSamplingHooks {
  public:
    LazyMarConditionCache(const LazyMarConfig& cfg, ProbeSink* probe) : cfg_(cfg), probe_(probe) {}

    void on_step_begin(MarStepContext& ctx) override {
        if (ctx.step == 0) {
            residual_ = at::Tensor();
            skipped_.clear();
        }
        refresh_ = LazyMarSchedule::resolve(cfg_, ctx.num_iter).refresh(ctx.step);
        drift_ = -1.0;
    }

    bool skip_unconditional(const MarStepContext& ctx) override {
        return !refresh_ && residual_.defined() && residual_.size(0) == ctx.batch;
    }

    at::Tensor unconditional_rows(const MarStepContext&, const at::Tensor& x_cond) override {
        return x_cond + residual_;
    }

    void on_cfg_branches(const MarStepContext& ctx, const at::Tensor& x) override {
        const int64_t B = ctx.batch;
        auto fresh = x.narrow(0, B, B) - x.narrow(0, 0, B);
        if (probe_ && residual_.defined() && residual_.sizes() == fresh.sizes() &&
            probe_->wants_accel("lazymar", probe_kinds::kLazyMarCondition)) {
            const auto f = fresh.to(at::kFloat);
            drift_ = (f - residual_.to(at::kFloat)).norm().item<double>() /
                     std::max(f.norm().item<double>(), 1e-12);
        }
        age_ = ctx.step - cached_step_;
        residual_ = fresh;
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
    bool refresh_ = true;
    at::Tensor residual_;  // (B, buffer + seq_len, Cd): uncond - cond, last block output
    int64_t cached_step_ = 0, age_ = 0;
    double drift_ = -1.0;
    std::vector<int64_t> skipped_;
};

// ----------------------------------------------------------------------------- planned FLOPs

MarFlops lazymar_planned_flops(const MarConfig& m, const LazyMarConfig& cfg, int64_t num_iter,
                               int64_t batch, double guidance, int64_t diffusion_steps) {
    const bool on = cfg.enabled && (cfg.token_cache || cfg.condition_cache);
    const bool guided = guidance != 1.0;
    const auto plan = mar_step_plan(m.seq_len(), num_iter, guidance, CfgSchedule::Linear);
    const auto schedule = LazyMarSchedule::resolve(cfg, num_iter);
    const int64_t buf = m.buffer_size, n = m.total_len();
    const int64_t Ce = m.encoder_embed_dim, Cd = m.decoder_embed_dim;
    MarFlops f;
    // One block: computed rows `q` of R, attending to `k` keys (the loop's 4 R Lq Lk d H).
    auto block = [&](int64_t dim, int64_t R, int64_t q, int64_t k) {
        f.linear += mar_block_linear_flops(m, dim, R * q);
        f.attention += 4.0 * double(R) * double(q) * double(k) * double(dim);
    };
    for (int64_t s = 0; s < num_iter; ++s) {
        const auto& p = plan[s];
        const bool lazy = on && s > 0 && !schedule.refresh(s);
        const bool tokens = lazy && cfg.token_cache;
        const int64_t R = guided && !(lazy && cfg.condition_cache) ? 2 * batch : batch;
        const int64_t enc_n = buf + m.seq_len() - p.masked_before;
        const int64_t enc_q = tokens && cfg.encoder_cache ? buf + plan[s - 1].decoded() : enc_n;
        for (int64_t l = 0; l < m.encoder_depth; ++l) block(Ce, R, enc_q, enc_n);
        int64_t dec_q = n;
        if (tokens) {
            int64_t count = std::llround(cfg.keep_ratio * double(n));
            if (cfg.force_decoded) count = std::max(count, p.decoded() + plan[s - 1].decoded());
            dec_q = std::clamp<int64_t>(count, 1, n);
        }
        for (int64_t l = 0; l < m.decoder_depth; ++l)
            block(Cd, R, tokens && l > cfg.similarity_layer ? dec_q : n, n);
        const int64_t sampled = batch * p.decoded();
        f.diffusion += mar_head_flops(m, sampled, guided, diffusion_steps, lazymar_head_period(cfg),
                                      lazymar_head_mlp_period(cfg));
    }
    return f;
}

int64_t lazymar_head_period(const LazyMarConfig& cfg) {
    return cfg.enabled && cfg.condition_cache ? cfg.head_cfg_period : 0;
}

int64_t lazymar_head_mlp_period(const LazyMarConfig& cfg) {
    return cfg.enabled ? cfg.head_mlp_period : 0;
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
    if (!cfg.enabled || (!cfg.token_cache && !cfg.condition_cache)) return h;
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
    return h;
}

std::shared_ptr<MarSamplingHooks> make_lazymar(const LazyMarConfig& cfg, const MarConfig& model,
                                               ProbeSink* probe) {
    return make_lazymar_hooks(cfg, model, probe).chain;
}

}  // namespace varscope
