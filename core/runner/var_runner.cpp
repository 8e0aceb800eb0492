// VAR behind the Runner interface: VarPipeline, its accelerators (core/accel/accel_config.h)
// and the reports' VAR columns (identical tokens per scale).
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include "core/accel/accel_config.h"
#include "core/models/sampling_recommendation.h"
#include "core/models/var_teacher_input.h"
#include "core/runner/runner.h"
#include "core/runner/runner_internal.h"

namespace varscope {
namespace {

const AccelConfig& var_config_of(const AccelPlan* plan) {
    return scale_accel_config(plan, Family::Var);
}

class VarRunner : public Runner {
  public:
    VarRunner(VarPipeline pipe, std::string path)
        : pipe_(std::move(pipe)), path_(std::move(path)) {}

    Family family() const override { return Family::Var; }
    std::string describe() const override { return pipe_.describe(); }
    at::Device device() const override { return pipe_.device(); }
    nlohmann::json config_json() const override { return cfg().to_json(); }
    const std::string& model_path() const override { return path_; }
    bool has_decoder() const override { return true; }
    const char* step_noun() const override { return "scale"; }
    int64_t steps(const SampleSettings&) const override { return cfg().num_scales(); }
    SampleSettings defaults() const override { return {}; }  // cfg 4, top-k 900, top-p 0.95

    StateDict teacher_forward(const StateDict& input, const std::string& source,
                              bool eager) override {
        const VarTeacherInput in = check_var_teacher_input(input, cfg(), source);
        const auto dev = device();
        std::vector<at::Tensor> idx;
        for (const auto& t : in.tokens) idx.push_back(t.to(dev));
        c10::InferenceMode guard;
        auto x = pipe_.sampler().vqvae()->idx_to_var_input(idx);
        auto logits = pipe_.sampler().transformer()->forward_teacher(in.labels.to(dev), x, eager);
        return {{"logits", logits.cpu()}, {"x_BLCv", x.to(at::kFloat).cpu()}};
    }

    ModelShape shape() const override {
        const VarConfig& v = cfg();
        ModelShape s;
        s.num_classes = v.num_classes;
        s.image_size = v.patch_nums.back() * pipe_.vae_config().downsample();
        s.layers = v.depth;
        s.heads = v.num_heads;
        s.step_sides = v.patch_nums;
        s.counts.scales = v.num_scales();
        s.counts.tokens = v.total_tokens();
        return s;
    }

    void validate(const SampleSettings& s) const override { options(s).validate(cfg()); }

    // Per image (2 rows: the conditional and the guidance row): the KV cache of every layer
    // for the whole schedule (a method that evicts: the least it keeps, and the most in
    // per_image_most); the largest scale's activations (QKV, attention output, FFN
    // hidden and GELU, residual and norm copies) and, with eager attention, its fp32 scores;
    // its fp32 logits with the sampler's softmax and top-k copies. Under bf16-autocast the cache
    // and the products are bf16 (the compute dtype, not the fp32 weights') beside an fp32
    // residual stream, as in Infinity's loop. Fixed: the VQVAE decode of
    // one chunk of images at full resolution in fp32 (chunked_decode.h; the first level's
    // channels, about six maps of them live in a residual block with upsampling).
    MemoryEstimate estimate_memory(const SampleSettings& s, const AccelPlan* accel) const override {
        const VarConfig& c = cfg();
        const VqvaeConfig& q = pipe_.vae_config();
        const auto eb = int64_t(element_bytes());
        const auto hooks = accel ? build_accelerators(var_config_of(accel), c) : nullptr;
        const int64_t rows = 2, C = c.embed_dim,
                      L = hooks ? hooks->kv_tokens_least(c) : c.total_tokens(),
                      L_most = hooks ? hooks->kv_tokens_bound(c) : L;
        const int64_t pn = c.patch_nums.back(), n = pn * pn;
        const int64_t hidden = int64_t(c.mlp_ratio * double(C));
        MemoryEstimate e;
        e.images = s.images();
        e.per_image =
            kv_cache_bytes(c.depth, rows, L, C, eb) +
            step_activation_bytes(rows, n, C, hidden, eb) +
            (s.attention == AttentionBackend::Eager ? eager_score_bytes(rows, c.num_heads, n, L)
                                                    : 0) +
            logit_bytes(rows, n, c.vocab_size) +
            (pipe_.sampler().transformer()->autocast_bf16()
                 ? fp32_stream_bytes(rows, n, C, kFp32StreamCopies)
                 : 0);
        if (L_most > L)
            e.per_image_most = e.per_image + kv_cache_bytes(c.depth, rows, L_most - L, C, eb);
        if (s.decode)
            e.fixed = decode_bytes(q.ch * q.ch_mult.front(), pn * q.downsample(), e.images);
        return e;
    }

    nlohmann::json settings_json(const SampleSettings& s) const override {
        nlohmann::json j = {{"cfg", s.cfg}, {"top_k", s.top_k}, {"top_p", s.top_p}};
        if (s.more_smooth) j["more_smooth"] = true;
        return j;
    }

    std::string apply_recommendation(SampleSettings& s,
                                     const std::set<std::string>& given) const override {
        if (path_.empty()) return {};
        const SamplingRecommendation rec = read_sampling_recommendation(path_);
        SamplingRecommendation used;
        if (rec.cfg && !given.count("cfg")) used.cfg = s.cfg = *rec.cfg;
        if (rec.top_k && !given.count("top_k")) used.top_k = s.top_k = *rec.top_k;
        if (rec.top_p && !given.count("top_p")) used.top_p = s.top_p = *rec.top_p;
        return used.describe();
    }

    const std::vector<MethodSpec>& methods() const override { return accel_methods(); }
    const std::map<std::string, nlohmann::json>& presets() const override {
        return accel_presets();
    }
    std::shared_ptr<const AccelPlan> parse_accel(const nlohmann::json& j) const override {
        return std::make_shared<ScaleAccelPlan>(Family::Var, AccelConfig::from_json(j));
    }
    std::shared_ptr<const AccelPlan> accel_from_argument(const std::string& arg) const override {
        return var_accel_plan(arg);
    }
    bool graphs_possible(const AccelPlan* accel, const SampleSettings&) const override {
        const auto hooks = build_accelerators(var_config_of(accel), cfg());
        return !hooks || hooks->graph_signature(cfg()).has_value();
    }

    void release_graphs() override {
        pipe_.sampler().clear_cuda_graphs();
        hooks_.clear();
    }

    RunResult generate(const SampleSettings& s, const AccelPlan* accel, ProbeSink* probe) override {
        const auto hooks = hooks_for(var_config_of(accel), probe);
        VarSampleResult r = pipe_.generate(options(s), hooks.get(), probe);
        RunResult out;
        out.images = r.images;
        out.labels = r.labels;
        out.latents = r.f_hat;
        out.step_tokens = r.tokens;
        out.step_millis = r.scale_millis;
        out.decode_millis = r.decode_millis;
        out.total_millis = r.total_millis;
        out.probe_millis = r.probe_millis;
        out.graph_capture_millis = r.graph_capture_millis;
        out.kv_bytes = r.kv_bytes;
        out.kv_bytes_peak = r.kv_bytes_peak;
        out.attention_flops = r.attention_flops;
        out.cuda_graphs = r.cuda_graphs;
        out.step_costs = r.step_costs;
        out.flops = {{"attention", r.attention_flops}, {"total", r.attention_flops}};
        out.tensors["labels"] = r.labels.cpu();
        for (size_t si = 0; si < r.tokens.size(); ++si)
            out.tensors["tokens." + std::to_string(si)] = r.tokens[si].cpu();
        return out;
    }

    at::Tensor preview(const at::Tensor& f_hat) const override {
        c10::InferenceMode guard;
        auto vae = pipe_.sampler().vqvae();
        return vae->decode(f_hat.narrow(0, 0, 1).to(device()))[0].add(1).mul(0.5);
    }

    std::vector<nlohmann::json> compare_steps(const RunResult& base,
                                              const RunResult& accel) const override {
        return scale_compare_steps(base, accel, cfg().patch_nums);
    }
    nlohmann::json compare_summary(const RunResult&, const RunResult&) const override {
        return nlohmann::json::object();
    }

    std::vector<AccelRecord> inspector_records(const RunResult&,
                                               std::vector<AccelRecord> recorded) const override {
        return recorded;
    }
    std::vector<int64_t> step_map(const RunResult&, const ScaleRecord& record) const override {
        return first_image_tokens(record);
    }

  private:
    const VarConfig& cfg() const { return pipe_.var_config(); }
    // The accelerators' hooks for a run. CUDA graphs replay on the buffers of the hooks object
    // they were captured with (hooks.h, instance_id), so runs without a probe reuse one object
    // per config: its graphs are captured once, as the baseline's are. Hooks reset their per-run
    // state at the first scale. A probe's hooks are built afresh (they hold the probe).
    std::shared_ptr<SamplingHooks> hooks_for(const AccelConfig& config, ProbeSink* probe) {
        if (probe) return build_accelerators(config, cfg(), probe);
        const std::string key = config.to_json().dump();
        auto it = hooks_.find(key);
        if (it == hooks_.end()) it = hooks_.emplace(key, build_accelerators(config, cfg())).first;
        return it->second;
    }
    // The KV cache's and the activations' element: the matrix products' dtype (bf16 under
    // bf16-autocast, whose stream and first parameters stay fp32: counting those doubled the
    // estimate, session 41).
    size_t element_bytes() const {
        return c10::elementSize(pipe_.sampler().transformer()->compute_dtype());
    }
    VarSampleOptions options(const SampleSettings& s) const {
        VarSampleOptions o;
        o.class_ids = s.class_ids;
        o.batch = s.batch;
        o.seed = s.seed;
        o.cfg = s.cfg;
        o.top_k = s.top_k;
        o.top_p = s.top_p;
        o.more_smooth = s.more_smooth;
        o.attention = s.attention;
        o.time_scales = s.time_steps;
        o.time_parts = s.time_parts;
        o.decode = s.decode;
        o.cuda_graphs = s.cuda_graphs;
        o.cancel = s.cancel;
        return o;
    }

    // mutable: generating changes the sampler's graph cache, not what the model is.
    mutable VarPipeline pipe_;
    std::map<std::string, std::shared_ptr<SamplingHooks>> hooks_;  // per config, no probe
    std::string path_;
};

}  // namespace

std::shared_ptr<const AccelPlan> var_accel_plan(const std::string& arg) {
    return scale_accel_plan(Family::Var, arg);
}

std::unique_ptr<Runner> var_runner(VarPipeline pipeline, std::string model_path) {
    return std::make_unique<VarRunner>(std::move(pipeline), std::move(model_path));
}

std::unique_ptr<Runner> random_var_runner(const VarConfig& var, const VqvaeConfig& vae,
                                          uint64_t seed, const LoadOptions& options) {
    return var_runner(VarPipeline::random(var, vae, seed, options));
}

std::unique_ptr<Runner> load_var_runner(StateDict weights, const ModelSpec& spec,
                                        const LoadOptions& options) {
    VarModelFiles files{spec.model_path, spec.vae_path, spec.patch_nums};
    if (files.vae_path.empty())
        throw std::invalid_argument(spec.model_path +
                                    " is a VAR model: it needs its "
                                    "multi-scale VQVAE (--vae)");
    return var_runner(VarPipeline::from_weights(std::move(weights), files, options),
                      spec.model_path);
}

}  // namespace varscope
