#include "core/sampling/infinity_sampler.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/sampling/block_flops.h"
#include "core/sampling/cuda_graph.h"
#include "core/sampling/grouped_step.h"
#include "core/sampling/kv_cache.h"
#include "core/sampling/tf32_scope.h"
#include "core/sampling/token_sampling.h"
#include "kernels/cuda_graph.h"
#include "kernels/part_timer.h"

namespace varscope {
namespace {

using Clock = std::chrono::steady_clock;

double millis_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Per-scale value from a list (checked by validate) or the single setting.
double at_scale(const std::vector<double>& list, double single, int64_t si) {
    return list.empty() ? single : list[static_cast<size_t>(si)];
}

// The rows' RoPE: (2, l, c/2) for rows shared by the batch, (2, B, K, c/2) for per-row rows.
at::Tensor rope_rows(const at::Tensor& rope, const at::Tensor& rows) {
    if (!rows.defined()) return rope;
    if (rows.dim() == 1) return rope.index_select(1, rows);
    const int64_t B = rows.size(0), K = rows.size(1), half = rope.size(2);
    return rope.index_select(1, rows.reshape({-1})).view({2, B, K, half});
}

// The inspector's cross-attention map (issue #33): a probe that records this block's attention
// also gets which text tokens the image tokens read. For the first conditional row, each image
// token's attention over the text tokens (padding left out), averaged over the heads, as an
// AccelRecord of method "text", kind "cross_attention": data (text tokens, h, w) float, the
// text's tokens in order (the tokenizer's pieces and the EOS). Computed apart from the block's
// own fused attention, in fp32, from the block's input to its cross-attention.
void record_cross_attention(const InfinityBlockImpl& blk, const at::Tensor& h, const CrossKv& kv,
                            const at::Tensor& text_mask, const BlockContext& ctx,
                            ProbeSink& probe) {
    const int64_t heads = kv.k.size(1), head_dim = kv.k.size(3), lq = h.size(1);
    const auto& ln = blk.ca_norm;
    const at::Tensor in =
        at::layer_norm(h.narrow(0, 0, 1).to(at::kFloat), {h.size(2)}, ln->weight.to(at::kFloat),
                       ln->bias.to(at::kFloat), ln->options.eps());
    const auto& wq = blk.ca->mat_q_lin;
    const at::Tensor q = at::linear(in, wq->weight.to(at::kFloat),
                                    wq->bias.defined() ? wq->bias.to(at::kFloat) : at::Tensor())
                             .view({1, lq, heads, head_dim})
                             .transpose(1, 2);
    at::Tensor scores = at::matmul(q, kv.k.narrow(0, 0, 1).to(at::kFloat).transpose(-2, -1))
                            .mul(1.0 / std::sqrt(static_cast<double>(head_dim)));
    int64_t text_len = kv.k.size(2);
    if (text_mask.defined()) {  // padding follows the text: count the visible keys
        const at::Tensor row = text_mask.narrow(0, 0, 1).to(at::kFloat);
        scores = scores + row;
        text_len = row.reshape({-1}).eq(0).sum().item<int64_t>();
    }
    at::Tensor probs = scores.softmax(-1).mean(1)[0].narrow(1, 0, text_len);  // (lq, text)
    at::Tensor map = probs.t().contiguous();
    const int64_t side = ctx.scale.patch_num;
    if (side > 0 && lq % side == 0) map = map.view({text_len, side, lq / side});
    probe.on_accel({"text",
                    "cross_attention",
                    ctx.scale.scale,
                    ctx.layer,
                    map.cpu(),
                    {{"text_tokens", static_cast<double>(text_len)}}});
}

// One block of one scale with the hook points of var_sampler.cpp's run_block. `rec` (may be
// null) takes the block's FLOPs and part marks for the cost model (step_cost.h), at the same
// points as the VAR loop's, the text's attention kernel as a part of its own.
at::Tensor run_block(const InfinityBlockImpl& blk, const at::Tensor& x_in,
                     const InfinityBlockConstants& bk, const at::Tensor& text_mask,
                     const at::Tensor& rope, BlockContext& ctx, SamplingHooks* hooks,
                     ProbeSink* probe, AttentionBackend backend, const at::Tensor& step_mask,
                     double& flops, const CostRecorder* rec) {
    auto mark = [&](CostPart part) {
        if (rec) rec->mark(part);
    };
    ctx.cost = rec;
    if (hooks) mark(CostPart::Overhead);
    const at::Tensor rows = hooks ? hooks->select_tokens(ctx, x_in) : at::Tensor();
    // bf16 mode: a scale's input is bf16 (next_scale_input) and the first block's output fp32;
    // with selected tokens the block works on the fp32 values, so restoring them mixes no dtypes.
    const at::Tensor x = rows.defined() ? x_in.to(at::kFloat) : x_in;
    const bool per_row = rows.defined() && rows.dim() == 2;
    const at::Tensor xs = !rows.defined() ? x
                          : per_row ? x.gather(1, rows.unsqueeze(-1).expand({-1, -1, x.size(2)}))
                                    : x.index_select(1, rows);
    mark(CostPart::Projection);  // AdaLN, QKV, RoPE, cache append
    auto qkv = blk.attention_inputs(xs, bk, rope_rows(rope, rows), ctx.scale.exec.kernels);
    ctx.cache.append(ctx.layer, qkv.k, qkv.v);
    if (hooks) {
        mark(CostPart::Overhead);
        hooks->on_kv_append(ctx);
    }
    auto [k, v] = ctx.cache.view(ctx.layer);
    // Grouped steps: block-causal among the step's scales, earlier steps visible.
    if (block_needs_group_mask(step_mask, rows, backend == AttentionBackend::Eager,
                               probe != nullptr)) {
        mark(CostPart::Overhead);
        ctx.mask = block_group_mask(step_mask, rows, k.size(2));
    }
    if (probe && probe->wants_attention_inputs(ctx.scale.scale, ctx.layer))
        probe->on_attention_inputs(
            {ctx.scale.scale, ctx.layer, qkv.q[0], k[0], v[0], 1.0, ctx.mask});
    mark(CostPart::Attention);
    at::Tensor o = hooks ? hooks->attend(ctx, qkv.q, k, v, 1.0) : at::Tensor();
    const double attention_flops = block_attention_flops(o, ctx.attention_flops, qkv.q, k);
    flops += attention_flops;
    if (rec) {
        // Projections: QKV (3C), output (C), the text's query and output (2C); the attention over
        // the (padded) text on top.
        const double n = static_cast<double>(xs.size(0) * xs.size(1));
        const double width = static_cast<double>(xs.size(2));
        const double hidden = static_cast<double>(blk.ffn->fc1->weight.size(0));
        add_block_flops(*rec, n, width, 6.0, hidden, attention_flops);
        rec->add_flops(CostPart::CrossAttention,
                       4.0 * n * static_cast<double>(bk.text.k.size(2)) * width);
    }
    if (!o.defined()) {             // every cached key is visible (but later scales of a group)
        mark(CostPart::Attention);  // a hook may have marked its own work and left it to us
        if (probe && probe->wants_attention(ctx.scale.scale, ctx.layer)) {
            at::Tensor probs;  // the inspector's map: the first conditional row
            o = attention_eager(qkv.q, k, v, 1.0, ctx.mask, &probs);
            probe->on_attention({ctx.scale.scale, ctx.layer, probs[0].to(at::kFloat).cpu()});
        } else {
            o = backend == AttentionBackend::Eager
                    ? attention_eager(qkv.q, k, v, 1.0, ctx.mask)
                    : step_attention_sdpa(ctx.scale, step_mask, rows, ctx.mask, qkv.q, k, v, 1.0);
        }
    }
    mark(CostPart::Projection);
    auto h = blk.sa_residual(xs, o, bk.m, &ctx.scale.exec.kernels);
    // Whole single scales only (pruned rows and groups are not one grid); with the attention
    // map of this layer.
    if (probe && !rows.defined() && ctx.scale.segments.size() <= 1 &&
        probe->wants_attention(ctx.scale.scale, ctx.layer) &&
        probe->wants_accel("text", "cross_attention"))
        record_cross_attention(blk, h, bk.text, text_mask, ctx, *probe);
    // blk.cross_branch in its parts: LayerNorm and query projection, the attention kernel over
    // the text, the output projection (the per-call casts in the constants).
    const at::Tensor text_q = blk.ca->queries(blk.cross_input(h, bk), bk.text);
    mark(CostPart::CrossAttention);
    const at::Tensor text_o = blk.ca->attend_values(text_q, bk.text_values, text_mask);
    mark(CostPart::Projection);
    // An fp32 stream adds the bf16 output as it is (the same fp32 sum, one pass fewer).
    const at::Tensor text_out = blk.ca->output(text_o);
    h = h.scalar_type() == at::kFloat ? h + text_out : h + text_out.to(at::kFloat);
    mark(CostPart::Ffn);
    h = blk.ffn_residual(h, bk, &ctx.scale.exec.kernels);
    at::Tensor out = h;
    if (hooks) mark(CostPart::Overhead);
    if (rows.defined()) {
        out = hooks->restore_tokens(ctx, x, rows, h);
        if (!out.defined())
            out = per_row ? x.scatter(1, rows.unsqueeze(-1).expand_as(h), h)
                          : x.index_copy(1, rows, h);
    }
    if (hooks) hooks->on_block_output(ctx, out);
    return out;
}

// Bits (B, l, d) as int64 ids, bit i -> 2^i.
at::Tensor pack_bits(const at::Tensor& bits) {
    const int64_t d = bits.size(-1);
    auto weights = at::pow(2, at::arange(d, bits.options().dtype(at::kLong)));
    return (bits.to(at::kLong) * weights).sum(-1);
}

}  // namespace

std::optional<VarConfig> infinity_hook_view(const InfinityConfig& c, const InfinitySchedule& s) {
    VarConfig v;
    v.patch_nums.clear();
    for (const auto& hw : s.scales) {
        if (hw[0] != hw[1]) return std::nullopt;
        v.patch_nums.push_back(hw[0]);
    }
    v.depth = c.depth;
    v.embed_dim = c.embed_dim;
    v.num_heads = c.num_heads;
    v.num_classes = 1;
    v.vocab_size = c.vocab();
    v.cvae = c.codebook_dim;
    v.mlp_ratio = static_cast<double>(c.mlp_hidden) / c.embed_dim;
    v.norm_eps = c.norm_eps;
    v.shared_aln = true;
    v.attn_l2_norm = true;
    v.validate();
    return v;
}

void InfinitySampleOptions::validate(const InfinityConfig& c, const InfinitySchedule& s) const {
    auto fail = [](const std::string& m) { throw std::invalid_argument(m); };
    const auto n = static_cast<size_t>(s.num_scales());
    if (s.num_scales() < 1) fail("the schedule has no scales");
    if (s.num_scales() > c.num_levels)
        fail("the schedule has " + std::to_string(n) + " scales, the model " +
             std::to_string(c.num_levels) + " level embeddings");
    if (!cfg_list.empty() && cfg_list.size() < n)
        fail("cfg_list needs a value per scale (" + std::to_string(n) + "), got " +
             std::to_string(cfg_list.size()));
    if (!tau_list.empty() && tau_list.size() < n)
        fail("tau_list needs a value per scale (" + std::to_string(n) + "), got " +
             std::to_string(tau_list.size()));
    for (size_t i = 0; i < n; ++i) {
        const double g = at_scale(cfg_list, cfg, static_cast<int64_t>(i));
        const double t = at_scale(tau_list, tau, static_cast<int64_t>(i));
        if (!(g >= 0.0 && g <= 100.0)) fail("cfg must be in [0, 100], got " + std::to_string(g));
        if (!(t > 0.0 && t <= 100.0)) fail("tau must be in (0, 100], got " + std::to_string(t));
    }
    if (top_k < 0) fail("top_k must be >= 0 (0 = off), got " + std::to_string(top_k));
    if (!(top_p >= 0.0 && top_p <= 1.0))
        fail("top_p must be in [0, 1], got " + std::to_string(top_p));
    for (int64_t l : cfg_insertion_layer)
        if (l > 0 || (l < 0 && c.depth + l <= 0))
            fail("cfg_insertion_layer " + std::to_string(l) +
                 " is not 0 (logits) or a layer in [-" + std::to_string(c.depth - 1) + ", -1]");
}

InfinitySampler::InfinitySampler(InfinityTransformer model, bsq::BsqQuantConfig quant)
    : model_(std::move(model)), quant_(quant), graphs_(std::make_shared<DenseGraphCache>()) {
    quant_.validate();
    if (quant_.token_bits() != model_->config().codebook_dim)
        throw std::invalid_argument(
            "Infinity sampler: the quantizer has " + std::to_string(quant_.token_bits()) +
            " bits per token, the transformer " + std::to_string(model_->config().codebook_dim));
}

void InfinitySampler::release_graphs() {
    graphs_->clear();
}

size_t InfinitySampler::cuda_graph_sets() const {
    return graphs_->size();
}

InfinitySampleResult InfinitySampler::sample(const InfinityText& text, const InfinitySchedule& s,
                                             const InfinitySampleOptions& opt, SamplingHooks* hooks,
                                             ProbeSink* probe, const InfinityText* negative) {
    const auto& mc = model_->config();
    opt.validate(mc, s);
    c10::InferenceMode inference;
    const auto t_start = Clock::now();
    const auto& m = *model_;
    const at::Device device = m.pos_start.device();
    // Block streaming (low-memory mode): the streamed blocks run from the slot, eagerly.
    const bool streaming = stream_ && stream_->count() > 0;
    auto block_for = [&](int64_t i) -> const InfinityBlockImpl& {
        return streaming ? stream_->acquire(i) : m.block(i);
    };
    const Tf32Scope tf32(opt.tf32 && device.is_cuda());
    const int64_t B = text.batch(), S = s.num_scales(), d = mc.codebook_dim;
    const auto view = infinity_hook_view(mc, s);
    if (hooks && !view)
        throw std::invalid_argument(
            "Infinity sampler: accelerators need a square schedule (h/w = 1) for now");
    const VarConfig hook_config = view ? *view : VarConfig{};
    int64_t n_run = S;
    if (hooks) {
        n_run = std::clamp<int64_t>(hooks->scales_to_run(hook_config), 1, S);
    }
    auto gen = seeded_generator(device, opt.seed);

    bool guided = false;
    for (int64_t si = 0; si < S; ++si)
        guided = guided || at_scale(opt.cfg_list, opt.cfg, si) != 1.0;
    const int64_t bs = guided ? 2 * B : B;
    std::set<int64_t> mix_layers;
    bool mix_logits = false;
    for (int64_t l : opt.cfg_insertion_layer) {
        if (l == 0)
            mix_logits = true;
        else
            mix_layers.insert(mc.depth + l);
    }
    const auto kv_options = at::TensorOptions(device).dtype(at::kFloat);
    const auto cache_options = kv_options.dtype(m.compute_dtype());
    const bool compact = hooks && hooks->compact_kv_cache(hook_config);
    // The cost model's part times: CUDA events (graphs with event nodes are kept apart), or on
    // the CPU, which returns from each op when it is done, host clock marks.
    const bool time_parts =
        opt.time_parts && (device.is_cpu() || (device.is_cuda() && kernels::cuda_graphs_built()));
    const int timer_device = device.is_cpu() ? kernels::PartTimer::kHost : device.index();

    // CUDA graphs (cuda_graph.h): each scale's transformer forward (input embedding, blocks,
    // guidance, head) is captured once per shape and replayed. The graphs own the step inputs
    // (condition, text, per-scale codes, rows of pruned scales) and the KV cache; the text's
    // block keys/values and the modulations are made by a prologue graph from them. Guided
    // square schedules only; a compact cache (AMS-KV) is the graphs' own, and steps a hook
    // marks not graphable run eagerly after the graphed ones, as in the VAR loop (hooks.h).
    std::shared_ptr<DenseStepGraphs> graphs;
    std::unique_lock<std::mutex> graphs_lock;
    InfinityCondition cond;
    if (const auto signature = guided && view ? graphs_apply(opt.cuda_graphs && !streaming, *view,
                                                             device, hooks, probe)
                                              : std::nullopt) {
        cond = m.condition(m.with_unconditional(text, negative), /*block_keys=*/false);
        std::string settings = "Lt=" + std::to_string(cond.text.size(1)) +
                               (cond.text_mask.defined() ? ",ragged" : "") +
                               ",n=" + std::to_string(n_run) + ",insert=";
        for (int64_t l : opt.cfg_insertion_layer) settings += std::to_string(l) + " ";
        // Graphs of other kernels.
        if (!exec_.kernels.fused_rope) settings += ",rope=aten";
        if (!exec_.kernels.fused_elementwise) settings += ",elementwise=aten";
        for (int64_t si = 0; si < S; ++si)
            settings += "|" + std::to_string(at_scale(opt.cfg_list, opt.cfg, si)) + "/" +
                        std::to_string(at_scale(opt.tau_list, opt.tau, si));
        DenseGraphKey key{device.index(),
                          B,
                          m.compute_dtype(),
                          static_cast<int>(opt.attention),
                          view->patch_nums,
                          weights_fingerprint(m),
                          *signature,
                          compact,
                          false,
                          hooks ? hooks->instance_id() : 0,
                          settings,
                          exec_.var_chained_graph_pool};
        key.part_timing = time_parts;  // the event-timed steps are graphs of their own
        graphs = graphs_->get(*view, key, cond.cond_BD);
        graphs_lock = std::unique_lock<std::mutex>(graphs->mutex());
        cond.cond_BD = graphs->condition().copy_(cond.cond_BD);
        auto fixed = [&](const char* name, const at::Tensor& t) {
            return graphs->step_input(0, name, [&] { return at::empty_like(t); }).copy_(t);
        };
        cond.gss = fixed("gss", cond.gss);
        cond.text = fixed("text", cond.text);
        if (cond.text_mask.defined()) cond.text_mask = fixed("text_mask", cond.text_mask);
    } else {
        cond = m.condition(guided ? m.with_unconditional(text, negative) : text,
                           /*block_keys=*/!streaming);
        // Streamed blocks give their text keys/values through the slot, one block at a time.
        if (streaming)
            for (int64_t i = 0; i < mc.depth; ++i)
                cond.cross.push_back(block_for(i).ca->keys_values(cond.text));
    }
    // A failed capture leaves the set half-built: drop it (rebuilt next time).
    auto guarded = [&](const auto& fn) {
        try {
            return fn();
        } catch (...) {
            if (graphs) {
                graphs_lock.unlock();
                graphs_->erase(graphs);
            }
            throw;
        }
    };
    // Per block, what its steps read that depends only on the text (InfinityBlockConstants).
    std::vector<InfinityBlockConstants> consts;
    if (graphs) {
        const std::vector<at::Tensor> out = guarded([&]() -> const std::vector<at::Tensor>& {
            return graphs->run("prologue", [&] {
                std::vector<at::Tensor> t;
                for (int64_t i = 0; i < mc.depth; ++i) {
                    const auto& b = m.block(i);
                    for (const auto& x :
                         b.constants(b.modulation(cond.gss), b.ca->keys_values(cond.text))
                             .tensors())
                        t.push_back(x);
                }
                return t;
            });
        });
        for (int64_t i = 0; i < mc.depth; ++i)
            consts.push_back(InfinityBlockConstants::from_tensors(
                &out[static_cast<size_t>(i) * InfinityBlockConstants::kTensors]));
    } else {
        // Streamed blocks: each one's constants from its weights in the slot, in turn.
        for (int64_t i = 0; i < mc.depth; ++i)
            consts.push_back(block_for(i).constants(m.block(i).modulation(cond.gss),
                                                    cond.cross[static_cast<size_t>(i)]));
    }

    std::optional<KvCache> eager_cache;
    if (!graphs)
        eager_cache.emplace(
            compact ? KvCache::compact(mc.depth, bs, mc.num_heads, mc.head_dim(), cache_options)
                    : KvCache(mc.depth, bs, mc.num_heads, mc.head_dim(), s.total_tokens(),
                              cache_options));
    const at::Tensor rope =
        graphs
            ? graphs->step_input(0, "rope", [&] { return infinity_rope(s, mc.head_dim(), device); })
            : infinity_rope(s, mc.head_dim(), device);
    // The VAE's grid: with spatial patchify a token covers 2 x 2 latent positions.
    const int64_t up = quant_.spatial_patchify ? 2 : 1, dv = quant_.codebook_dim;
    auto vae_size = [&](int64_t si) {
        return bsq::Size3{1, up * s.scales[si][0], up * s.scales[si][1]};
    };
    const bsq::Size3 final_size = vae_size(S - 1);
    // Channels-last as the official summed codes are (they start as an interpolation of the
    // channels-last codes): the trilinear kernels round differently per layout.
    at::Tensor summed = at::zeros({B, dv, 1, final_size[1], final_size[2]}, kv_options)
                            .contiguous(at::MemoryFormat::ChannelsLast3d);

    // One step's transformer forward: the inputs of its scales (the start tokens, or the
    // embedded codes of each scale, all from the summed codes before the step: LazyVAR's PGD
    // for a group), each with its own level embedding and RoPE positions, packed in scale
    // order; every block with the hooks (block-causal among a group's scales), guidance and
    // temperature per scale, the head. Eager, or captured by the graphs (warm-up: the first
    // scale without hooks).
    const ScaleContext* step_ctx = nullptr;
    std::vector<at::Tensor> step_codes;  // per segment: the scale's input codes (B, l, d)
    at::Tensor step_mask;                // grouped steps: the mask among the packed rows
    // fn(part, seg) on each segment's rows of the packed (rows, L, ...) tensor, joined again.
    auto per_segment = [](const at::Tensor& x, const ScaleContext& ctx, const auto& fn) {
        if (ctx.segments.size() == 1) return at::Tensor(fn(x, ctx.segments[0]));
        std::vector<at::Tensor> parts;
        for (const auto& seg : ctx.segments)
            parts.push_back(fn(x.narrow(1, seg.offset, seg.length()), seg));
        return at::cat(parts, 1);
    };
    auto forward = [&](const ScaleContext& ctx, KvCache& cache, SamplingHooks* h, ProbeSink* p,
                       double& flops, const CostRecorder* rec) {
        if (rec) rec->mark(CostPart::Input);
        std::vector<at::Tensor> inputs, ropes;
        for (size_t gi = 0; gi < ctx.segments.size(); ++gi) {
            const auto& seg = ctx.segments[gi];
            const int64_t sj = seg.scale, l = s.scales[sj][0] * s.scales[sj][1];
            at::Tensor x = sj == 0 ? m.start_tokens(cond) + m.level_embedding(0)
                                   : m.next_scale_input(step_codes[gi], sj, bs / B);
            if (rec && sj > 0)  // the word embedding of the B rows' codes (all l, then rows)
                rec->add_flops(CostPart::Input, 2.0 * static_cast<double>(B * l * d) *
                                                    static_cast<double>(mc.embed_dim));
            at::Tensor r = rope.narrow(1, s.scale_begin(sj), l);
            if (seg.rows.defined()) {
                x = x.index_select(1, seg.rows);
                r = r.index_select(1, seg.rows);
            }
            inputs.push_back(x);
            ropes.push_back(r);
        }
        at::Tensor x = inputs.size() == 1 ? inputs[0] : at::cat(inputs, 1);
        const at::Tensor step_rope = ropes.size() == 1 ? ropes[0] : at::cat(ropes, 1);
        auto guidance = [&](const ScaleSegment& seg) {
            return at_scale(opt.cfg_list, opt.cfg, seg.scale);
        };
        bool any_guided = false;
        for (const auto& seg : ctx.segments) any_guided = any_guided || guidance(seg) != 1.0;
        for (int64_t layer = 0; layer < mc.depth; ++layer) {
            BlockContext bctx{ctx, layer, cache};
            x = run_block(block_for(layer), x, consts[layer], cond.text_mask, step_rope, bctx, h, p,
                          opt.attention, step_mask, flops, rec);
            if (any_guided && mix_layers.count(layer) && rec)
                rec->end();  // guidance is outside the parts, as in the VAR loop
            if (any_guided && mix_layers.count(layer))  // guidance at this layer's output
                x = per_segment(x, ctx, [&](const at::Tensor& part, const ScaleSegment& seg) {
                    const double g = guidance(seg);
                    if (g == 1.0) return part;
                    auto mixed = part.narrow(0, 0, B).mul(g) + part.narrow(0, B, B).mul(1.0 - g);
                    return at::cat({mixed, mixed}, 0);
                });
        }
        const bool guide_logits = any_guided && mix_logits;
        const at::Tensor head_in = guide_logits ? x : x.narrow(0, 0, B);
        if (rec) {
            rec->mark(CostPart::Head);
            rec->add_flops(CostPart::Head,
                           2.0 * static_cast<double>(head_in.size(0) * head_in.size(1)) *
                               static_cast<double>(head_in.size(2) * mc.vocab()));
        }
        const at::Tensor raw = guide_logits ? m.logits(x, cond.cond_BD)
                                            : m.logits(head_in, cond.cond_BD.narrow(0, 0, B));
        if (rec) rec->end();  // guidance and temperature: outside the parts
        return per_segment(raw, ctx, [&](const at::Tensor& part, const ScaleSegment& seg) {
            const double g = guidance(seg);
            auto logits = part.mul(1.0 / at_scale(opt.tau_list, opt.tau, seg.scale));
            if (!guide_logits) return logits;
            if (g == 1.0) return logits.narrow(0, 0, B);
            return at::Tensor(logits.narrow(0, 0, B).mul(g) + logits.narrow(0, B, B).mul(1.0 - g));
        });
    };
    const DenseStepGraphs::Forward graph_step = [&](int64_t si, KvCache& cache, double& flops,
                                                    const CostRecorder* rec, bool warmup) {
        if (!warmup) return forward(*step_ctx, cache, hooks, nullptr, flops, rec);
        TORCH_CHECK(si == 0, "CUDA graphs: the warm-up runs the first scale");
        ScaleContext first{hook_config, 0, s.scales[0][0], B, 0, at::Tensor(), {}, 0, exec_};
        first.segments.push_back(ScaleSegment{0, s.scales[0][0], 0, {}, 0});
        const at::Tensor no_mask = std::exchange(step_mask, at::Tensor());
        auto out = forward(first, cache, nullptr, nullptr, flops, nullptr);
        step_mask = no_mask;
        return out;
    };
    // The input codes of scale si > 0 from the summed codes as they stand: (B, l, d).
    auto input_codes = [&](int64_t si) {
        const int64_t nh = s.scales[si][0], nw = s.scales[si][1];
        // (B, dv, up*nh, up*nw), patchified back to (B, d, nh, nw)
        auto next = bsq::interpolate_up(summed, vae_size(si), quant_).squeeze(2);
        if (quant_.spatial_patchify) next = bsq::patchify_codes(next);
        // Contiguous, as the official codes are (its interpolations keep the codes'
        // channels-last layout): a bf16 GEMM on a strided input rounds differently.
        return next.reshape({B, d, nh * nw}).permute({0, 2, 1}).contiguous();
    };
    if (graphs && !graphs->fully_captured()) {
        // SDPA may pick cuDNN's attention at some scales only; its handle must exist before a
        // capture (creating one allocates device memory, which a capture forbids): attention of
        // the first and the last scale's shapes, eagerly, on the capture stream.
        kernels::run_on_capture_stream(device.index(), [&] {
            for (const int64_t si : {int64_t(0), S - 1}) {
                const int64_t l = s.scales[si][0] * s.scales[si][1];
                const auto q = at::zeros({bs, mc.num_heads, l, mc.head_dim()}, cache_options);
                const auto k = at::zeros({bs, mc.num_heads, s.scale_begin(si) + l, mc.head_dim()},
                                         cache_options);
                attention_sdpa(q, k, k, 1.0);
            }
        });
    }
    InfinitySampleResult res;
    res.cuda_graphs = static_cast<bool>(graphs);
    const double capture_ms_before = graphs ? graphs->capture_millis() : 0.0;
    const auto act = at::TensorOptions(device).dtype(m.compute_dtype());
    int64_t step = 0, last_step_scale = 0;
    std::map<size_t, std::unique_ptr<kernels::PartTimer>> eager_timers;  // by step
    // Steps a hook asked to run eagerly under graphs (ScaleContext::graphable) and all after
    // them: on a copy of the graphs' cache as the captured steps left it (hooks.h).
    std::optional<KvCache> tail_cache;
    for (int64_t si = 0; si < n_run; ++step) {
        if (opt.cancel && opt.cancel->load()) throw SamplingCancelled();
        const auto t0 = Clock::now();
        const int64_t side = s.scales[si][0], begin = s.scale_begin(si);
        ScaleContext ctx{hook_config, si, side, B, begin, summed.squeeze(2), {}, step, exec_};
        if (view) {
            plan_step_segments(ctx, hooks, n_run);  // the grouping rule (grouped_step.h)
        } else {  // no hooks (non-square schedule): one scale per step
            ctx.segments.push_back(ScaleSegment{si, side, begin, {}, 0});
        }
        if (hooks) hooks->on_scale_begin(ctx);
        if (graphs && !tail_cache && !ctx.graphable)
            tail_cache.emplace(guarded([&] { return graphs->eager_tail_cache(si); }));
        DenseStepGraphs* const graphed = tail_cache ? nullptr : graphs.get();
        KvCache* const eager_kv = tail_cache ? &*tail_cache : eager_cache ? &*eager_cache : nullptr;
        const std::vector<int64_t> layout = place_step_segments(ctx, device, graphed);
        step_mask = step_group_mask(ctx, act, graphed);
        // Every scale of the step reads the summed codes before the step.
        step_codes.assign(ctx.segments.size(), at::Tensor());
        for (size_t gi = 0; gi < ctx.segments.size(); ++gi) {
            const int64_t sj = ctx.segments[gi].scale;
            if (sj == 0) continue;
            step_codes[gi] = input_codes(sj);
            if (graphed)
                step_codes[gi] = graphed
                                     ->step_input(si, "codes" + std::to_string(gi),
                                                  [&] { return at::empty_like(step_codes[gi]); })
                                     .copy_(step_codes[gi]);
        }
        double flops = 0.0;
        at::Tensor logits;
        StepCost cost;
        cost.scale = si;
        cost.scales = static_cast<int64_t>(ctx.segments.size());
        if (graphed) {
            step_ctx = &ctx;
            logits = guarded([&] { return graphed->step(si, layout, graph_step, flops, &cost); });
            step_ctx = nullptr;
            res.kv_bytes_peak = std::max(res.kv_bytes_peak, graphed->kv_bytes_after(si));
        } else {
            auto timer = time_parts ? std::make_unique<kernels::PartTimer>(timer_device) : nullptr;
            const CostRecorder rec{&cost, timer.get()};
            logits = forward(ctx, *eager_kv, hooks, probe, flops, &rec);
            if (timer) eager_timers.emplace(res.step_costs.size(), std::move(timer));
            res.kv_bytes_peak = std::max(res.kv_bytes_peak, eager_kv->total_bytes());
        }
        res.step_costs.push_back(cost);
        if (hooks) hooks->on_logits(ctx, logits);

        std::vector<at::Tensor> fhat_after;  // per scale of the step, for probes that want it
        for (const auto& seg : ctx.segments) {
            const int64_t sj = seg.scale, h = s.scales[sj][0], w = s.scales[sj][1];
            const at::Tensor& rows = seg.rows;
            const at::Tensor seg_logits =
                ctx.segments.size() == 1 ? logits : logits.narrow(1, seg.offset, seg.length());
            const int64_t l = seg_logits.size(1);
            auto pairs = seg_logits.reshape({B, l * d, 2});
            const auto drawn = sample_tokens(pairs, {opt.top_k, opt.top_p}, gen).view({B, l, d});

            // Pruned tokens (scale-level policies) contribute no code: zero bits and a zero mask.
            at::Tensor bits = drawn, keep;
            at::Tensor ids = pack_bits(drawn);
            if (rows.defined()) {
                bits = at::zeros({B, h * w, d}, drawn.options()).index_copy_(1, rows, drawn);
                keep =
                    at::zeros({h * w}, kv_options).index_fill_(0, rows, 1.0).view({1, 1, 1, h, w});
                ids = at::full({B, h * w}, -1, ids.options()).index_copy_(1, rows, ids);
            }
            bits = bits.view({B, h, w, d});
            // (B, dv, 1, up*h, up*w)
            auto codes = bsq::bits_to_codes(
                quant_.spatial_patchify ? bsq::unpatchify_bits(bits) : bits, quant_);
            if (keep.defined()) {
                if (up > 1) keep = keep.repeat_interleave(up, -2).repeat_interleave(up, -1);
                codes = codes * keep;
            }
            if (sj != S - 1)
                summed.add_(bsq::interpolate_up(codes, final_size, quant_));
            else
                summed.add_(codes);
            res.bits.push_back(bits.to(at::kByte));
            res.tokens.push_back(ids);
            if (hooks) hooks->on_scale_end(ctx, seg, ids, summed.squeeze(2));
            if (probe && probe->wants_fhat()) fhat_after.push_back(summed.squeeze(2).clone());
        }
        // What a hook counted on the device (SparVAR's CS4A pairs), as the VAR loop adds it.
        if (hooks) {
            const double deferred = hooks->take_deferred_attention_flops(ctx);
            flops += deferred;
            res.step_costs.back().flops[static_cast<int>(CostPart::Attention)] += deferred;
        }
        res.attention_flops += flops;
        last_step_scale = si;
        if (opt.time_scales) synchronize_device(device);
        const double ms = millis_since(t0);
        for (size_t gi = 0; gi < ctx.segments.size(); ++gi) {
            const auto& seg = ctx.segments[gi];
            // A grouped step is one forward pass: its time is booked on its first scale.
            res.scale_millis.push_back(gi == 0 ? ms : 0.0);
            if (probe) {
                ScaleRecord r;
                r.scale = seg.scale;
                r.patch_num = seg.patch_num;
                r.millis = res.scale_millis.back();
                r.tokens = res.tokens[seg.scale];
                if (!fhat_after.empty()) r.f_hat = fhat_after[gi];
                r.step = step;
                r.attention_flops = gi == 0 ? flops : 0.0;
                probe->on_scale(std::move(r));
            }
        }
        si += static_cast<int64_t>(ctx.segments.size());
    }
    if (probe)
        for (int64_t si = n_run; si < S; ++si) {
            ScaleRecord r;
            r.scale = si;
            r.patch_num = s.scales[si][0];
            r.step = step;
            r.skipped = true;
            probe->on_scale(std::move(r));
        }
    if (time_parts) {
        // The steps' events are complete once the device is: read the part times.
        synchronize_device(device);
        read_part_times(res.step_costs, eager_timers,
                        [&](int64_t scale) -> const kernels::PartTimer* {
                            return graphs ? graphs->part_timer(scale) : nullptr;
                        });
    }
    res.summed_codes = summed.squeeze(2);
    res.kv_bytes = tail_cache ? tail_cache->total_bytes()
                   : graphs   ? graphs->kv_bytes_after(last_step_scale)
                              : eager_cache->total_bytes();
    // The most KV bytes held after any step (a compact cache's counts, the full cache's filled
    // part), as the VAR loop reports it, with graphs or without.
    res.kv_bytes_peak = std::max(res.kv_bytes_peak, res.kv_bytes);
    if (graphs) res.graph_capture_millis = graphs->capture_millis() - capture_ms_before;
    res.total_millis = millis_since(t_start);
    return res;
}

}  // namespace varscope
