#include "core/sampling/var_sampler.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "core/sampling/cuda_graph.h"
#include "core/sampling/kv_cache.h"
#include "core/sampling/token_sampling.h"
#include "kernels/cuda_graph.h"

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

// One block of one step, with the hook points the accelerators use. `step_mask` is the
// additive block-causal mask among the step's packed rows (grouped steps only).
at::Tensor run_block(const AdaLNSelfAttnImpl& blk, const at::Tensor& x, const at::Tensor& cond,
                     BlockContext& ctx, SamplingHooks* hooks, ProbeSink* probe,
                     AttentionBackend backend, const at::Tensor& step_mask, double& flops) {
    // Per-block timing for the inspector: synchronises the device between the parts, so it is
    // only done when a probe asks (it slows sampling down).
    const bool timed = probe && probe->wants_block_timing();
    std::vector<double> part_ms;
    auto t_part = Clock::now();
    auto lap = [&] {
        if (!timed) return;
        synchronize_device(x.device());
        part_ms.push_back(millis_since(t_part));
        t_part = Clock::now();
    };
    if (timed) synchronize_device(x.device());
    t_part = Clock::now();
    const auto m = blk.modulation(cond);
    const at::Tensor rows = hooks ? hooks->select_tokens(ctx, x) : at::Tensor();
    // rows: (K) for every batch row, or (2B, K) chosen per batch row (FastVAR).
    const bool per_row = rows.defined() && rows.dim() == 2;
    const at::Tensor xs = !rows.defined() ? x
                          : per_row ? x.gather(1, rows.unsqueeze(-1).expand({-1, -1, x.size(2)}))
                                    : x.index_select(1, rows);

    auto qkv = blk.attn->project_qkv(blk.attn_input(xs, m));
    ctx.cache.append(ctx.layer, qkv.k, qkv.v);
    if (hooks) hooks->on_kv_append(ctx);
    auto [k, v] = ctx.cache.view(ctx.layer);
    if (step_mask.defined()) {
        TORCH_CHECK(!per_row, "per-row token selection cannot be used in grouped steps");
        // The step's own keys are the newest entries of the cache; everything before them
        // (earlier steps) is visible to every query of the step.
        const at::Tensor sm =
            rows.defined() ? step_mask.index_select(0, rows).index_select(1, rows) : step_mask;
        const int64_t earlier = k.size(2) - sm.size(1);
        TORCH_CHECK(earlier >= 0, "KV cache lost keys of the current grouped step");
        ctx.mask = at::cat({at::zeros({sm.size(0), earlier}, sm.options()), sm}, 1);
    }

    lap();  // selection, QKV projection, cache append and eviction
    const double s = blk.attn->softmax_scale();
    at::Tensor o = hooks ? hooks->attend(ctx, qkv.q, k, v, s) : at::Tensor();
    if (o.defined() && ctx.attention_flops >= 0) {
        flops += ctx.attention_flops;
    } else {
        flops += 4.0 * static_cast<double>(qkv.q.size(0)) * qkv.q.size(1) * qkv.q.size(2) * k.size(2) *
                 qkv.q.size(3);
    }
    if (!o.defined()) {
        if (probe && probe->wants_attention(ctx.scale.scale, ctx.layer)) {
            at::Tensor probs;
            o = attention_eager(qkv.q, k, v, s, ctx.mask, &probs);
            probe->on_attention({ctx.scale.scale, ctx.layer, probs[0].to(at::kFloat).cpu()});
        } else if (backend == AttentionBackend::Eager) {
            o = attention_eager(qkv.q, k, v, s, ctx.mask);
        } else {
            o = attention_sdpa(qkv.q, k, v, s, ctx.mask);
        }
    }
    lap();  // attention
    auto h = xs + blk.attn->project_out(o).mul(m.gamma1);
    h = h + blk.ffn_branch(h, m);
    at::Tensor out = h;
    if (rows.defined()) {
        out = hooks->restore_tokens(ctx, x, rows, h);
        if (!out.defined())
            out = per_row ? x.scatter(1, rows.unsqueeze(-1).expand_as(h), h) : x.index_copy(1, rows, h);
    }
    if (hooks) hooks->on_block_output(ctx, out);
    lap();  // output projection, FFN, restoration
    if (timed)
        probe->on_accel({"loop", "block_ms", ctx.scale.scale, ctx.layer, {},
                         {{"qkv_ms", part_ms[0]}, {"attention_ms", part_ms[1]}, {"ffn_ms", part_ms[2]},
                          {"rows", static_cast<double>(xs.size(1))}}});
    return out;
}

// Additive mask (L, L) over a grouped step's packed rows: a row sees the rows of its own and of
// earlier scales of the group (the training-time block-causal mask restricted to the group).
at::Tensor group_mask(const std::vector<ScaleSegment>& segs, const at::TensorOptions& options) {
    std::vector<int64_t> seg_of_row;
    for (size_t i = 0; i < segs.size(); ++i)
        seg_of_row.insert(seg_of_row.end(), segs[i].length(), static_cast<int64_t>(i));
    const auto id = at::tensor(seg_of_row, at::kLong);
    const auto visible = id.unsqueeze(1) >= id.unsqueeze(0);
    return at::zeros(visible.sizes(), options)
        .masked_fill(visible.logical_not().to(options.device()), -std::numeric_limits<double>::infinity());
}

// What a block's step needs that depends only on the class condition, computed once per call by
// the graphed path's prologue.
struct BlockConstants {
    Modulation m;
    at::Tensor scale1p, scale2p;  // 1 + scale
    at::Tensor qkv_bias;          // q_bias | zero_k_bias | v_bias
    at::Tensor q_mul;             // exp(min(scale_mul, log 100)), only with L2-normalised q/k
    static constexpr size_t kTensors = 10;
    void append_to(std::vector<at::Tensor>& out) const {
        out.insert(out.end(), {m.gamma1, m.gamma2, m.scale1, m.scale2, m.shift1, m.shift2, scale1p,
                               scale2p, qkv_bias, q_mul});
    }
    static BlockConstants from(const std::vector<at::Tensor>& t, size_t i) {
        i *= kTensors;
        return {{t[i], t[i + 1], t[i + 2], t[i + 3], t[i + 4], t[i + 5]},
                t[i + 6], t[i + 7], t[i + 8], t[i + 9]};
    }
};

BlockConstants block_constants(const AdaLNSelfAttnImpl& blk, const at::Tensor& cond) {
    BlockConstants k;
    k.m = blk.modulation(cond);
    k.scale1p = k.m.scale1.add(1);
    k.scale2p = k.m.scale2.add(1);
    const auto& a = *blk.attn;
    k.qkv_bias = at::cat({a.q_bias, a.zero_k_bias, a.v_bias});
    k.q_mul = a.scale_mul_1H11.defined() ? a.scale_mul_1H11.clamp_max(std::log(100.0)).exp()
                                          : at::Tensor();
    return k;
}

// The dense block of the graphed path: the operations of AdaLNSelfAttnImpl's attn_input,
// SelfAttentionImpl::project_qkv and ffn_branch with run_block's hook-free path, in the same
// order on the same values (so the same results), with the per-call constants precomputed.
// VarGraph.GraphTokensEqualEagerTokens (GPU) checks that it stays equal to the model's code.
at::Tensor dense_block(const AdaLNSelfAttnImpl& blk, const at::Tensor& x, const BlockConstants& k,
                       KvCache& cache, int64_t layer, double eps, AttentionBackend backend,
                       double& flops) {
    const int64_t B = x.size(0), L = x.size(1), C = x.size(2);
    const auto& attn = *blk.attn;
    const int64_t H = attn.num_heads(), hd = C / H;
    const auto normed = at::layer_norm(x, {C}, {}, {}, eps).mul(k.scale1p).add_(k.m.shift1);
    const auto parts = at::linear(normed, attn.mat_qkv->weight, k.qkv_bias)
                           .view({B, L, 3, H, hd})
                           .permute({2, 0, 3, 1, 4})
                           .unbind(0);
    at::Tensor q = parts[0], kk = parts[1];
    if (k.q_mul.defined()) {
        auto l2 = [](const at::Tensor& t) { return t / t.norm(2, {-1}, true).clamp_min(1e-12); };
        q = l2(q).mul(k.q_mul);
        kk = l2(kk);
    }
    cache.append(layer, kk, parts[2]);
    auto [keys, values] = cache.view(layer);
    flops += 4.0 * static_cast<double>(q.size(0)) * q.size(1) * q.size(2) * keys.size(2) * q.size(3);
    const double s = attn.softmax_scale();
    const auto o = backend == AttentionBackend::Eager ? attention_eager(q, keys, values, s)
                                                      : attention_sdpa(q, keys, values, s);
    auto h = x + attn.project_out(o).mul(k.m.gamma1);
    const auto ffn_in = at::layer_norm(h, {C}, {}, {}, eps).mul(k.scale2p).add_(k.m.shift2);
    return h + blk.ffn->forward(ffn_in).mul(k.m.gamma2);
}

// The transformer steps can run as CUDA graph replays when nothing needs to see inside them:
// no hooks (an empty chain is the baseline too) and no probe that wants per-block data.
bool graphs_apply(const VarSampleOptions& opt, const VarConfig& c, const at::Device& device,
                  SamplingHooks* hooks, ProbeSink* probe) {
    if (!opt.cuda_graphs || !device.is_cuda() || !kernels::cuda_graphs_built()) return false;
    if (hooks) {
        const auto* chain = dynamic_cast<const HookChain*>(hooks);
        if (!chain || !chain->empty()) return false;
    }
    if (probe) {
        if (probe->wants_block_timing()) return false;
        for (int64_t si = 0; si < c.num_scales(); ++si)
            for (int64_t layer = 0; layer < c.depth; ++layer)
                if (probe->wants_attention(si, layer)) return false;
    }
    return true;
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

VarSampler::VarSampler(VarTransformer var, Vqvae vae)
    : var_(std::move(var)), vae_(std::move(vae)), graphs_(std::make_shared<DenseGraphCache>()) {
    const auto& c = var_->config();
    if (c.patch_nums != vae_->config().patch_nums || c.cvae != vae_->config().z_channels ||
        c.vocab_size != vae_->config().vocab_size)
        throw std::invalid_argument(
            "VAR and VQVAE do not fit together: patch schedule, latent channels (" +
            std::to_string(c.cvae) + " vs " + std::to_string(vae_->config().z_channels) +
            ") and vocabulary (" + std::to_string(c.vocab_size) + " vs " +
            std::to_string(vae_->config().vocab_size) + ") must match");
}

void VarSampler::clear_cuda_graphs() { graphs_->clear(); }

size_t VarSampler::cuda_graph_sets() const { return graphs_->size(); }

VarSampleResult VarSampler::sample(const VarSampleOptions& opt, SamplingHooks* hooks,
                                   ProbeSink* probe) {
    const VarConfig& c = var_->config();
    opt.validate(c);
    c10::InferenceMode inference;
    const auto t_start = Clock::now();
    const at::Device device = var_->pos_1LC.device();
    const auto dtype = var_->pos_1LC.scalar_type();
    const int64_t S = c.num_scales();
    auto gen = seeded_generator(device, opt.seed);

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
    VarSampleResult res;
    res.labels = labels;

    // With CUDA graphs the step's inputs live in the graphs' own tensors (fixed addresses);
    // the one call using them holds their lock.
    std::shared_ptr<DenseStepGraphs> graphs;
    std::unique_lock<std::mutex> graphs_lock;
    if (graphs_apply(opt, c, device, hooks, probe)) {
        const DenseGraphKey key{device.index(), B, dtype, static_cast<int>(opt.attention),
                                c.patch_nums, weights_fingerprint(*var_)};
        graphs = graphs_->get(c, key, cond_BD);
        graphs_lock = std::unique_lock<std::mutex>(graphs->mutex());
        cond_BD = graphs->condition().copy_(cond_BD);
        res.cuda_graphs = true;
    }
    const double capture_ms_before = graphs ? graphs->capture_millis() : 0.0;
    at::Tensor f_hat = graphs ? graphs->f_hat().zero_()
                              : at::zeros({B, c.cvae, c.patch_nums.back(), c.patch_nums.back()},
                                          at::TensorOptions(device).dtype(at::kFloat));
    const auto kv_options = at::TensorOptions(device).dtype(dtype);
    std::optional<KvCache> eager_cache;
    if (!graphs)
        eager_cache.emplace(hooks && hooks->compact_kv_cache(c)
                                ? KvCache::compact(c.depth, 2 * B, c.num_heads, c.head_dim(), kv_options)
                                : KvCache(c.depth, 2 * B, c.num_heads, c.head_dim(), c.total_tokens(),
                                          kv_options));
    auto kv_bytes_now = [&] { return graphs ? graphs->kv_bytes() : eager_cache->total_bytes(); };
    // Computed per step inside the graphs instead (their inputs must be the static tensors).
    const auto lvl_pos = graphs ? at::Tensor() : var_->level_position();
    const at::Tensor first = graphs ? at::Tensor() : var_->first_scale_input(cond_BD);
    const at::Tensor cond = var_->block_condition(cond_BD);
    const int64_t S_run = hooks ? std::clamp<int64_t>(hooks->scales_to_run(c), 1, S) : S;
    const auto act = at::TensorOptions(device).dtype(dtype);

    // The transformer input of scale si > 0: f_hat (area-downsampled to the scale's size)
    // embedded, restricted to `rows` when a policy pruned the scale.
    auto embed_scale = [&](int64_t si, const at::Tensor& rows, const at::Tensor& lvl_pos) {
        const int64_t pn = c.patch_nums[si];
        auto tokens_in = at::adaptive_avg_pool2d(f_hat, {pn, pn}).view({B, c.cvae, -1}).transpose(1, 2).to(dtype);
        auto pos = lvl_pos.narrow(1, c.scale_begin(si), pn * pn);
        if (rows.defined()) {
            tokens_in = tokens_in.index_select(1, rows);
            pos = pos.index_select(1, rows);
        }
        return (at::linear(tokens_in, var_->word_embed->weight, var_->word_embed->bias) + pos)
            .repeat({2, 1, 1});
    };
    auto scale_input = [&](int64_t si, const at::Tensor& rows) {
        if (si == 0) {
            TORCH_CHECK(!rows.defined(), "the first scale cannot be pruned");
            return first;
        }
        return embed_scale(si, rows, lvl_pos);
    };
    // The dense step that the graphs capture: the same operations as the loop below without
    // hooks, reading only the static inputs (f_hat, cond_BD, the prologue's constants) and the
    // weights. Same operations on the same values, so the same tokens.
    // A failed capture leaves the set half-built: drop it (rebuilt next time).
    auto drop_graphs = [&] {
        graphs_lock.unlock();
        graphs_->erase(graphs);
    };
    std::vector<BlockConstants> constants;
    if (graphs) {
        try {
            const auto& t = graphs->run("prologue", [&] {
                const at::Tensor block_cond = var_->block_condition(cond_BD);
                std::vector<at::Tensor> out;
                for (int64_t layer = 0; layer < c.depth; ++layer)
                    block_constants(var_->block(layer), block_cond).append_to(out);
                return out;
            });
            for (int64_t layer = 0; layer < c.depth; ++layer)
                constants.push_back(BlockConstants::from(t, static_cast<size_t>(layer)));
        } catch (...) {
            drop_graphs();
            throw;
        }
    }
    const DenseStepGraphs::Forward dense_step = [&](int64_t si, KvCache& kv, double& flops) {
        at::Tensor x = si == 0 ? var_->first_scale_input(cond_BD)
                               : embed_scale(si, {}, var_->level_position());
        for (int64_t layer = 0; layer < c.depth; ++layer)
            x = dense_block(var_->block(layer), x, constants[layer], kv, layer, c.norm_eps,
                            opt.attention, flops);
        return var_->logits(x, cond_BD);
    };

    int64_t step = 0;
    for (int64_t si = 0; si < S_run; ++step) {
        if (opt.cancel && opt.cancel->load(std::memory_order_relaxed)) throw SamplingCancelled();
        const auto t_step = Clock::now();
        // Hooks see f_hat as it was before the step (the VQVAE updates it in place).
        ScaleContext sctx{c, si, c.patch_nums[si], B, c.scale_begin(si),
                          hooks ? f_hat.clone() : f_hat, {}, step};
        const int64_t group = hooks ? std::clamp<int64_t>(hooks->group_size(sctx), 1, S_run - si) : 1;
        for (int64_t g = 0; g < group; ++g) {
            ScaleSegment seg;
            seg.scale = si + g;
            seg.patch_num = c.patch_nums[si + g];
            seg.token_begin = c.scale_begin(si + g);
            sctx.segments.push_back(seg);
        }
        if (hooks) hooks->on_scale_begin(sctx);
        int64_t offset = 0;
        std::vector<at::Tensor> inputs;
        for (auto& seg : sctx.segments) {
            if (seg.rows.defined()) {
                seg.rows = seg.rows.to(at::kLong).to(device);
                TORCH_CHECK(seg.rows.dim() == 1 && seg.rows.numel() > 0,
                            "a policy pruned every token of scale ", seg.scale);
            }
            seg.offset = offset;
            offset += seg.length();
            if (!graphs) inputs.push_back(scale_input(seg.scale, seg.rows));
        }
        at::Tensor raw_logits;
        if (graphs) {
            try {
                raw_logits = graphs->step(si, dense_step, res.attention_flops);
            } catch (...) {
                drop_graphs();
                throw;
            }
        } else {
            at::Tensor x = inputs.size() == 1 ? inputs[0] : at::cat(inputs, 1);
            const at::Tensor step_mask =
                sctx.segments.size() > 1 ? group_mask(sctx.segments, act) : at::Tensor();
            for (int64_t layer = 0; layer < c.depth; ++layer) {
                BlockContext bctx{sctx, layer, *eager_cache};
                x = run_block(var_->block(layer), x, cond, bctx, hooks, probe, opt.attention,
                              step_mask, res.attention_flops);
            }
            raw_logits = var_->logits(x, cond_BD);
        }
        std::vector<at::Tensor> guided;
        for (const auto& seg : sctx.segments) {
            const auto part = sctx.segments.size() == 1 ? raw_logits : raw_logits.narrow(1, seg.offset, seg.length());
            guided.push_back(guide(part, guidance_at_scale(opt.cfg, seg.scale, S)));
        }
        at::Tensor logits = guided.size() == 1 ? guided[0] : at::cat(guided, 1);
        if (hooks) hooks->on_logits(sctx, logits);

        std::vector<at::Tensor> fhat_after;  // per scale of the step, for probes that want it
        for (const auto& seg : sctx.segments) {
            const int64_t sj = seg.scale, pn = seg.patch_num;
            at::Tensor seg_logits =
                sctx.segments.size() == 1 ? logits : logits.narrow(1, seg.offset, seg.length());
            at::Tensor idx = sample_tokens(seg_logits, {opt.top_k, opt.top_p}, gen);
            at::Tensor h_BlC;
            if (!opt.more_smooth) {
                h_BlC = at::embedding(codebook, idx);
            } else {
                // Gumbel-softmax over the filtered logits, temperature annealed with the scale.
                const double ratio = static_cast<double>(sj) / std::max<int64_t>(S - 1, 1);
                const double tau = std::max(0.27 * (1 - ratio * 0.95), 0.005);
                auto gumbel = -at::empty_like(seg_logits).exponential_(1.0, gen).log();
                auto soft = ((seg_logits.mul(1 + ratio) + gumbel) / tau).softmax(-1);
                h_BlC = at::matmul(soft, codebook.unsqueeze(0));
            }
            if (seg.rows.defined()) {
                // Pruned positions: no token, zero residual.
                idx = at::full({B, pn * pn}, -1, idx.options()).index_copy(1, seg.rows, idx);
                h_BlC = at::zeros({B, pn * pn, h_BlC.size(2)}, h_BlC.options()).index_copy(1, seg.rows, h_BlC);
            }
            auto h_BChw = h_BlC.transpose(1, 2).reshape({B, c.cvae, pn, pn}).to(at::kFloat);
            vae_->next_autoregressive_input(sj, S, f_hat, h_BChw);
            if (hooks) hooks->on_scale_end(sctx, seg, idx, f_hat);
            res.tokens.push_back(idx);
            // A copy even on the CPU, where cpu() would alias f_hat, which the VQVAE updates in
            // place: every record would show the final features.
            if (probe && probe->wants_fhat())
                fhat_after.push_back(f_hat.to(at::kCPU, f_hat.scalar_type(), false, /*copy=*/true));
        }
        res.kv_bytes_peak = std::max(res.kv_bytes_peak, kv_bytes_now());
        if (opt.time_scales) synchronize_device(device);
        const double step_ms = millis_since(t_step);
        for (size_t g = 0; g < sctx.segments.size(); ++g) {
            const auto& seg = sctx.segments[g];
            // A grouped step is one forward pass: its time is booked on its first scale.
            res.scale_millis.push_back(g == 0 ? step_ms : 0.0);
            if (probe) {
                ScaleRecord rec{seg.scale, seg.patch_num, res.scale_millis.back(),
                                res.tokens[seg.scale].cpu(), {}, step, false};
                if (!fhat_after.empty()) rec.f_hat = fhat_after[g];
                probe->on_scale(std::move(rec));
            }
        }
        si += static_cast<int64_t>(sctx.segments.size());
    }
    for (int64_t si = S_run; si < S; ++si) {
        // Skipped scales: no tokens; f_hat is decoded as it stands.
        const int64_t pn = c.patch_nums[si];
        res.tokens.push_back(at::full({B, pn * pn}, -1, at::TensorOptions(device).dtype(at::kLong)));
        res.scale_millis.push_back(0.0);
        if (probe) {
            ScaleRecord rec{si, pn, 0.0, res.tokens.back().cpu(), {}, step, true};
            probe->on_scale(std::move(rec));
        }
    }
    res.kv_bytes = kv_bytes_now();
    if (graphs) res.graph_capture_millis = graphs->capture_millis() - capture_ms_before;
    const auto t_dec = Clock::now();
    if (opt.decode && graphs) {
        try {
            // A copy: the graph's output is overwritten by the next call's replay.
            res.images = graphs->run("decode", [&] {
                return std::vector<at::Tensor>{vae_->decode(f_hat).add(1).mul(0.5)};
            })[0].clone();
        } catch (...) {
            drop_graphs();
            throw;
        }
    } else if (opt.decode) {
        res.images = vae_->decode(f_hat).add(1).mul(0.5);
    }
    if (opt.time_scales) synchronize_device(device);
    res.decode_millis = millis_since(t_dec);
    res.f_hat = graphs ? f_hat.clone() : f_hat;  // the graphs' f_hat is reused by the next call
    res.total_millis = millis_since(t_start);
    return res;
}

}  // namespace varscope
