#include "core/accel/mar_flops.h"

#include "core/sampling/gaussian_diffusion.h"

namespace varscope {

nlohmann::json MarFlops::to_json() const {
    return {
        {"linear", linear}, {"attention", attention}, {"diffusion", diffusion}, {"total", total()}};
}

double mar_block_linear_flops(const MarConfig& c, int64_t dim, int64_t rows) {
    const double C = double(dim), hidden = double(static_cast<int64_t>(dim * c.mlp_ratio));
    // qkv (3C^2) + proj (C^2) + fc1 + fc2 (2 C hidden) multiply-adds per row.
    return 2.0 * double(rows) * (4.0 * C * C + 2.0 * C * hidden);
}

double mar_diffusion_flops(const MarConfig& c, int64_t rows, int64_t steps) {
    const double w = double(c.diffloss_w), D = double(c.token_embed_dim());
    const double cz = double(c.decoder_embed_dim);
    // Per step and row: input_proj (D w), per res block adaLN (3 w^2) + MLP (2 w^2), final
    // adaLN (2 w^2) + output (w 2D, learned variance). Once per row: cond_embed (Cz w).
    const double per_step = D * w + double(c.diffloss_d) * 5.0 * w * w + 2.0 * w * w + 2.0 * w * D;
    return 2.0 * double(rows) * (double(steps) * per_step + cz * w);
}

double mar_head_flops(const MarConfig& c, int64_t tokens, bool guided, int64_t steps,
                      int64_t cfg_cache_period, int64_t mlp_cache_period) {
    if (mlp_cache_period > 0) {
        // Per step: the rows it runs (both CFG halves or the conditional one) times what its
        // kind computes; the condition embedding once per row (both halves with guidance).
        const double w = double(c.diffloss_w), D = double(c.token_embed_dim());
        const double cz = double(c.decoder_embed_dim);
        int64_t skipped = 0;
        for (int64_t b = 0; b < c.diffloss_d; ++b)
            skipped += DiffusionSampler::head_mlp_skips_block(b) ? 1 : 0;
        const double computed = double(c.diffloss_d - skipped);
        const double io = D * w + 2.0 * w * w + 2.0 * w * D;  // input_proj, final layer
        double acc = 0.0;
        for (int64_t i = 0; i < steps; ++i) {
            const bool both = guided && DiffusionSampler::full_cfg_step(i, steps, cfg_cache_period);
            double blocks = 0.0;
            switch (DiffusionSampler::head_mlp_step(i, steps, mlp_cache_period)) {
                case HeadMlpStep::Off:
                case HeadMlpStep::Refresh:
                    blocks = double(c.diffloss_d) * 5.0 * w * w;
                    break;
                case HeadMlpStep::Warmup:
                    blocks = computed * 5.0 * w * w;
                    break;
                case HeadMlpStep::Reuse:
                    // The released code's full adaLN of the computed blocks; DiffusionSampler
                    // computes only their gate (w^2), so a run does a little less than this.
                    blocks = computed * 3.0 * w * w;
                    break;
            }
            acc += double(both ? 2 * tokens : tokens) * (io + blocks);
        }
        return 2.0 * (acc + double(guided ? 2 * tokens : tokens) * cz * w);
    }
    if (!guided) return mar_diffusion_flops(c, tokens, steps);
    if (cfg_cache_period <= 0) return mar_diffusion_flops(c, 2 * tokens, steps);
    int64_t full = 0;
    for (int64_t i = 0; i < steps; ++i)
        full += DiffusionSampler::full_cfg_step(i, steps, cfg_cache_period) ? 1 : 0;
    // Full steps: both halves; the rest the conditional half only (the condition embedding of
    // both halves is counted once per row by the full steps' term).
    return mar_diffusion_flops(c, 2 * tokens, full) + mar_diffusion_flops(c, tokens, steps - full) -
           mar_diffusion_flops(c, tokens, 0);
}

void MarFlopCounter::on_keys_values(const MarBlockContext& ctx, const at::Tensor&, at::Tensor& k,
                                    at::Tensor&) {
    const int64_t dim =
        ctx.stage == MarStage::Encoder ? config_.encoder_embed_dim : config_.decoder_embed_dim;
    linear_ += mar_block_linear_flops(config_, dim, k.size(0) * k.size(2));
}

void MarFlopCounter::on_step_end(const MarStepContext& ctx, const at::Tensor& sampled,
                                 const at::Tensor&) {
    const int64_t tokens = sampled.size(0) * sampled.size(1);
    diffusion_ += mar_head_flops(config_, tokens, ctx.cfg, diffusion_steps_,
                                 ctx.head_cfg_cache_period, ctx.head_mlp_cache_period);
}

MarFlops MarFlopCounter::flops(double attention_flops) const {
    MarFlops f;
    f.linear = linear_;
    f.attention = attention_flops;
    f.diffusion = diffusion_;
    return f;
}

std::shared_ptr<MarHookChain> chain_with_counter(std::shared_ptr<MarFlopCounter> counter,
                                                 std::shared_ptr<MarSamplingHooks> inner) {
    auto chain = std::make_shared<MarHookChain>();
    chain->add(std::move(counter));
    if (inner) chain->add(std::move(inner));
    return chain;
}

}  // namespace varscope
