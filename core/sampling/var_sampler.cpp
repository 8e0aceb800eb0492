#include "core/sampling/var_sampler.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "core/accel/probe_kinds.h"
#include "core/sampling/autocast_scope.h"
#include "core/sampling/block_flops.h"
#include "core/sampling/chunked_decode.h"
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

at::Tensor named_tensor(const torch::nn::Module& m, const std::string& name) {
    for (const auto& p : m.named_parameters())
        if (p.key() == name) return p.value();
    throw std::logic_error("model has no tensor '" + name + "'");
}

// One block of one step, with the hook points the accelerators use; `bk` holds the block's
// per-call constants. `step_mask` is the additive block-causal mask among the step's packed
// rows (grouped steps only). The eager loop and the CUDA graphs both run this code, so a
// graph replays exactly the eager operations (VarGraph.* GPU tests). `rec` (may be null) takes
// the block's FLOPs and part marks for the cost model (step_cost.h).
at::Tensor run_block(const AdaLNSelfAttnImpl& blk, const at::Tensor& x, const BlockConstants& bk,
                     BlockContext& ctx, SamplingHooks* hooks, ProbeSink* probe,
                     AttentionBackend backend, const at::Tensor& step_mask, double& flops,
                     const CostRecorder* rec) {
    auto mark = [&](CostPart part) {
        if (rec) rec->mark(part);
    };
    ctx.cost = rec;
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
    if (hooks) mark(CostPart::Overhead);
    const at::Tensor rows = hooks ? hooks->select_tokens(ctx, x) : at::Tensor();
    // rows: (K) for every batch row, or (2B, K) chosen per batch row (FastVAR).
    const bool per_row = rows.defined() && rows.dim() == 2;
    const at::Tensor xs = !rows.defined() ? x
                          : per_row ? x.gather(1, rows.unsqueeze(-1).expand({-1, -1, x.size(2)}))
                                    : x.index_select(1, rows);

    mark(CostPart::Projection);
    const kernels::KernelPolicy* fuse = &ctx.scale.exec.kernels;
    // Where the fused q/k norm runs it writes the keys and values into the cache's slots itself
    // and the append copies nothing (two launches fewer per block).
    const auto [slot_k, slot_v] = ctx.cache.next_slots(ctx.layer, xs.size(1));
    const KvSlots slots{slot_k, slot_v};
    auto qkv = blk.attention_inputs(xs, bk, fuse, slot_k.defined() ? &slots : nullptr);
    ctx.cache.append(ctx.layer, qkv.k, qkv.v);
    if (hooks) {
        mark(CostPart::Overhead);
        hooks->on_kv_append(ctx);
    }
    auto [k, v] = ctx.cache.view(ctx.layer);
    if (block_needs_group_mask(step_mask, rows, backend == AttentionBackend::Eager,
                               probe != nullptr)) {
        mark(CostPart::Overhead);
        ctx.mask = block_group_mask(step_mask, rows, k.size(2));
    }

    lap();  // selection, QKV projection, cache append and eviction
    const double s = blk.attn->softmax_scale();
    if (probe && probe->wants_attention_inputs(ctx.scale.scale, ctx.layer))
        probe->on_attention_inputs({ctx.scale.scale, ctx.layer, qkv.q[0], k[0], v[0], s, ctx.mask});
    mark(CostPart::Attention);
    at::Tensor o = hooks ? hooks->attend(ctx, qkv.q, k, v, s) : at::Tensor();
    const double attention_flops = block_attention_flops(o, ctx.attention_flops, qkv.q, k);
    flops += attention_flops;
    if (rec) {  // projections: QKV (3C) and output (C)
        const double n = static_cast<double>(xs.size(0) * xs.size(1));
        const double width = static_cast<double>(xs.size(2));
        const double hidden = static_cast<double>(blk.ffn->fc1->weight.size(0));
        add_block_flops(*rec, n, width, 4.0, hidden, attention_flops);
    }
    if (!o.defined()) {
        mark(CostPart::Attention);  // a hook may have marked its own work and left it to us
        if (probe && probe->wants_attention(ctx.scale.scale, ctx.layer)) {
            at::Tensor probs;
            o = attention_eager(qkv.q, k, v, s, ctx.mask, &probs);
            probe->on_attention({ctx.scale.scale, ctx.layer, probs[0].to(at::kFloat).cpu()});
        } else if (backend == AttentionBackend::Eager) {
            o = attention_eager(qkv.q, k, v, s, ctx.mask);
        } else {
            o = step_attention_sdpa(ctx.scale, step_mask, rows, ctx.mask, qkv.q, k, v, s);
        }
    }
    lap();  // attention
    mark(CostPart::Projection);
    auto h = blk.attn_residual(xs, o, bk, fuse);
    mark(CostPart::Ffn);
    h = blk.ffn_residual(h, bk, fuse);
    at::Tensor out = h;
    if (hooks) mark(CostPart::Overhead);
    if (rows.defined()) {
        out = hooks->restore_tokens(ctx, x, rows, h);
        if (!out.defined())
            out = per_row ? x.scatter(1, rows.unsqueeze(-1).expand_as(h), h)
                          : x.index_copy(1, rows, h);
    }
    if (hooks) hooks->on_block_output(ctx, out);
    lap();  // output projection, FFN, restoration
    if (timed)
        probe->on_accel({"loop",
                         probe_kinds::kBlockMs,
                         ctx.scale.scale,
                         ctx.layer,
                         {},
                         {{"qkv_ms", part_ms[0]},
                          {"attention_ms", part_ms[1]},
                          {"ffn_ms", part_ms[2]},
                          {"rows", static_cast<double>(xs.size(1))}}});
    return out;
}

// The graph prologue returns tensors: BlockConstants flattened, kConstantTensors per block (an
// undefined q_mul stays undefined).
constexpr size_t kConstantTensors = 12;
void append_constants(const BlockConstants& k, std::vector<at::Tensor>& out) {
    const auto& m = k.m;
    out.insert(out.end(), {m.gamma1, m.gamma2, m.scale1, m.scale2, m.shift1, m.shift2, k.scale1p,
                           k.scale2p, k.shift1, k.shift2, k.qkv_bias, k.q_mul});
}
BlockConstants constants_at(const std::vector<at::Tensor>& t, size_t layer) {
    const size_t i = layer * kConstantTensors;
    return {{t[i], t[i + 1], t[i + 2], t[i + 3], t[i + 4], t[i + 5]},
            t[i + 6],
            t[i + 7],
            t[i + 8],
            t[i + 9],
            t[i + 10],
            t[i + 11]};
}

// torch.autocast(bf16) around the official sampler also runs the VQVAE's Phi convolution in
// bf16: Phi(h) = (1 - r) h + r * conv_bf16(h), the product rounded to bf16 and added to the
// fp32 term. The bf16-autocast mode folds its tokens into f_hat this way (same order: bicubic
// upsampling in fp32 first, except at the last scale), with bf16 copies of the Phi weights.
class AutocastPhi {
  public:
    explicit AutocastPhi(Vqvae& vae) : ratio_(std::abs(vae->config().quant_resi)) {
        const std::string prefix = "quantize.quant_resi.";
        std::map<int64_t, std::pair<at::Tensor, at::Tensor>> convs;
        for (const auto& p : vae->named_parameters()) {
            const auto& name = p.key();
            if (name.rfind(prefix, 0) != 0) continue;
            std::string rest = name.substr(prefix.size());  // "<i>.x", "qresi.x", "qresi_ls.<i>.x"
            if (rest.rfind("qresi_ls.", 0) == 0) rest = rest.substr(9);
            const auto dot = rest.find('.');
            const std::string head = rest.substr(0, dot), field = rest.substr(dot + 1);
            const int64_t i = head == "qresi" ? 0 : std::stoll(head);
            auto& slot = convs[i];
            (field == "weight" ? slot.first : slot.second) = p.value().to(at::kBFloat16);
        }
        for (auto& [i, wb] : convs) convs_.push_back(wb);
    }
    void add_to(Vqvae& vae, int64_t si, int64_t SN, at::Tensor& f_hat, const at::Tensor& h) const {
        const int64_t HW = f_hat.size(-1);
        const at::Tensor up =
            si != SN - 1 ? at::upsample_bicubic2d(h, {HW, HW}, /*align_corners=*/false) : h;
        if (convs_.empty()) {  // Phi is the identity
            f_hat.add_(up);
            return;
        }
        const auto& [w, b] = convs_.at(vae->phi_for_scale(si, SN));
        f_hat.add_(up.mul(1.0 - ratio_) +
                   at::conv2d(up.to(at::kBFloat16), w, b, 1, 1).mul_(ratio_));
    }

  private:
    double ratio_;
    std::vector<std::pair<at::Tensor, at::Tensor>> convs_;  // bf16 weight, bias per Phi
};

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
    if (!(top_p >= 0.0 && top_p <= 1.0))
        fail("top_p must be in [0, 1], got " + std::to_string(top_p));
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

void VarSampler::clear_cuda_graphs() {
    graphs_->clear();
}

void VarSampler::set_exec_policy(const ExecPolicy& exec) {
    if (exec != exec_) graphs_->clear();  // captured steps keep the kernels they ran
    exec_ = exec;
}

void VarSampler::set_tf32(bool on) {
    if (on != tf32_) graphs_->clear();  // captured cuBLAS calls keep the math mode they had
    tf32_ = on;
}

size_t VarSampler::cuda_graph_sets() const {
    return graphs_->size();
}

void VarSampler::set_graph_memory_probe(std::function<int64_t(int)> probe) {
    graphs_->set_memory_probe(std::move(probe));
}

VarSampleResult VarSampler::sample(const VarSampleOptions& opt, SamplingHooks* hooks,
                                   ProbeSink* probe) {
    const VarConfig& c = var_->config();
    opt.validate(c);
    c10::InferenceMode inference;
    const auto t_start = Clock::now();
    const at::Device device = var_->pos_1LC.device();
    const Tf32Scope tf32(tf32_ && device.is_cuda());
    const auto dtype = var_->compute_dtype();  // matrix products and KV cache
    const bool autocast = var_->autocast_bf16();
    const int64_t S = c.num_scales();
    auto gen = seeded_generator(device, opt.seed);
    // The cost model's part times: CUDA events (graphs with event nodes are kept apart), or on
    // the CPU, which returns from each op when it is done, host clock marks.
    const bool time_parts =
        opt.time_parts && (device.is_cpu() || (device.is_cuda() && kernels::cuda_graphs_built()));
    const int timer_device = device.is_cpu() ? kernels::PartTimer::kHost : device.index();

    // Labels: given, or drawn uniformly first (the official order of random draws).
    at::Tensor labels;
    if (opt.class_ids.empty()) {
        auto uniform = at::full({1, c.num_classes}, 1.0 / c.num_classes,
                                at::TensorOptions(device).dtype(at::kFloat));
        labels = at::multinomial(uniform, opt.batch, true, gen).view({opt.batch});
    } else {
        labels = at::tensor(opt.class_ids, at::kLong).to(device);
    }
    const int64_t B = labels.size(0);
    const auto codebook = named_tensor(*vae_, "quantize.embedding.weight");
    const std::optional<AutocastPhi> autocast_phi =
        autocast ? std::optional<AutocastPhi>(std::in_place, vae_) : std::nullopt;

    auto cond_BD = var_->class_embedding(at::cat({labels, at::full_like(labels, -1)}));
    VarSampleResult res;
    res.labels = labels;

    // With CUDA graphs the step's inputs live in the graphs' own tensors (fixed addresses);
    // the one call using them holds their lock.
    std::shared_ptr<DenseStepGraphs> graphs;
    std::unique_lock<std::mutex> graphs_lock;
    if (const auto signature = graphs_apply(opt.cuda_graphs, c, device, hooks, probe)) {
        const DenseGraphKey key{device.index(),
                                B,
                                dtype,
                                static_cast<int>(opt.attention),
                                c.patch_nums,
                                weights_fingerprint(*var_),
                                *signature,
                                hooks && hooks->compact_kv_cache(c),
                                time_parts,
                                hooks ? hooks->instance_id() : 0,
                                "",
                                exec_.var_chained_graph_pool};
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
        eager_cache.emplace(
            hooks && hooks->compact_kv_cache(c)
                ? KvCache::compact(c.depth, 2 * B, c.num_heads, c.head_dim(), kv_options)
                : KvCache(c.depth, 2 * B, c.num_heads, c.head_dim(), c.total_tokens(), kv_options));
    const int64_t S_run = hooks ? std::clamp<int64_t>(hooks->scales_to_run(c), 1, S) : S;
    const auto act = at::TensorOptions(device).dtype(dtype);
    const auto embed_dtype = var_->word_embed->weight.scalar_type();

    // The transformer input of scale si > 0: f_hat (area-downsampled to the scale's size)
    // embedded, restricted to `rows` when a policy pruned the scale. Inside the graphs every
    // input is computed from the static tensors (f_hat, cond_BD, weights).
    auto scale_input = [&](int64_t si, const at::Tensor& rows) {
        if (si == 0) {
            TORCH_CHECK(!rows.defined(), "the first scale cannot be pruned");
            return var_->first_scale_input(cond_BD);
        }
        const int64_t pn = c.patch_nums[si];
        auto tokens_in = at::adaptive_avg_pool2d(f_hat, {pn, pn})
                             .view({B, c.cvae, -1})
                             .transpose(1, 2)
                             .to(embed_dtype);
        auto pos = var_->level_position().narrow(1, c.scale_begin(si), pn * pn);
        if (rows.defined()) {
            tokens_in = tokens_in.index_select(1, rows);
            pos = pos.index_select(1, rows);
        }
        return (at::linear(tokens_in, var_->word_embed->weight, var_->word_embed->bias) + pos)
            .repeat({2, 1, 1});
    };
    // A failed capture leaves the set half-built: drop it (rebuilt next time).
    auto drop_graphs = [&] {
        graphs_lock.unlock();
        graphs_->erase(graphs);
    };
    auto guarded = [&](const auto& fn) {
        try {
            return fn();
        } catch (...) {
            if (graphs) drop_graphs();
            throw;
        }
    };
    // Per-call constants of every block: once per call, by the prologue graph or eagerly.
    std::vector<BlockConstants> constants;
    {
        auto all_constants = [&] {
            const at::Tensor block_cond = var_->block_condition(cond_BD);
            std::vector<at::Tensor> out;
            for (int64_t layer = 0; layer < c.depth; ++layer)
                append_constants(var_->block(layer).constants(block_cond, autocast), out);
            return out;
        };
        const auto t = graphs ? guarded([&] { return graphs->run("prologue", all_constants); })
                              : all_constants();
        for (int64_t layer = 0; layer < c.depth; ++layer)
            constants.push_back(constants_at(t, static_cast<size_t>(layer)));
    }

    // One step's transformer forward: the scales of `sctx` (rows as set by the hooks) through
    // every block with the hooks, then the head. Eager, or captured by the graphs (warm-up: the
    // dense first scale without hooks).
    const ScaleContext* step_ctx = nullptr;
    at::Tensor step_mask;
    auto forward = [&](const ScaleContext& sctx, KvCache& kv, double& flops, SamplingHooks* h,
                       ProbeSink* p, const CostRecorder* rec) {
        if (rec) rec->mark(CostPart::Input);
        std::vector<at::Tensor> inputs;
        for (const auto& seg : sctx.segments) inputs.push_back(scale_input(seg.scale, seg.rows));
        at::Tensor x = inputs.size() == 1 ? inputs[0] : at::cat(inputs, 1);
        if (rec && sctx.scale > 0)  // the word embedding of the B conditional rows
            rec->add_flops(CostPart::Input, 2.0 * static_cast<double>(x.size(0) / 2 * x.size(1)) *
                                                static_cast<double>(c.cvae * x.size(2)));
        for (int64_t layer = 0; layer < c.depth; ++layer) {
            BlockContext bctx{sctx, layer, kv};
            x = run_block(var_->block(layer), x, constants[layer], bctx, h, p, opt.attention,
                          step_mask, flops, rec);
        }
        if (rec) {
            rec->mark(CostPart::Head);
            rec->add_flops(CostPart::Head, 2.0 * static_cast<double>(x.size(0) * x.size(1)) *
                                               static_cast<double>(x.size(2) * c.vocab_size));
        }
        auto logits = var_->logits(x, cond_BD);
        if (rec) rec->end();
        return logits;
    };
    const DenseStepGraphs::Forward graph_step = [&](int64_t si, KvCache& kv, double& flops,
                                                    const CostRecorder* rec, bool warmup) {
        if (!warmup) return forward(*step_ctx, kv, flops, hooks, nullptr, rec);
        ScaleContext first{c, 0, c.patch_nums[0], B, 0, f_hat, {}, 0, exec_};
        first.segments.push_back({0, c.patch_nums[0], 0, {}, 0});
        TORCH_CHECK(si == 0, "CUDA graphs: the warm-up runs the first scale");
        const at::Tensor no_mask = std::exchange(step_mask, at::Tensor());
        auto out = forward(first, kv, flops, nullptr, nullptr, nullptr);
        step_mask = no_mask;
        return out;
    };

    // The probe's per-scale work (a GUI decodes a preview there) is timed apart from the scale.
    auto report_scale = [&](ScaleRecord rec) {
        const auto t_probe = Clock::now();
        probe->on_scale(std::move(rec));
        res.probe_millis += millis_since(t_probe);
    };
    std::map<size_t, std::unique_ptr<kernels::PartTimer>> eager_timers;  // by step
    // Steps a hook asked to run eagerly under graphs (ScaleContext::graphable) and all after
    // them: on a copy of the graphs' cache as the captured steps left it (hooks.h).
    std::optional<KvCache> tail_cache;
    int64_t step = 0;
    for (int64_t si = 0; si < S_run; ++step) {
        if (opt.cancel && opt.cancel->load(std::memory_order_relaxed)) throw SamplingCancelled();
        const auto t_step = Clock::now();
        // Hooks see f_hat as it was before the step (the VQVAE updates it in place).
        ScaleContext sctx{
            c,    si,   c.patch_nums[si], B, c.scale_begin(si), hooks ? f_hat.clone() : f_hat, {},
            step, exec_};
        plan_step_segments(sctx, hooks, S_run);
        if (hooks) hooks->on_scale_begin(sctx);
        if (graphs && !tail_cache && !sctx.graphable)
            tail_cache.emplace(guarded([&] { return graphs->eager_tail_cache(si); }));
        const bool graphed = graphs && !tail_cache;
        KvCache* eager_kv = tail_cache ? &*tail_cache : eager_cache ? &*eager_cache : nullptr;
        const std::vector<int64_t> layout =
            place_step_segments(sctx, device, graphed ? graphs.get() : nullptr);
        step_mask = step_group_mask(sctx, act, graphed ? graphs.get() : nullptr);
        at::Tensor raw_logits;
        const double flops_before = res.attention_flops;
        StepCost cost;
        cost.scale = si;
        cost.scales = static_cast<int64_t>(sctx.segments.size());
        if (graphed) {
            step_ctx = &sctx;
            raw_logits = guarded(
                [&] { return graphs->step(si, layout, graph_step, res.attention_flops, &cost); });
            step_ctx = nullptr;
        } else {
            auto timer = time_parts ? std::make_unique<kernels::PartTimer>(timer_device) : nullptr;
            const CostRecorder rec{&cost, timer.get()};
            raw_logits = forward(sctx, *eager_kv, res.attention_flops, hooks, probe, &rec);
            if (timer) eager_timers.emplace(res.step_costs.size(), std::move(timer));
        }
        res.step_costs.push_back(cost);
        std::vector<at::Tensor> guided;
        for (const auto& seg : sctx.segments) {
            const auto part = sctx.segments.size() == 1
                                  ? raw_logits
                                  : raw_logits.narrow(1, seg.offset, seg.length());
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
                h_BlC = at::zeros({B, pn * pn, h_BlC.size(2)}, h_BlC.options())
                            .index_copy(1, seg.rows, h_BlC);
            }
            auto h_BChw = h_BlC.transpose(1, 2).reshape({B, c.cvae, pn, pn}).to(at::kFloat);
            if (autocast_phi)
                autocast_phi->add_to(vae_, sj, S, f_hat, h_BChw);
            else
                vae_->next_autoregressive_input(sj, S, f_hat, h_BChw);
            if (hooks) hooks->on_scale_end(sctx, seg, idx, f_hat);
            res.tokens.push_back(idx);
            // A copy even on the CPU, where cpu() would alias f_hat, which the VQVAE updates in
            // place: every record would show the final features.
            if (probe && probe->wants_fhat())
                fhat_after.push_back(f_hat.to(at::kCPU, f_hat.scalar_type(), false, /*copy=*/true));
        }
        if (hooks) {
            const double deferred = hooks->take_deferred_attention_flops(sctx);
            res.attention_flops += deferred;
            res.step_costs.back().flops[static_cast<int>(CostPart::Attention)] += deferred;
        }
        const double step_flops = res.attention_flops - flops_before;
        res.kv_bytes_peak = std::max(
            res.kv_bytes_peak, graphed ? graphs->kv_bytes_after(si) : eager_kv->total_bytes());
        if (opt.time_scales) synchronize_device(device);
        const double step_ms = millis_since(t_step);
        for (size_t g = 0; g < sctx.segments.size(); ++g) {
            const auto& seg = sctx.segments[g];
            // A grouped step is one forward pass: its time is booked on its first scale.
            res.scale_millis.push_back(g == 0 ? step_ms : 0.0);
            if (probe) {
                ScaleRecord rec{seg.scale,
                                seg.patch_num,
                                res.scale_millis.back(),
                                res.tokens[seg.scale].cpu(),
                                {},
                                step,
                                false};
                if (!fhat_after.empty()) rec.f_hat = fhat_after[g];
                rec.attention_flops = g == 0 ? step_flops : 0.0;
                report_scale(std::move(rec));
            }
        }
        si += static_cast<int64_t>(sctx.segments.size());
    }
    for (int64_t si = S_run; si < S; ++si) {
        // Skipped scales: no tokens; f_hat is decoded as it stands.
        const int64_t pn = c.patch_nums[si];
        res.tokens.push_back(
            at::full({B, pn * pn}, -1, at::TensorOptions(device).dtype(at::kLong)));
        res.scale_millis.push_back(0.0);
        if (probe) {
            report_scale({si, pn, 0.0, res.tokens.back().cpu(), {}, step, true});
        }
    }
    if (time_parts) {
        // The steps' events are complete once the device is: read the part times.
        synchronize_device(device);
        read_part_times(res.step_costs, eager_timers,
                        [&](int64_t scale) -> const kernels::PartTimer* {
                            return graphs ? graphs->part_timer(scale) : nullptr;
                        });
    }
    res.kv_bytes = tail_cache ? tail_cache->total_bytes()
                   : graphs   ? graphs->kv_bytes()
                              : eager_cache->total_bytes();
    if (graphs) res.graph_capture_millis = graphs->capture_millis() - capture_ms_before;
    const auto t_dec = Clock::now();
    // In chunks of images (chunked_decode.h): the VQVAE's full-size maps would scale with B.
    const int64_t chunk = decode_chunk_images(vae_->config().downsample() * c.patch_nums.back());
    // The bf16 modes decode under CUDA autocast, as the official sampler's torch.autocast does
    // (autocast_scope.h); the images leave as fp32.
    const bool bf16_decode = f_hat.is_cuda() && (autocast || dtype == at::kBFloat16);
    const auto decode = [&](const at::Tensor& f) {
        return decode_in_chunks(f, chunk, [&](const at::Tensor& part) {
            CudaAutocastScope scope(bf16_decode);
            return vae_->decode(part).add(1).mul(0.5).to(at::kFloat);
        });
    };
    if (opt.decode && graphs) {
        // A copy: the graph's output is overwritten by the next call's replay.
        res.images = guarded([&] {
            return graphs->run("decode", [&] { return std::vector<at::Tensor>{decode(f_hat)}; })[0]
                .clone();
        });
    } else if (opt.decode) {
        res.images = decode(f_hat);
    }
    if (opt.time_scales) synchronize_device(device);
    res.decode_millis = millis_since(t_dec);
    res.f_hat = graphs ? f_hat.clone() : f_hat;  // the graphs' f_hat is reused by the next call
    res.total_millis = millis_since(t_start);
    return res;
}

}  // namespace varscope
