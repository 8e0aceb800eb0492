#include "core/sampling/mar_sampler.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <chrono>
#include <cmath>
#include <stdexcept>

#include "core/sampling/cuda_graph.h"  // weights_fingerprint
#include "core/sampling/mar_cuda_graph.h"
#include "core/sampling/token_sampling.h"
#include "kernels/cuda_graph.h"

namespace varscope {
namespace {

using Clock = std::chrono::steady_clock;

double millis_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// (R, n, C) rows of x (R, L, C) at index (R, n).
at::Tensor gather_rows(const at::Tensor& x, const at::Tensor& index) {
    return x.gather(1, index.unsqueeze(-1).expand({-1, -1, x.size(2)}));
}

// The pieces of one step that run_block needs besides the block itself.
struct BlockRun {
    MarSamplingHooks* hooks;
    ProbeSink* probe;
    AttentionBackend backend;
    const std::vector<int64_t>& feature_layers;
    double& flops;
};

// The graph signature of hooks that may run inside whole-step graphs (mar_hooks.h), unless the
// policy asks for the eager transformer (ExecPolicy::mar_hook_step_graphs, to measure it).
std::optional<std::string> step_graph_signature(const MarSamplingHooks& hooks,
                                                const ExecPolicy& exec) {
    if (!exec.mar_hook_step_graphs) return std::nullopt;
    return hooks.graph_signature();
}

// A probe that takes only per-step records (times, decoded positions, previews: made after each
// step, on the host) leaves the steps to CUDA graphs. Attention maps are read inside a step:
// they keep it eager (as the head caches' statistics do, see MarSamplingHooks).
bool probe_needs_eager_steps(const ProbeSink* probe, const MarConfig& c, int64_t steps) {
    if (!probe) return false;
    const int64_t layers = c.encoder_depth + c.decoder_depth;
    for (int64_t step = 0; step < steps; ++step)
        for (int64_t layer = 0; layer < layers; ++layer)
            if (probe->wants_attention(step, layer)) return true;
    return false;
}

bool wants_features(const std::vector<int64_t>& layers, int64_t layer) {
    return std::find(layers.begin(), layers.end(), layer) != layers.end();
}

at::Tensor run_block(const MarBlockImpl& blk, const at::Tensor& x, MarBlockContext& ctx,
                     const BlockRun& run) {
    MarSamplingHooks* hooks = run.hooks;
    const at::Tensor rows = hooks ? hooks->select_tokens(ctx, x) : at::Tensor();
    const bool per_row = rows.defined() && rows.dim() == 2;
    const at::Tensor xs = !rows.defined() ? x
                          : per_row       ? gather_rows(x, rows)
                                          : x.index_select(1, rows);
    auto qkv = blk.attn->project_qkv(blk.attn_input(xs));
    at::Tensor k = qkv.k, v = qkv.v;
    if (hooks) hooks->on_keys_values(ctx, rows, k, v);
    const double scale = blk.attn->softmax_scale();
    at::Tensor o = hooks ? hooks->attend(ctx, qkv.q, k, v, scale) : at::Tensor();
    if (o.defined() && ctx.attention_flops >= 0) {
        run.flops += ctx.attention_flops;
    } else {
        run.flops += 4.0 * double(qkv.q.size(0)) * double(qkv.q.size(1)) * double(qkv.q.size(2)) *
                     double(k.size(2)) * double(qkv.q.size(3));
    }
    if (!o.defined()) {
        const int64_t layer = ctx.global_layer();
        if (run.probe && run.probe->wants_attention(ctx.step.step, layer)) {
            at::Tensor probs;
            o = attention_eager(qkv.q, k, v, scale, {}, &probs);
            run.probe->on_attention({ctx.step.step, layer, probs[0].to(at::kFloat).cpu()});
        } else if (run.backend == AttentionBackend::Eager) {
            o = attention_eager(qkv.q, k, v, scale);
        } else {
            o = attention_sdpa(qkv.q, k, v, scale);
        }
    }
    const auto h = blk.mlp_residual(xs + blk.attn->project_out(o));
    at::Tensor out = h;
    if (rows.defined()) {
        out = hooks->restore_tokens(ctx, x, rows, h);
        if (!out.defined())
            out = per_row ? x.scatter(1, rows.unsqueeze(-1).expand_as(h), h)
                          : x.index_copy(1, rows, h);
    }
    if (hooks) hooks->on_block_output(ctx, out);
    if (run.probe && wants_features(run.feature_layers, ctx.global_layer()))
        run.probe->on_accel({"mar",
                             "block_features",
                             ctx.step.step,
                             ctx.global_layer(),
                             out.to(at::kFloat).cpu(),
                             {{"stage", ctx.stage == MarStage::Encoder ? 0.0 : 1.0},
                              {"layer_in_stage", double(ctx.layer)}}});
    return out;
}

}  // namespace

CfgSchedule parse_cfg_schedule(const std::string& s) {
    if (s == "linear") return CfgSchedule::Linear;
    if (s == "constant") return CfgSchedule::Constant;
    throw std::invalid_argument("cfg schedule must be linear or constant, got '" + s + "'");
}

std::string cfg_schedule_name(CfgSchedule s) {
    return s == CfgSchedule::Linear ? "linear" : "constant";
}

void MarSampleOptions::validate(const MarConfig& c) const {
    auto fail = [](const std::string& m) { throw std::invalid_argument(m); };
    if (class_ids.empty() && (batch < 1 || batch > 4096))
        fail("batch must be in [1, 4096], got " + std::to_string(batch));
    for (auto id : class_ids)
        if (id < -1 || id >= c.class_num)
            fail("class id " + std::to_string(id) + " is out of range: the model has " +
                 std::to_string(c.class_num) + " classes (0.." + std::to_string(c.class_num - 1) +
                 ", or -1 for unconditional)");
    if (num_iter < 1 || num_iter > 4096)
        fail("num_iter must be in [1, 4096], got " + std::to_string(num_iter));
    if (!(cfg >= 0.0 && cfg <= 100.0)) fail("cfg must be in [0, 100], got " + std::to_string(cfg));
    if (!(temperature > 0.0 && temperature <= 10.0))
        fail("temperature must be in (0, 10], got " + std::to_string(temperature));
    const int64_t layers = c.encoder_depth + c.decoder_depth;
    for (auto l : feature_layers)
        if (l < 0 || l >= layers)
            fail("feature layer " + std::to_string(l) + " is out of range [0, " +
                 std::to_string(layers) + ")");
}

std::vector<MarStepPlan> mar_step_plan(int64_t seq_len, int64_t num_iter, double cfg,
                                       CfgSchedule schedule) {
    std::vector<MarStepPlan> plan;
    int64_t masked = seq_len;
    for (int64_t step = 0; step < num_iter; ++step) {
        MarStepPlan p;
        p.masked_before = masked;
        // Cosine schedule (MaskGIT/MAGE), evaluated like the original: the ratio in double,
        // floor, then at least one token stays masked for the next step and one is decoded.
        const double ratio = std::cos(M_PI / 2. * double(step + 1) / double(num_iter));
        const auto target = static_cast<int64_t>(std::floor(double(seq_len) * ratio));
        p.mask_len = std::max<int64_t>(1, std::min<int64_t>(masked - 1, target));
        p.masked_after = step >= num_iter - 1 ? 0 : std::min(p.mask_len, masked);
        if (schedule == CfgSchedule::Linear) {
            // 1 + (cfg - 1) * (seq_len - mask_len) / seq_len with float32 tensors, as upstream.
            const float known = float(seq_len) - float(p.mask_len);
            const float scaled = float(cfg - 1) * known;
            p.cfg = double(1.0f + scaled / float(seq_len));
        } else {
            p.cfg = cfg;
        }
        masked = p.masked_after;
        plan.push_back(p);
    }
    return plan;
}

at::Tensor mar_unpatchify(const at::Tensor& tokens, const MarConfig& c) {
    const int64_t B = tokens.size(0), p = c.patch_size, h = c.seq_h(), C = c.vae_embed_dim;
    return tokens.reshape({B, h, h, C, p, p})
        .permute({0, 3, 1, 4, 2, 5})
        .reshape({B, C, h * p, h * p});
}

MarSampler::MarSampler(MarTransformer mar, LatentDecoder decoder, double latent_scale)
    : mar_(std::move(mar)),
      diffusion_(DiffusionSchedule::respaced(mar_->config().num_sampling_steps)),
      decoder_(std::move(decoder)),
      latent_scale_(latent_scale) {}

void MarSampler::set_exec_policy(const ExecPolicy& exec) {
    if (exec != diffusion_.exec_policy()) graphs_.reset();  // captured steps keep their kernels
    diffusion_.set_exec_policy(exec);
}

MarSampleResult MarSampler::sample(const MarSampleOptions& opt, MarSamplingHooks* hooks,
                                   ProbeSink* probe) {
    const MarConfig& c = mar_->config();
    opt.validate(c);
    c10::InferenceMode inference;
    const auto t_start = Clock::now();
    const at::Device device = mar_->mask_token.device();
    const auto dtype = mar_->mask_token.scalar_type();
    auto gen = seeded_generator(device, opt.seed);
    const auto long_opts = at::TensorOptions(device).dtype(at::kLong);
    const int64_t L = c.seq_len(), D = c.token_embed_dim(), buf = c.buffer_size;

    MarSampleResult res;
    if (opt.class_ids.empty()) {
        auto uniform = at::full({1, c.class_num}, 1.0 / c.class_num,
                                at::TensorOptions(device).dtype(at::kFloat));
        res.labels = at::multinomial(uniform, opt.batch, true, gen).view({opt.batch});
    } else {
        res.labels = at::tensor(opt.class_ids, at::kLong).to(device);
    }
    const int64_t B = res.labels.size(0);
    std::vector<at::Tensor> perms;
    for (int64_t b = 0; b < B; ++b) perms.push_back(at::randperm(L, gen, long_opts));
    res.orders = at::stack(perms);

    const bool cfg_on = opt.cfg != 1.0;
    const auto cls_cond = mar_->class_embedding(res.labels);
    const auto cls_both =
        cfg_on ? at::cat({cls_cond, mar_->class_embedding(at::full_like(res.labels, -1))})
               : cls_cond;
    const auto plan = mar_step_plan(L, opt.num_iter, opt.cfg, opt.cfg_schedule);

    at::Tensor tokens = at::zeros({B, L, D}, at::TensorOptions(device).dtype(at::kFloat));
    at::Tensor mask = at::ones({B, L}, at::TensorOptions(device).dtype(at::kBool));
    at::Tensor decoder_positions = at::arange(c.total_len(), long_opts).unsqueeze(0);
    at::Tensor buffer_positions = at::arange(buf, long_opts).unsqueeze(0);
    BlockRun run{hooks, probe, opt.attention, opt.feature_layers, res.attention_flops};
    at::Tensor decoded_prev;
    const SimpleMlpAdaLNImpl& head = *mar_->diffloss->net;

    // CUDA graphs (mar_cuda_graph.h): the whole step without hooks or with hooks that have a
    // graph signature, else the diffusion alone. Probes that read tensors inside the step keep
    // the eager loop (probe_needs_eager_steps).
    // The DiffLoss head caches are the hooks' decision (LazyMAR's released code).
    const int64_t head_cfg_period = hooks ? hooks->head_cfg_cache_period() : 0;
    const int64_t head_mlp_period = hooks ? hooks->head_mlp_cache_period() : 0;
    const bool head_stats_wanted =
        (head_cfg_period > 0 || head_mlp_period > 0) && hooks->wants_head_cache_stats();
    std::shared_ptr<MarGraphs> graphs;
    std::optional<std::string> hook_signature;
    if (opt.cuda_graphs && device.is_cuda() && kernels::cuda_graphs_built() &&
        !probe_needs_eager_steps(probe, c, opt.num_iter) && !head_stats_wanted &&
        opt.feature_layers.empty()) {
        if (hooks) hook_signature = step_graph_signature(*hooks, exec_policy());
        const MarGraphKey key{device.index() < 0 ? 0 : int(device.index()),
                              B,
                              dtype,
                              opt.num_iter,
                              opt.cfg,
                              int(opt.cfg_schedule),
                              opt.temperature,
                              int(opt.attention),
                              weights_fingerprint(*mar_),
                              head_cfg_period,
                              opt.fused_head,
                              head_mlp_period,
                              hook_signature.value_or(""),
                              exec_policy().mar_chained_graph_pool};
        if (!graphs_ || !(graphs_->key() == key)) graphs_ = std::make_shared<MarGraphs>(key);
        graphs = graphs_;
    }
    const bool whole_step_graphs = graphs && (!hooks || hook_signature);
    const double capture_ms_before = graphs ? graphs->capture_millis() : 0.0;
    const HeadPath head_path = opt.fused_head ? HeadPath::Auto : HeadPath::Modules;
    // The head caches' drift per decoding step, for hooks that ask (a device read per refresh;
    // the loop then runs eagerly).
    HeadCacheStats head_stats;
    HeadCacheStats* head_stats_ptr = head_stats_wanted ? &head_stats : nullptr;
    const auto noise_opts = at::TensorOptions(device).dtype(head.input_proj->weight.scalar_type());
    const int64_t S = diffusion_.schedule().num_steps(), C = head.in_channels();
    at::Tensor t_all, orders_in, cls_in, labels_in;
    if (graphs) {
        // Inputs the graphs read, at fixed addresses; this call's values copied in.
        auto t_now = diffusion_.time_embeddings(head, device);
        t_all = graphs->buffer("t_all", [&] { return at::empty_like(t_now); });
        t_all.copy_(t_now);
    }
    if (whole_step_graphs) {
        auto cls_now = (cfg_on ? cls_both : cls_cond).to(dtype);
        cls_in = graphs->buffer("cls", [&] { return at::empty_like(cls_now); });
        cls_in.copy_(cls_now);
        // What the captured steps' hooks read must outlive this call, whose own tensors the
        // allocator hands out again once it returns (a replay in a later call reads them).
        labels_in = graphs->buffer("labels", [&] { return at::empty_like(res.labels); });
        labels_in.copy_(res.labels);
        decoder_positions = graphs->buffer("decoder_positions", [&] { return decoder_positions; });
        buffer_positions = graphs->buffer("buffer_positions", [&] { return buffer_positions; });
        orders_in = graphs->buffer("orders", [&] { return at::empty_like(res.orders); });
        orders_in.copy_(res.orders);
        at::Tensor tokens_in = graphs->buffer("tokens", [&] { return at::empty_like(tokens); });
        tokens_in.zero_();
        tokens = tokens_in;
    }
    // Static noise buffers for N decoded rows, drawn in the eager loop's order (same stream).
    auto drawn_noise = [&](int64_t N) {
        const int64_t rows = cfg_on ? 2 * N : N;
        auto start = graphs->buffer("noise_start_" + std::to_string(N), [&] {
            return at::empty({N, C}, noise_opts);
        });
        auto steps = graphs->buffer("noise_steps_" + std::to_string(N), [&] {
            return at::empty({S, rows, C}, noise_opts);
        });
        DiffusionSampler::draw_noise(start, steps, gen);
        return std::make_pair(start, steps);
    };

    // Transformer and DiffLoss head of one step: (sampled (B, k, D), new tokens). `noise`
    // (start, steps) from drawn_noise; undefined = draw from the generator inline.
    auto step_body = [&](MarStepContext& sctx, const MarStepPlan& p, const at::Tensor& cls_rows,
                         const std::pair<at::Tensor, at::Tensor>& noise,
                         const std::function<at::Tensor(const at::Tensor&)>& diffuse)
        -> std::pair<at::Tensor, at::Tensor> {
        const int64_t R = sctx.rows();
        const at::Tensor& known = sctx.known;
        const at::Tensor& decoded = sctx.decoded;
        const auto known_R = known.repeat({R / B, 1});
        const auto tokens_R = sctx.tokens.repeat({R / B, 1, 1});
        // cls_rows (graphs) holds both branches with CFG: the first R are this step's rows.
        const auto cls = cls_rows.defined() ? cls_rows.narrow(0, 0, R)
                                            : (R == B ? cls_cond : cls_both).to(dtype);
        at::Tensor x = mar_->encoder_input(tokens_R, known_R, cls);
        const at::Tensor enc_positions =
            hooks ? at::cat({buffer_positions.expand({R, buf}), known_R + buf}, 1) : at::Tensor();
        for (int64_t l = 0; l < c.encoder_depth; ++l) {
            MarBlockContext bctx{sctx, MarStage::Encoder, l, enc_positions};
            x = run_block(mar_->encoder_block(l), x, bctx, run);
        }
        x = apply_layer_norm(mar_->encoder_norm, x);
        x = mar_->decoder_input(x, known_R);
        const at::Tensor dec_positions = hooks ? decoder_positions.expand({R, -1}) : at::Tensor();
        for (int64_t l = 0; l < c.decoder_depth; ++l) {
            MarBlockContext bctx{sctx, MarStage::Decoder, l, dec_positions};
            x = run_block(mar_->decoder_block(l), x, bctx, run);
        }
        if (cfg_on && sctx.skip_unconditional) {
            auto uncond = hooks->unconditional_rows(sctx, x);
            TORCH_CHECK(uncond.defined() && uncond.sizes() == x.sizes(),
                        "MAR hooks skipped the unconditional branch at step ", sctx.step,
                        " but unconditional_rows() returned no tensor of shape ", x.sizes());
            x = at::cat({x, uncond});
        } else if (cfg_on && hooks) {
            hooks->on_cfg_branches(sctx, x);
        }
        at::Tensor z = mar_->decoder_output(x);
        if (hooks) hooks->on_condition(sctx, z);

        // Conditions of the decoded positions: B*k conditional rows, then the
        // unconditional ones (the row-major order of the original's boolean indexing).
        const int64_t rows_z = cfg_on ? 2 * B : B;
        const auto z_sel =
            gather_rows(z, decoded.repeat({rows_z / B, 1})).reshape({-1, z.size(2)}).to(dtype);
        at::Tensor sampled;
        if (diffuse) {
            sampled = diffuse(z_sel);
        } else {
            const at::Tensor cfg_scale =
                cfg_on ? at::full({}, p.cfg, at::TensorOptions(device).dtype(at::kFloat))
                       : at::Tensor();
            sampled = noise.first.defined()
                          ? diffusion_.sample_with_noise(
                                head, z_sel, cfg_scale, opt.temperature, noise.first, noise.second,
                                t_all, head_cfg_period, head_path, head_mlp_period, head_stats_ptr)
                          : diffusion_.sample(head, z_sel, cfg_scale, opt.temperature, gen,
                                              head_cfg_period, head_path, head_mlp_period,
                                              head_stats_ptr);
        }
        sampled = sampled.to(at::kFloat).view({B, p.decoded(), D});
        auto next = sctx.tokens.scatter(1, decoded.unsqueeze(-1).expand({-1, -1, D}), sampled);
        return {sampled, next};
    };
    // Known positions and this step's positions follow from the order alone (the tail of the
    // order is decoded first), so no data-dependent shapes and no host syncs.
    auto known_of = [&](const at::Tensor& orders, const MarStepPlan& p) {
        return std::get<0>(orders.narrow(1, p.masked_before, L - p.masked_before).sort(1));
    };
    auto decoded_of = [&](const at::Tensor& orders, const MarStepPlan& p) {
        return std::get<0>(orders.narrow(1, p.masked_after, p.decoded()).sort(1));
    };

    // What the hooks see of a step; the graphed and the eager step differ only in the tensors.
    auto step_context = [&](int64_t step, const MarStepPlan& p, const at::Tensor& orders,
                            const at::Tensor& known, const at::Tensor& dec,
                            const at::Tensor& prev) {
        MarStepContext ctx{
            c,          step,   opt.num_iter, B,     cfg_on, p.cfg, p.masked_before, p.masked_after,
            res.labels, orders, mask,         known, dec,    prev,  tokens};
        ctx.head_cfg_cache_period = head_cfg_period;
        ctx.head_mlp_cache_period = head_mlp_period;
        return ctx;
    };

    for (int64_t step = 0; step < opt.num_iter; ++step) {
        if (opt.cancel && opt.cancel->load(std::memory_order_relaxed)) throw SamplingCancelled();
        const auto t_step = Clock::now();
        const double flops_before = res.attention_flops;
        const MarStepPlan& p = plan[step];
        at::Tensor decoded;
        bool skipped_unconditional = false;
        if (whole_step_graphs && p.decoded() > 0) {
            // Graph-safe hooks decide the step on the host (from the step index alone) and run
            // their per-block calls only inside the capture (mar_hooks.h).
            MarStepContext hctx = step_context(step, p, orders_in, {}, {}, {});
            if (hooks) {
                hooks->on_step_begin(hctx);
                hctx.skip_unconditional = cfg_on && hooks->skip_unconditional(hctx);
            }
            skipped_unconditional = hctx.skip_unconditional;
            const auto noise = drawn_noise(B * p.decoded());
            const std::string name = "step_" + std::to_string(step);
            const auto& out = graphs->run(
                name,
                [&] {
                    const auto known = known_of(orders_in, p);
                    const auto dec = decoded_of(orders_in, p);
                    const auto prev =
                        hooks && step > 0 ? decoded_of(orders_in, plan[step - 1]) : at::Tensor();
                    MarStepContext sctx = step_context(step, p, orders_in, known, dec, prev);
                    sctx.skip_unconditional = hctx.skip_unconditional;
                    sctx.graphs = graphs.get();
                    sctx.labels = labels_in;  // static; the mask is the call's: not in graphs
                    sctx.mask = at::Tensor();
                    double before = res.attention_flops;
                    auto r = step_body(sctx, p, cls_in, noise, {});
                    graphs->flops[name] = res.attention_flops - before;
                    res.attention_flops = before;
                    return std::vector<at::Tensor>{r.second, dec, r.first};
                },
                MarGraphs::Pool::Chained);  // the outputs are read before the next step
            res.attention_flops += graphs->flops[name];
            tokens.copy_(out[0]);
            decoded = out[1].clone();
            if (hooks) hooks->on_step_end(hctx, out[2], tokens);
        } else {
            const auto known = known_of(res.orders, p);
            decoded = decoded_of(res.orders, p);
            MarStepContext sctx = step_context(step, p, res.orders, known, decoded, decoded_prev);
            if (hooks) hooks->on_step_begin(sctx);
            sctx.skip_unconditional = cfg_on && hooks && hooks->skip_unconditional(sctx);
            skipped_unconditional = sctx.skip_unconditional;
            if (p.decoded() > 0) {
                std::function<at::Tensor(const at::Tensor&)> diffuse;
                if (graphs) {
                    // The diffusion alone as a graph per decoded-row count.
                    diffuse = [&](const at::Tensor& z_sel) {
                        const int64_t N = B * p.decoded();
                        const auto noise = drawn_noise(N);
                        auto z_in = graphs->buffer("z_" + std::to_string(N),
                                                   [&] { return at::empty_like(z_sel); });
                        z_in.copy_(z_sel);
                        auto scale = graphs->buffer("cfg_scale", [&] {
                            return at::zeros({}, at::TensorOptions(device).dtype(at::kFloat));
                        });
                        scale.fill_(p.cfg);
                        return graphs->run("diffusion_" + std::to_string(N), [&] {
                            return std::vector<at::Tensor>{diffusion_.sample_with_noise(
                                head, z_in, cfg_on ? scale : at::Tensor(), opt.temperature,
                                noise.first, noise.second, t_all, head_cfg_period, head_path,
                                head_mlp_period)};
                        })[0];
                    };
                }
                auto r = step_body(sctx, p, at::Tensor(), {}, diffuse);
                tokens = r.second;
                if (hooks) hooks->on_step_end(sctx, r.first, tokens);
            }
        }
        mask = mask.scatter(1, decoded, false);
        if (opt.time_steps) synchronize_device(device);
        res.step_millis.push_back(millis_since(t_step));
        res.cfg_per_step.push_back(cfg_on ? p.cfg : 1.0);
        res.decoded.push_back(decoded);
        if (probe || head_stats_ptr) {
            const auto t_probe = Clock::now();
            if (probe) {
                ScaleRecord rec{step, c.seq_h(), res.step_millis.back(), decoded.cpu(), {},
                                step, false};
                rec.attention_flops = res.attention_flops - flops_before;
                if (probe->wants_fhat())
                    rec.f_hat = mar_unpatchify(tokens, c).to(at::kCPU, at::kFloat, false, true);
                probe->on_scale(std::move(rec));
                probe->on_accel({"mar",
                                 "step",
                                 step,
                                 -1,
                                 {},
                                 {{"cfg", res.cfg_per_step.back()},
                                  {"masked_before", double(p.masked_before)},
                                  {"decoded", double(p.decoded())},
                                  {"unconditional_skipped", skipped_unconditional ? 1.0 : 0.0}}});
            }
            // The hooks record the head caches' statistics (LazyMarHeadCache: "lazymar" records).
            if (head_stats_ptr && p.decoded() > 0) hooks->on_head_cache_stats(step, head_stats);
            head_stats = HeadCacheStats{};
            res.probe_millis += millis_since(t_probe);
        }
        decoded_prev = decoded;
    }
    if (whole_step_graphs) tokens = tokens.clone();  // the buffer is rewritten by the next call
    if (graphs) {
        res.cuda_graphs = true;
        res.graph_capture_millis = graphs->capture_millis();
        res.graph_capture_millis_call = res.graph_capture_millis - capture_ms_before;
        res.graph_kernel_nodes = graphs->kernel_nodes;
    }
    res.tokens = tokens;
    res.latents = mar_unpatchify(tokens, c);
    const auto t_dec = Clock::now();
    if (opt.decode && decoder_) res.images = decoder_(res.latents / latent_scale_).add(1).mul(0.5);
    if (opt.time_steps) synchronize_device(device);
    res.decode_millis = millis_since(t_dec);
    res.total_millis = millis_since(t_start);
    return res;
}

}  // namespace varscope
