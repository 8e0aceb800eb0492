#include "core/sampling/var_sampler.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <torch/cuda.h>

#include <chrono>

#include "core/sampling/kv_cache.h"
#include "core/sampling/token_sampling.h"

namespace varscope {
namespace {

using Clock = std::chrono::steady_clock;

double millis_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

at::Tensor named_tensor(const torch::nn::Module& m, const std::string& name) {
    for (const auto& p : m.named_parameters())
        if (p.key() == name) return p.value();
    throw std::logic_error("model has no tensor '" + name + "'");
}

// One block of one scale, with the hook points the accelerators use.
at::Tensor run_block(const AdaLNSelfAttnImpl& blk, const at::Tensor& x, const at::Tensor& cond,
                     const BlockContext& ctx, SamplingHooks* hooks, ProbeSink* probe,
                     AttentionBackend backend) {
    const auto m = blk.modulation(cond);
    const at::Tensor rows = hooks ? hooks->select_tokens(ctx, x) : at::Tensor();
    const at::Tensor xs = rows.defined() ? x.index_select(1, rows) : x;

    auto qkv = blk.attn->project_qkv(blk.attn_input(xs, m));
    ctx.cache.append(ctx.layer, qkv.k, qkv.v);
    if (hooks) hooks->on_kv_append(ctx);
    auto [k, v] = ctx.cache.view(ctx.layer);

    const double s = blk.attn->softmax_scale();
    at::Tensor o = hooks ? hooks->attend(ctx, qkv.q, k, v, s) : at::Tensor();
    if (!o.defined()) {
        if (probe && probe->wants_attention(ctx.scale.scale, ctx.layer)) {
            at::Tensor probs;
            o = attention_eager(qkv.q, k, v, s, {}, &probs);
            probe->on_attention({ctx.scale.scale, ctx.layer, probs[0].to(at::kFloat).cpu()});
        } else if (backend == AttentionBackend::Eager) {
            o = attention_eager(qkv.q, k, v, s);
        } else {
            o = attention_sdpa(qkv.q, k, v, s);
        }
    }
    auto h = xs + blk.attn->project_out(o).mul(m.gamma1);
    h = h + blk.ffn_branch(h, m);
    return rows.defined() ? x.index_copy(1, rows, h) : h;
}

std::optional<at::Generator> make_generator(const at::Device& device, std::optional<uint64_t> seed) {
    if (!seed) return std::nullopt;
    // A private generator of the model's device, seeded like torch.Generator(device).manual_seed.
    at::Generator gen = at::globalContext().defaultGenerator(device).clone();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_current_seed(*seed);
    return gen;
}

}  // namespace

void synchronize_device(const at::Device& device) {
    if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

void VarSampleOptions::validate(const VarConfig& c) const {
    auto fail = [](const std::string& m) { throw std::invalid_argument(m); };
    if (class_ids.empty() && (batch < 1 || batch > 4096))
        fail("batch must be in [1, 4096], got " + std::to_string(batch));
    for (auto id : class_ids)
        if (id < -1 || id >= c.num_classes)
            fail("class id " + std::to_string(id) + " is out of range: the model has " +
                 std::to_string(c.num_classes) + " classes (0.." +
                 std::to_string(c.num_classes - 1) + ", or -1 for unconditional)");
    if (!(cfg >= 0.0 && cfg <= 100.0)) fail("cfg must be in [0, 100], got " + std::to_string(cfg));
    if (top_k < 0) fail("top_k must be >= 0 (0 = off), got " + std::to_string(top_k));
    if (!(top_p >= 0.0 && top_p <= 1.0)) fail("top_p must be in [0, 1], got " + std::to_string(top_p));
}

VarSampler::VarSampler(VarTransformer var, Vqvae vae) : var_(std::move(var)), vae_(std::move(vae)) {
    const auto& c = var_->config();
    if (c.patch_nums != vae_->config().patch_nums || c.cvae != vae_->config().z_channels ||
        c.vocab_size != vae_->config().vocab_size)
        throw std::invalid_argument(
            "VAR and VQVAE do not fit together: patch schedule, latent channels (" +
            std::to_string(c.cvae) + " vs " + std::to_string(vae_->config().z_channels) +
            ") and vocabulary (" + std::to_string(c.vocab_size) + " vs " +
            std::to_string(vae_->config().vocab_size) + ") must match");
}

VarSampleResult VarSampler::sample(const VarSampleOptions& opt, SamplingHooks* hooks,
                                   ProbeSink* probe) {
    const VarConfig& c = var_->config();
    opt.validate(c);
    c10::InferenceMode inference;
    const auto t_start = Clock::now();
    const at::Device device = var_->pos_1LC.device();
    const auto dtype = var_->pos_1LC.scalar_type();
    const int64_t S = c.num_scales();
    auto gen = make_generator(device, opt.seed);

    // Labels: given, or drawn uniformly first (the official order of random draws).
    at::Tensor labels;
    if (opt.class_ids.empty()) {
        auto uniform = at::full({1, c.num_classes}, 1.0 / c.num_classes, at::TensorOptions(device).dtype(at::kFloat));
        labels = at::multinomial(uniform, opt.batch, true, gen).view({opt.batch});
    } else {
        labels = at::tensor(opt.class_ids, at::kLong).to(device);
    }
    const int64_t B = labels.size(0);
    const auto codebook = named_tensor(*vae_, "quantize.embedding.weight");

    auto cond_BD = var_->class_embedding(at::cat({labels, at::full_like(labels, -1)}));
    const auto lvl_pos = var_->level_position();
    at::Tensor next = var_->first_scale_input(cond_BD);
    at::Tensor f_hat = at::zeros({B, c.cvae, c.patch_nums.back(), c.patch_nums.back()},
                                 at::TensorOptions(device).dtype(at::kFloat));
    KvCache cache(c.depth, 2 * B, c.num_heads, c.head_dim(), c.total_tokens(),
                  at::TensorOptions(device).dtype(dtype));

    VarSampleResult res;
    res.labels = labels;
    const at::Tensor cond = var_->block_condition(cond_BD);
    for (int64_t si = 0; si < S; ++si) {
        if (opt.cancel && opt.cancel->load(std::memory_order_relaxed)) throw SamplingCancelled();
        const auto t_scale = Clock::now();
        const int64_t pn = c.patch_nums[si];
        ScaleContext sctx{c, si, pn, B, c.scale_begin(si), f_hat};
        if (hooks) hooks->on_scale_begin(sctx);

        at::Tensor x = next;
        for (int64_t layer = 0; layer < c.depth; ++layer) {
            BlockContext bctx{sctx, layer, cache};
            x = run_block(var_->block(layer), x, cond, bctx, hooks, probe, opt.attention);
        }
        auto logits = guide(var_->logits(x, cond_BD), guidance_at_scale(opt.cfg, si, S));
        if (hooks) hooks->on_logits(sctx, logits);
        at::Tensor idx = sample_tokens(logits, {opt.top_k, opt.top_p}, gen);

        at::Tensor h_BlC;
        if (!opt.more_smooth) {
            h_BlC = at::embedding(codebook, idx);
        } else {
            // Gumbel-softmax over the filtered logits, temperature annealed with the scale.
            const double ratio = static_cast<double>(si) / std::max<int64_t>(S - 1, 1);
            const double tau = std::max(0.27 * (1 - ratio * 0.95), 0.005);
            auto gumbel = -at::empty_like(logits).exponential_(1.0, gen).log();
            auto soft = ((logits.mul(1 + ratio) + gumbel) / tau).softmax(-1);
            h_BlC = at::matmul(soft, codebook.unsqueeze(0));
        }
        auto h_BChw = h_BlC.transpose(1, 2).reshape({B, c.cvae, pn, pn}).to(at::kFloat);
        auto [fh, next_in] = vae_->next_autoregressive_input(si, S, f_hat, h_BChw);
        f_hat = fh;
        if (si + 1 < S) {
            const int64_t nb = c.scale_begin(si + 1), nl = c.patch_nums[si + 1] * c.patch_nums[si + 1];
            auto tokens_in = next_in.view({B, c.cvae, -1}).transpose(1, 2).to(dtype);
            next = (at::linear(tokens_in, var_->word_embed->weight, var_->word_embed->bias) +
                    lvl_pos.narrow(1, nb, nl))
                       .repeat({2, 1, 1});
        }
        if (hooks) hooks->on_scale_end(sctx, idx, f_hat);
        if (opt.time_scales) synchronize_device(device);
        res.scale_millis.push_back(millis_since(t_scale));
        res.tokens.push_back(idx);
        if (probe) {
            ScaleRecord rec{si, pn, res.scale_millis.back(), idx.cpu(), {}};
            if (probe->wants_fhat()) rec.f_hat = f_hat.cpu();
            probe->on_scale(std::move(rec));
        }
    }
    res.kv_bytes = cache.total_bytes();
    const auto t_dec = Clock::now();
    res.images = vae_->decode(f_hat).add(1).mul(0.5);
    if (opt.time_scales) synchronize_device(device);
    res.decode_millis = millis_since(t_dec);
    res.f_hat = f_hat;
    res.total_millis = millis_since(t_start);
    return res;
}

}  // namespace varscope
