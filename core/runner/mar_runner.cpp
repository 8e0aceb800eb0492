// MAR behind the Runner interface: MarPipeline, LazyMAR (core/accel/mar_accel_config.h), the
// FLOP counter, and the reports' MAR columns (LazyMAR's computed share per step, the latents'
// relative difference). Sequence-indexed records are laid out on the token grid here for the
// inspector.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>

#include "core/accel/lazymar.h"
#include "core/accel/mar_accel_config.h"
#include "core/accel/mar_flops.h"
#include "core/io/checkpoint.h"
#include "core/models/sampling_recommendation.h"
#include "core/runner/runner.h"
#include "core/runner/runner_internal.h"

namespace varscope {
namespace {

class MarAccelPlan : public AccelPlan {
  public:
    explicit MarAccelPlan(MarAccelConfig c) : config(std::move(c)) {}
    Family family() const override { return Family::Mar; }
    bool enabled() const override { return config.any_enabled(); }
    std::string summary() const override { return config.summary(); }
    nlohmann::json to_json() const override { return config.to_json(); }
    std::string describe() const override {
        const LazyMarHeadCache head = LazyMarHeadCache::from_config(config.lazymar);
        const int64_t cfg_period = head.head_cfg_cache_period();
        const int64_t mlp_period = head.head_mlp_cache_period();
        std::string s = summary();
        if (cfg_period > 0)
            s += ", head condition cache every " + std::to_string(cfg_period) + " diffusion steps";
        if (mlp_period > 0)
            s += ", head MLP cache every " + std::to_string(mlp_period) + " diffusion steps";
        return s;
    }
    nlohmann::json report() const override {
        const LazyMarHeadCache head = LazyMarHeadCache::from_config(config.lazymar);
        return {{"head_cfg_cache_period", head.head_cfg_cache_period()},
                {"head_mlp_cache_period", head.head_mlp_cache_period()}};
    }
    MarAccelConfig config;
};

const MarAccelConfig& mar_config_of(const AccelPlan* plan) {
    static const MarAccelConfig baseline;
    if (!plan) return baseline;
    if (plan->family() != Family::Mar)
        throw std::invalid_argument("a " + std::string(family_title(plan->family())) +
                                    " accelerator config cannot run on a MAR model");
    return static_cast<const MarAccelPlan*>(plan)->config;
}

// (h, w) map of a sequence-indexed record (buffer slots first).
at::Tensor image_map(const at::Tensor& per_position, int64_t buffer, int64_t side) {
    return per_position.to(at::kFloat).narrow(0, buffer, side * side).view({side, side});
}

class MarRunner : public Runner {
  public:
    MarRunner(MarPipeline pipe, std::string path, bool respacing_recommended)
        : pipe_(std::move(pipe)),
          path_(std::move(path)),
          respacing_recommended_(respacing_recommended) {}

    Family family() const override { return Family::Mar; }
    std::string describe() const override { return pipe_.describe(); }
    at::Device device() const override { return pipe_.device(); }
    nlohmann::json config_json() const override { return cfg().to_json(); }
    const std::string& model_path() const override { return path_; }
    bool has_decoder() const override { return pipe_.has_vae(); }
    const char* step_noun() const override { return "step"; }
    int64_t steps(const SampleSettings& s) const override { return s.num_iter; }
    SampleSettings defaults() const override {
        SampleSettings s;
        s.cfg = 1.0;  // no guidance: the transformer runs B rows
        return s;
    }

    // Transformer and DiffLoss head on given inputs: tokens (R, L, D), mask (R, L) (1 =
    // masked), labels (R) (-1 = fake latent); optionally the head's inputs diff_x (N, D), diff_t
    // (N) (original timesteps), diff_c (N, Cd), and for a full reverse process diff_z (rows,
    // Cd), diff_start (N, D), diff_noise (steps, rows, D), diff_cfg (scalar, < 0 = none),
    // diff_temp. What tools/parity/mar_parity.py compares with the official code.
    StateDict teacher_forward(const StateDict& in, const std::string& source, bool) override {
        c10::InferenceMode guard;
        const auto input = [&](const std::string& name) -> const at::Tensor& {
            auto it = in.find(name);
            if (it == in.end())
                throw std::invalid_argument(source + ": missing tensor '" + name + "'");
            return it->second;
        };
        auto mar = pipe_.sampler().transformer();
        const auto dev = device();
        const auto dtype = mar->mask_token.scalar_type();
        StateDict out;
        if (in.count("tokens")) {
            const auto tokens = input("tokens").to(dev, dtype);
            const auto mask = input("mask").to(dev);
            const auto labels = input("labels").to(dev, at::kLong);
            const auto enc = mar->forward_encoder(tokens, mask, mar->class_embedding(labels));
            out["encoder_out"] = enc.to(at::kFloat).cpu();
            out["z"] = mar->forward_decoder(enc, mask).to(at::kFloat).cpu();
        }
        const auto& net = *mar->diffloss->net;
        if (in.count("diff_x")) {
            const auto x = input("diff_x").to(dev, dtype);
            const auto t = input("diff_t").to(dev, at::kLong);
            const auto c = input("diff_c").to(dev, dtype);
            out["diff_out"] = net.forward(x, t, c).to(at::kFloat).cpu();
        }
        if (in.count("diff_z")) {
            const auto z = input("diff_z").to(dev, dtype);
            const double guidance = input("diff_cfg").item<double>();
            const double temp = input("diff_temp").item<double>();
            const at::Tensor scale =
                guidance >= 0 ? at::full({}, guidance, at::TensorOptions(dev).dtype(at::kFloat))
                              : at::Tensor();
            out["diff_sample"] =
                pipe_.sampler()
                    .diffusion()
                    .sample_with_noise(net, z, scale, temp, input("diff_start").to(dev),
                                       input("diff_noise").to(dev))
                    .to(at::kFloat)
                    .cpu();
        }
        return out;
    }

    ModelShape shape() const override {
        const MarConfig& c = cfg();
        ModelShape s;
        s.num_classes = c.class_num;
        s.image_size = c.img_size;
        s.layers = c.encoder_depth + c.decoder_depth;
        s.heads = c.decoder_num_heads;
        s.step_sides = {c.seq_h()};
        s.counts.decoder_blocks = c.decoder_depth;
        return s;
    }

    void validate(const SampleSettings& s) const override { options(s).validate(cfg()); }

    // Per image (2 rows with guidance, else 1): the encoder/decoder activations over the whole
    // sequence (MAR recomputes it every step; QKV, attention output, FFN hidden and GELU,
    // residual and norm copies), LazyMAR's per-layer feature cache as if on, the DiffLoss head
    // on every token of a step (the official 4 noise draws per token, fp32, each residual
    // block's maps). Fixed: the KL-16 decode of one chunk of images at full resolution in fp32
    // (chunked_decode.h; first level 128 channels, about six maps live).
    MemoryEstimate estimate_memory(const SampleSettings& s, const AccelPlan*) const override {
        const MarConfig& c = cfg();
        const auto eb = int64_t(element_bytes());
        const int64_t rows = s.cfg != 1.0 ? 2 : 1, T = c.total_len();
        const int64_t C = std::max(c.encoder_embed_dim, c.decoder_embed_dim);
        const int64_t hidden = int64_t(c.mlp_ratio * double(C));
        const int64_t cache = (c.encoder_depth + c.decoder_depth) * rows * T * C * eb;
        const int64_t head = rows * c.seq_len() * 4 * c.diffloss_w * (6 * c.diffloss_d + 4) * 4;
        MemoryEstimate e;
        e.images = s.images();
        e.per_image = step_activation_bytes(rows, T, C, hidden, eb) + cache + head;
        if (s.decode && pipe_.has_vae()) e.fixed = decode_bytes(128, c.img_size, e.images);
        return e;
    }

    nlohmann::json settings_json(const SampleSettings& s) const override {
        return {{"num_iter", s.num_iter},
                {"cfg", s.cfg},
                {"cfg_schedule", cfg_schedule_name(s.cfg_schedule)},
                {"temperature", s.temperature},
                {"num_sampling_steps", cfg().num_sampling_steps},
                {"diffusion_steps", diffusion_steps()}};
    }

    std::string apply_recommendation(SampleSettings& s,
                                     const std::set<std::string>& given) const override {
        if (path_.empty()) return {};
        const MarSamplingRecommendation rec = read_mar_sampling_recommendation(path_);
        MarSamplingRecommendation used;
        if (rec.num_iter && !given.count("num_iter")) used.num_iter = s.num_iter = *rec.num_iter;
        if (rec.cfg && !given.count("cfg")) used.cfg = s.cfg = *rec.cfg;
        if (rec.cfg_schedule && !given.count("cfg_schedule")) {
            used.cfg_schedule = rec.cfg_schedule;
            s.cfg_schedule = parse_cfg_schedule(*rec.cfg_schedule);
        }
        if (rec.temperature && !given.count("temperature"))
            used.temperature = s.temperature = *rec.temperature;
        // The respacing was fixed at load, from the same recommendation when none was given.
        if (respacing_recommended_) used.num_sampling_steps = cfg().num_sampling_steps;
        return used.describe();
    }

    const std::vector<MethodSpec>& methods() const override { return mar_accel_methods(); }
    const std::map<std::string, nlohmann::json>& presets() const override {
        return mar_accel_presets();
    }
    std::shared_ptr<const AccelPlan> parse_accel(const nlohmann::json& j) const override {
        return std::make_shared<MarAccelPlan>(MarAccelConfig::from_json(j));
    }
    std::shared_ptr<const AccelPlan> accel_from_argument(const std::string& arg) const override {
        return mar_accel_plan(arg);
    }
    bool graphs_possible(const AccelPlan* accel, const SampleSettings& s) const override {
        if (s.count_flops) return false;  // the FLOP counter has no graph form
        const auto hooks = build_mar_accelerators(mar_config_of(accel), cfg());
        return !hooks || hooks->graph_signature().has_value();
    }

    void release_graphs() override { pipe_.sampler().clear_cuda_graphs(); }

    RunResult generate(const SampleSettings& s, const AccelPlan* accel, ProbeSink* probe) override {
        const MarAccelConfig& ac = mar_config_of(accel);
        MarSampleOptions o = options(s);
        LazyMarHooks lazy;  // with LazyMAR's DiffLoss-head caches, when on
        if (ac.any_enabled()) lazy = make_lazymar_hooks(ac.lazymar, cfg(), probe);
        std::shared_ptr<MarSamplingHooks> hooks = lazy.chain;
        std::shared_ptr<MarFlopCounter> counter;
        if (s.count_flops) {
            counter = std::make_shared<MarFlopCounter>(cfg(), diffusion_steps());
            hooks = chain_with_counter(counter, lazy.chain);
        }
        MarSampleResult r = pipe_.generate(o, hooks.get(), probe);

        RunResult out;
        out.images = r.images;
        out.labels = r.labels;
        out.latents = r.latents;
        out.step_tokens = r.decoded;
        out.step_millis = r.step_millis;
        out.decode_millis = r.decode_millis;
        out.total_millis = r.total_millis;
        out.probe_millis = r.probe_millis;
        out.graph_capture_millis = r.graph_capture_millis_call;
        out.attention_flops = r.attention_flops;
        out.cuda_graphs = r.cuda_graphs;
        if (counter) {
            const MarFlops f = counter->flops(r.attention_flops);
            out.flops = f.to_json();
            out.flops["total"] = f.total();
        } else {
            out.flops = {{"attention", r.attention_flops}};
        }
        if (lazy.tokens || lazy.condition) {
            const auto skipped = lazy.skipped_unconditional_steps();
            const auto& stats = lazy.token_stats();
            for (size_t i = 0; i < r.step_millis.size(); ++i) {
                double computed = 1.0;
                bool refresh = true;
                if (i < stats.size()) {
                    double num = 0, den = 0;
                    for (size_t l = 0; l < stats[i].computed.size(); ++l) {
                        num += double(stats[i].computed[l]);
                        den += double(stats[i].total[l]);
                    }
                    computed = den > 0 ? num / den : 1.0;
                    refresh = stats[i].refresh;
                }
                const bool skip =
                    std::find(skipped.begin(), skipped.end(), int64_t(i)) != skipped.end();
                out.step_info.push_back({{"token_refresh", refresh},
                                         {"computed_share", computed},
                                         {"unconditional_skipped", skip}});
            }
        }
        out.tensors = {{"labels", r.labels.cpu()},
                       {"orders", r.orders.cpu()},
                       {"tokens", r.tokens.cpu()},
                       {"latents", r.latents.cpu()}};
        for (size_t i = 0; i < r.decoded.size(); ++i)
            out.tensors["decoded." + std::to_string(i)] = r.decoded[i].cpu();
        return out;
    }

    at::Tensor preview(const at::Tensor& latents) const override {
        if (!pipe_.has_vae()) return {};
        c10::InferenceMode guard;
        return pipe_.decode_latents(latents.narrow(0, 0, 1).to(device()))[0];
    }

    std::vector<nlohmann::json> compare_steps(const RunResult& base,
                                              const RunResult& accel) const override {
        std::vector<nlohmann::json> steps(base.step_millis.size(), nlohmann::json::object());
        for (size_t i = 0; i < steps.size(); ++i)
            steps[i] = i < accel.step_info.size()
                           ? accel.step_info[i]
                           : nlohmann::json{{"token_refresh", true},
                                            {"computed_share", 1.0},
                                            {"unconditional_skipped", false}};
        return steps;
    }
    nlohmann::json compare_summary(const RunResult& base, const RunResult& accel) const override {
        const auto b = base.latents.to(at::kFloat), a = accel.latents.to(at::kFloat);
        const double rel = (a - b).norm().item<double>() / std::max(b.norm().item<double>(), 1e-12);
        return {{"latent_relative_l2", rel}};
    }

    std::vector<AccelRecord> inspector_records(const RunResult& r,
                                               std::vector<AccelRecord> recorded) const override {
        const MarConfig& c = cfg();
        const int64_t side = c.seq_h();
        std::vector<AccelRecord> out;
        // The decode order of the first image per step, as a map of the step that decoded each
        // grid position (-1: still masked).
        const auto step_of = decode_steps(r);
        for (size_t step = 0; step < r.step_tokens.size(); ++step) {
            auto order = at::empty({side, side}, at::kFloat);
            auto* p = order.data_ptr<float>();
            int64_t masked = 0;
            for (size_t i = 0; i < step_of.size(); ++i) {
                const bool done = step_of[i] >= 0 && step_of[i] <= int64_t(step);
                p[i] = done ? float(step_of[i]) : -1.0f;
                masked += done ? 0 : 1;
            }
            AccelRecord rec{"mar", "decode_order", int64_t(step), -1, order, {}};
            rec.values["decoded"] = double(r.step_tokens[step].size(1));
            rec.values["still_masked"] = double(masked);
            out.push_back(std::move(rec));
        }
        for (auto& a : recorded) {
            if (a.kind == probe_kinds::kLazyMarComputedRows) {
                // Sequence rows computed -> (h, w): 1 computed, 0 reused from the cache.
                auto computed = at::zeros({c.total_len()}, at::kFloat);
                computed.index_fill_(0, a.data.to(at::kLong), 1.0);
                a.kind = "lazymar_computed_map";
                a.data = image_map(computed, c.buffer_size, side);
            } else if (a.kind == probe_kinds::kLazyMarSimilarity && a.data.dim() == 1 &&
                       a.data.size(0) == c.total_len()) {
                a.data = image_map(a.data, c.buffer_size, side);
            }
            out.push_back(std::move(a));
        }
        return out;
    }

    std::vector<int64_t> step_map(const RunResult& r, const ScaleRecord& record) const override {
        std::vector<int64_t> map = decode_steps(r);
        for (auto& s : map)
            if (s > record.scale) s = -1;
        return map;
    }

  private:
    const MarConfig& cfg() const { return pipe_.config(); }
    size_t element_bytes() const {
        for (const auto& p : pipe_.sampler().transformer()->parameters()) return p.element_size();
        return 4;
    }
    int64_t diffusion_steps() const { return pipe_.sampler().diffusion().schedule().num_steps(); }
    // Per grid position of the first image, the step that decoded it (-1: never).
    std::vector<int64_t> decode_steps(const RunResult& r) const {
        std::vector<int64_t> step_of(size_t(cfg().seq_len()), -1);
        for (size_t step = 0; step < r.step_tokens.size(); ++step) {
            const auto pos = r.step_tokens[step][0].to(at::kCPU, at::kLong).contiguous();
            for (int64_t i = 0; i < pos.numel(); ++i)
                step_of[size_t(pos.data_ptr<int64_t>()[i])] = int64_t(step);
        }
        return step_of;
    }
    MarSampleOptions options(const SampleSettings& s) const {
        MarSampleOptions o;
        o.class_ids = s.class_ids;
        o.batch = s.batch;
        o.seed = s.seed;
        o.num_iter = s.num_iter;
        o.cfg = s.cfg;
        o.cfg_schedule = s.cfg_schedule;
        o.temperature = s.temperature;
        o.attention = s.attention;
        o.time_steps = s.time_steps;
        o.decode = s.decode;
        o.cuda_graphs = s.cuda_graphs;
        o.cancel = s.cancel;
        return o;
    }

    // mutable: sampling changes the sampler's graphs, not what the model is.
    mutable MarPipeline pipe_;
    std::string path_;
    bool respacing_recommended_;
};

}  // namespace

std::shared_ptr<const AccelPlan> mar_accel_plan(const std::string& arg) {
    return std::make_shared<MarAccelPlan>(arg.empty() ? MarAccelConfig{}
                                                      : MarAccelConfig::from_argument(arg));
}

std::unique_ptr<Runner> mar_runner(MarPipeline pipeline, std::string model_path) {
    return std::make_unique<MarRunner>(std::move(pipeline), std::move(model_path), false);
}

std::unique_ptr<Runner> random_mar_runner(const MarConfig& config, uint64_t seed,
                                          const LoadOptions& options) {
    return mar_runner(MarPipeline::random(config, seed, options));
}

std::unique_ptr<Runner> load_mar_runner(const StateDict& all, const ModelSpec& spec,
                                        const LoadOptions& options) {
    MarModelFiles files;
    files.mar_path = spec.model_path;
    files.vae_path = spec.vae_path;
    files.prefer_ema = spec.prefer_ema;
    bool recommended = false;
    if (!spec.diffusion_steps.empty()) {
        files.num_sampling_steps = spec.diffusion_steps;
    } else {
        // The file's recommended respacing (the small emoji MAR needs more than the official
        // 100). A malformed recommendation does not stop the weights from loading: the front
        // end warns when it applies the recommendation.
        try {
            const auto rec = read_mar_sampling_recommendation(spec.model_path);
            if (rec.num_sampling_steps) files.num_sampling_steps = *rec.num_sampling_steps;
            recommended = rec.num_sampling_steps.has_value();
        } catch (const CheckpointError&) {
        }
    }
    return std::make_unique<MarRunner>(MarPipeline::from_checkpoint(all, files, options),
                                       spec.model_path, recommended);
}

}  // namespace varscope
