// Infinity behind the Runner interface: InfinityPipeline (transformer, BSQ VAE, sampling loop),
// the VAR accelerators through the same hooks (square schedules), the reports' VAR columns
// (identical tokens per scale; a token is a pixel's bits packed into an int64). Text comes as
// precomputed T5 features (SampleSettings::text_features); prompts wait for the T5 encoder.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <map>
#include <string>

#include "core/accel/accel_config.h"
#include "core/infinity_pipeline.h"
#include "core/models/infinity_image_size.h"
#include "core/models/t5_text_encoder.h"
#include "core/runner/runner.h"
#include "core/runner/runner_internal.h"

namespace varscope {
namespace {

const AccelConfig& config_of(const AccelPlan* plan) {
    return scale_accel_config(plan, Family::Infinity);
}

// The official schedule whose scales are `hw` (S, 2), for teacher forcing.
InfinitySchedule schedule_of(const at::Tensor& hw, const std::string& source) {
    if (hw.dim() != 2 || hw.size(1) != 2)
        throw std::invalid_argument(source + ": 'scales' must be (S, 2) token grids (h, w)");
    const auto t = hw.to(at::kLong);
    for (double r : infinity_h_div_w_templates())
        for (const auto& px : infinity_pixel_budgets()) {
            const auto s = infinity_schedule(r, px);
            if (s.num_scales() != t.size(0)) continue;
            bool same = true;
            for (int64_t si = 0; si < s.num_scales() && same; ++si)
                same = s.scales[si][0] == t[si][0].item<int64_t>() &&
                       s.scales[si][1] == t[si][1].item<int64_t>();
            if (same) return s;
        }
    throw std::invalid_argument(source +
                                ": 'scales' is not one of the official Infinity schedules");
}

// One line per distinct prompt that lost words to the text encoder's vocabulary or had none it
// knows (a batch repeats one prompt: one line, not one per image).
void prompt_vocabulary_notices(const std::vector<std::string>& prompts, const TextCondition& c,
                               std::vector<std::string>& notices) {
    std::vector<std::string> seen;
    const bool one = std::all_of(prompts.begin(), prompts.end(),
                                 [&](const std::string& p) { return p == prompts.front(); });
    for (size_t i = 0; i < prompts.size() && i < c.filtered.size(); ++i) {
        const FilteredPrompt& f = c.filtered[i];
        if (!f.changed() && !f.no_known_word) continue;
        if (std::find(seen.begin(), seen.end(), prompts[i]) != seen.end()) continue;
        seen.push_back(prompts[i]);
        const std::string which = one ? "the prompt" : "prompt " + std::to_string(i + 1);
        if (f.no_known_word) {
            notices.push_back(which +
                              " has no word the text encoder was trained on; it is encoded as "
                              "typed (expect an image unrelated to it)");
            continue;
        }
        std::string words;
        for (const auto& w : f.dropped) words += (words.empty() ? "" : ", ") + w;
        notices.push_back(which + ": left out the words the text encoder was never trained on (" +
                          words + ")");
    }
}

class InfinityRunner : public Runner {
  public:
    InfinityRunner(InfinityPipeline pipe, std::string path,
                   std::shared_ptr<T5TextEncoder> t5 = nullptr, bool tf32 = false,
                   InfinityImageSize size = {})
        : pipe_(std::move(pipe)),
          path_(std::move(path)),
          t5_(std::move(t5)),
          tf32_(tf32),
          size_(std::move(size)) {}

    Family family() const override { return Family::Infinity; }
    std::string describe() const override {
        const auto& c = cfg();
        std::string d = "Infinity transformer: depth " + std::to_string(c.depth) + ", width " +
                        std::to_string(c.embed_dim) + ", " + std::to_string(c.num_heads) +
                        " heads, " + std::to_string(c.codebook_dim) + " bits per token";
        d += pipe_.vae ? "\nBSQ VAE: " + pipe_.vae->describe() : "\nno VAE (summed codes only)";
        if (size_.source != "official")
            d += "\nimage size: " + size_.pixels + " (from the " +
                 (size_.source == "metadata" ? "transformer's" : "VAE's") + " metadata)";
        if (t5_) {
            const auto& e = t5_->encoder().config();
            d += "\nT5 encoder: " + std::to_string(e.num_layers) + " layers, width " +
                 std::to_string(e.d_model) +
                 (t5_->options().offload_after_encode ? " (off the GPU between encodings)" : "");
        }
        return d;
    }
    at::Device device() const override { return pipe_.model->pos_start.device(); }
    nlohmann::json config_json() const override { return cfg().to_json(); }
    const std::string& model_path() const override { return path_; }
    bool has_decoder() const override { return static_cast<bool>(pipe_.vae); }
    const char* step_noun() const override { return "scale"; }
    int64_t steps(const SampleSettings& s) const override { return schedule(s).num_scales(); }
    SampleSettings defaults() const override {
        SampleSettings s;  // scripts/infer.sh and run_infinity.py's gen_one_img
        s.cfg = 4.0;
        s.top_k = 900;
        s.top_p = 0.97;
        s.pixels = size_.pixels;  // the size the model was trained for (its file says)
        s.h_div_w = size_.h_div_w;
        return s;
    }

    // Reads 'kv_compact' (sum(lens), Ct5), 'lens' (B), 'x_BLC_wo_prefix' (B, L - 1, d) and
    // 'scales' (S, 2) (an official schedule); writes 'logits' (B, L, 2d).
    StateDict teacher_forward(const StateDict& input, const std::string& source,
                              bool eager) override {
        auto get = [&](const char* name) -> const at::Tensor& {
            auto it = input.find(name);
            if (it == input.end())
                throw std::invalid_argument(source + ": no '" + name + "' tensor");
            return it->second;
        };
        InfinityText text;
        text.kv_compact = get("kv_compact").to(device(), at::kFloat);
        const auto lens = get("lens").to(at::kLong).reshape({-1});
        for (int64_t i = 0; i < lens.numel(); ++i) text.lens.push_back(lens[i].item<int64_t>());
        const auto s = schedule_of(get("scales"), source);
        c10::InferenceMode guard;
        try {
            auto logits =
                pipe_.model->forward_teacher(text, get("x_BLC_wo_prefix").to(device()), s, eager);
            return {{"logits", logits.cpu()}};
        } catch (const std::invalid_argument& e) {
            throw std::invalid_argument(source + ": " + e.what());
        }
    }

    ModelShape shape() const override {
        const auto s = infinity_schedule(size_.h_div_w, size_.pixels);
        ModelShape m;
        m.image_size = s.scales.back()[0] * (pipe_.quant.spatial_patchify ? 2 : 1) *
                       (pipe_.vae ? pipe_.vae->config().patch_size : 16);
        m.layers = cfg().depth;
        m.heads = cfg().num_heads;
        for (const auto& hw : s.scales) m.step_sides.push_back(hw[0]);
        m.counts.scales = s.num_scales();
        m.counts.tokens = s.total_tokens();
        return m;
    }

    void validate(const SampleSettings& s) const override {
        options(s).validate(cfg(), schedule(s));
        if (s.text_features.empty() && s.prompts.empty())
            throw std::invalid_argument(
                "Infinity needs a text: text_features (a T5 features file) or prompts");
        if (s.text_rows < 0)
            throw std::invalid_argument("Infinity: text_rows must be 0 (the text's rows) or more");
    }

    // Per image (2 rows with guidance): the self-attention KV cache of every layer for the whole
    // schedule; the largest scale's activations (QKV, attention output, FFN hidden and GELU,
    // residual and norm copies), its fp32 residual stream and, with eager attention, its fp32
    // scores; the bit logits are small (2 per bit). Fixed: the BSQ decode of one chunk at full
    // resolution in fp32 (the first level's channels, about six maps live) and, on CUDA, the
    // matrix products' workspaces.
    MemoryEstimate estimate_memory(const SampleSettings& s, const AccelPlan* accel) const override {
        MemoryEstimate e = run_estimate(s, accel);
        if (auto_stream_ && device().is_cuda()) e.reclaimable = pipe_.reclaimable_bytes();
        return e;
    }

    // ModelSpec::kStreamBlocksAuto: before each run on CUDA, stream as many blocks as the run
    // needs to fit the free memory (none while it fits).
    void set_auto_stream(bool on) { auto_stream_ = on; }

    // What a run needs beyond the resident weights (the weights streaming can give back aside).
    MemoryEstimate run_estimate(const SampleSettings& s, const AccelPlan* accel) const {
        const auto& c = cfg();
        const InfinitySchedule sch = schedule(s);
        int64_t n = 0;
        for (const auto& hw : sch.scales) n = std::max(n, hw[0] * hw[1]);
        const int64_t eb = pipe_.model->autocast_bf16() ? 2 : 4;  // the KV cache's element
        int64_t L = sch.total_tokens(), L_most = L;
        if (accel && config_of(accel).any_enabled())  // a bounded KV cache (AMS-KV) holds less
            if (const auto view = infinity_hook_view(c, sch))
                if (const auto hooks = build_accelerators(config_of(accel), *view)) {
                    L_most = std::min(L, hooks->kv_tokens_bound(*view));
                    L = std::min(L_most, hooks->kv_tokens_least(*view));
                }
        const int64_t rows = s.cfg != 1.0 ? 2 : 1, C = c.embed_dim;
        MemoryEstimate e;
        e.images = s.images();
        e.per_image =
            kv_cache_bytes(c.depth, rows, L, C, eb) +
            step_activation_bytes(rows, n, C, c.mlp_hidden, eb) +
            fp32_stream_bytes(rows, n, C, kFp32StreamCopies) +
            (s.attention == AttentionBackend::Eager ? eager_score_bytes(rows, c.num_heads, n, L)
                                                    : 0) +
            logit_bytes(rows, n, c.vocab());
        if (L_most > L)
            e.per_image_most = e.per_image + kv_cache_bytes(c.depth, rows, L_most - L, C, eb);
        if (s.decode && pipe_.vae) {
            const auto& v = pipe_.vae->config();
            const int64_t side =
                sch.scales.back()[0] * (pipe_.quant.spatial_patchify ? 2 : 1) * v.patch_size;
            e.fixed = decode_bytes(v.base_ch * v.decoder_ch_mult.front(), side, e.images);
        }
        if (device().is_cuda()) e.fixed += kMatmulWorkspaceBytes;
        return e;
    }

    void release_graphs() override {
        if (pipe_.sampler) pipe_.sampler->release_graphs();
        hooks_.clear();
    }

    nlohmann::json settings_json(const SampleSettings& s) const override {
        return {{"cfg", s.cfg},
                {"tau", s.tau},
                {"top_k", s.top_k},
                {"top_p", s.top_p},
                {"h_div_w", s.h_div_w},
                {"pixels", s.pixels},
                {"cfg_insertion_layer", s.cfg_insertion_layer},
                // Whether prompts lose the words the text encoder never saw ("none": its
                // folder lists no words, so they pass unchanged either way).
                {"unknown_words", !t5_ || !t5_->vocabulary() ? "none"
                                  : s.keep_unknown_words     ? "kept"
                                                             : "left out"}};
    }
    std::string apply_recommendation(SampleSettings&, const std::set<std::string>&) const override {
        return {};
    }

    const std::vector<MethodSpec>& methods() const override { return accel_methods(); }
    const std::map<std::string, nlohmann::json>& presets() const override {
        return infinity_accel_presets();  // the VAR presets and the papers' Infinity settings
    }
    std::shared_ptr<const AccelPlan> parse_accel(const nlohmann::json& j) const override {
        return std::make_shared<ScaleAccelPlan>(Family::Infinity, AccelConfig::from_json(j));
    }
    std::shared_ptr<const AccelPlan> accel_from_argument(const std::string& arg) const override {
        return infinity_accel_plan(arg);
    }
    // The loop's graph rules (InfinitySampleOptions::cuda_graphs): guidance, a square schedule,
    // hooks with a graph signature and no compact KV cache.
    bool graphs_possible(const AccelPlan* accel, const SampleSettings& s) const override {
        const auto view = infinity_hook_view(cfg(), schedule(s));
        if (!view || s.cfg == 1.0) return false;
        const auto hooks = build_accelerators(config_of(accel), *view);
        return !hooks ||
               (hooks->graph_signature(*view).has_value() && !hooks->compact_kv_cache(*view));
    }

    RunResult generate(const SampleSettings& s, const AccelPlan* accel, ProbeSink* probe) override {
        validate(s);
        const auto sched = schedule(s);
        std::shared_ptr<SamplingHooks> hooks;
        const auto& ac = config_of(accel);
        if (ac.any_enabled()) {
            const auto view = infinity_hook_view(cfg(), sched);
            if (!view)
                throw std::invalid_argument(
                    "Infinity: accelerators need a square schedule (h_div_w 1) for now");
            hooks = hooks_for(ac, *view, probe);
        }
        std::vector<std::string> notices;
        if (auto_stream_ && device().is_cuda()) stream_to_fit(s, accel, notices);
        const auto out = pipe_.generate(text(s, &notices), sched, options(s), hooks.get(), probe,
                                        s.decode, t5_ && t5_->options().offload_after_encode);
        const auto& r = out.sample;
        RunResult res;
        res.images = out.images;
        res.labels = at::full({static_cast<int64_t>(r.summed_codes.size(0))}, -1, at::kLong);
        res.latents = r.summed_codes;
        res.step_tokens = r.tokens;
        res.step_millis = r.scale_millis;
        // Scales a hook skipped: no tokens (-1), as the VAR loop reports them, so that runs
        // with and without skipping compare scale by scale.
        const int64_t rows = res.labels.size(0);
        const auto opts = at::TensorOptions().dtype(at::kLong).device(
            res.step_tokens.empty() ? at::Device(at::kCPU) : res.step_tokens[0].device());
        for (size_t si = res.step_tokens.size(); si < sched.scales.size(); ++si) {
            res.step_tokens.push_back(
                at::full({rows, sched.scales[si][0] * sched.scales[si][1]}, -1, opts));
            res.step_millis.push_back(0.0);
        }
        res.decode_millis = out.decode_millis;
        res.total_millis = r.total_millis + out.decode_millis;
        res.kv_bytes = r.kv_bytes;
        res.kv_bytes_peak = r.kv_bytes_peak;
        res.cuda_graphs = r.cuda_graphs;
        res.notices = std::move(notices);
        res.graph_capture_millis = r.graph_capture_millis;
        res.attention_flops = r.attention_flops;
        res.step_costs = r.step_costs;
        res.flops = {{"attention", r.attention_flops}, {"total", r.attention_flops}};
        for (size_t si = 0; si < r.bits.size(); ++si)
            res.tensors["bits." + std::to_string(si)] = r.bits[si].cpu();
        res.tensors["summed_codes"] = r.summed_codes.cpu();
        return res;
    }

    at::Tensor preview(const at::Tensor& f_hat) const override {
        if (!pipe_.vae || !f_hat.defined()) return {};
        c10::InferenceMode guard;
        BsqVae vae = pipe_.vae;
        return vae->decode_01(f_hat.narrow(0, 0, 1).to(device()))[0];
    }

    std::vector<nlohmann::json> compare_steps(const RunResult& base,
                                              const RunResult& accel) const override {
        return scale_compare_steps(base, accel);
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
    const InfinityConfig& cfg() const { return pipe_.model->config(); }
    void stream_to_fit(const SampleSettings& s, const AccelPlan* accel,
                       std::vector<std::string>& notices) {
        const int64_t available = available_memory(device());
        if (available < 0) return;
        const int64_t before = pipe_.streamed_blocks();
        const auto usable = static_cast<int64_t>(static_cast<double>(available) * kMemoryHeadroom);
        const int64_t now = pipe_.stream_to_fit(run_estimate(s, accel).bytes(), usable);
        if (now > before)
            notices.push_back("low-memory mode: the last " + std::to_string(now) + " of " +
                              std::to_string(cfg().depth) +
                              " transformer blocks stream from host memory from now on, to fit "
                              "the free device memory (same images, slower)");
    }

    static InfinitySchedule schedule(const SampleSettings& s) {
        return infinity_schedule(s.h_div_w, s.pixels);
    }
    InfinitySampleOptions options(const SampleSettings& s) const {
        InfinitySampleOptions o;
        o.seed = s.seed;
        o.cfg = s.cfg;
        o.tau = s.tau;
        o.top_k = s.top_k;
        o.top_p = s.top_p;
        o.cfg_insertion_layer = s.cfg_insertion_layer;
        o.attention = s.attention;
        o.time_scales = s.time_steps;
        o.time_parts = s.time_parts;
        o.cuda_graphs = s.cuda_graphs;
        o.tf32 = tf32_;
        o.cancel = s.cancel;
        return o;
    }
    // Without a probe, one hooks object per accelerator config and schedule, kept until
    // release_graphs(): graphs captured with a hooks object are replayed only with that object
    // (DenseGraphKey::hooks_instance), as in the VAR runner.
    std::shared_ptr<SamplingHooks> hooks_for(const AccelConfig& config, const VarConfig& view,
                                             ProbeSink* probe) {
        if (probe) return build_accelerators(config, view, probe);
        std::string key = config.to_json().dump();
        for (int64_t p : view.patch_nums) key += "," + std::to_string(p);
        auto it = hooks_.find(key);
        if (it == hooks_.end()) it = hooks_.emplace(key, build_accelerators(config, view)).first;
        return it->second;
    }
    // The rows' text features; `notices` (may be null) gets a line per prompt that was cut to the
    // tokenizer's limit (max_length tokens with EOS, as the official encode_prompt truncates).
    InfinityText text(const SampleSettings& s, std::vector<std::string>* notices = nullptr) const {
        if (!s.prompts.empty() && !s.text_features.empty())
            throw std::invalid_argument("Infinity: pass prompts or a text features file, not both");
        InfinityText t;
        if (!s.prompts.empty()) {
            if (!t5_)
                throw std::invalid_argument(
                    "Infinity: prompts need the T5 text encoder (its Hugging Face folder: --t5 "
                    "DIR), or pass precomputed text features");
            c10::InferenceMode guard;
            TextCondition c = t5_->encode(s.prompts, s.keep_unknown_words);
            for (size_t i = 0; notices && i < c.truncated.size(); ++i)
                if (c.truncated[i])
                    notices->push_back("prompt " + std::to_string(i + 1) +
                                       " is longer than the text encoder's limit of " +
                                       std::to_string(t5_->options().tokenizer.max_length) +
                                       " tokens: cut to fit, as the official encode_prompt does");
            if (notices) prompt_vocabulary_notices(s.prompts, c, *notices);
            t.kv_compact = c.kv_compact;
            t.lens = c.lens;
        } else {
            t = load_text_features(s.text_features);
        }
        if (s.text_rows > 0) t = repeat_text_rows(t, s.text_rows);
        t.kv_compact = t.kv_compact.to(device(), at::kFloat);
        return t;
    }

    InfinityPipeline pipe_;
    std::string path_;
    std::shared_ptr<T5TextEncoder> t5_;  // null: text features files only
    bool tf32_ = false;
    InfinityImageSize size_;  // the defaults' pixels and aspect ratio
    std::map<std::string, std::shared_ptr<SamplingHooks>> hooks_;
    bool auto_stream_ = false;
};

}  // namespace

std::shared_ptr<const AccelPlan> infinity_accel_plan(const std::string& arg) {
    return scale_accel_plan(Family::Infinity, arg);
}

std::unique_ptr<Runner> infinity_runner(InfinityPipeline pipeline, std::string model_path) {
    return std::make_unique<InfinityRunner>(std::move(pipeline), std::move(model_path));
}

namespace {

std::shared_ptr<T5TextEncoder> open_text_encoder(const std::string& folder, bool offload,
                                                 const at::Device& device,
                                                 const InfinityConfig& model,
                                                 const std::string& model_name) {
    if (folder.empty()) return nullptr;
    T5TextEncoderOptions o;
    o.encoder.device = device;
    o.offload_after_encode = offload && device.is_cuda();
    auto t5 = std::make_shared<T5TextEncoder>(folder, o);
    if (t5->encoder().config().d_model != model.text_channels)
        throw std::invalid_argument(folder + ": a T5 of width " +
                                    std::to_string(t5->encoder().config().d_model) +
                                    " does not fit " + model_name +
                                    ", which takes text "
                                    "features of width " +
                                    std::to_string(model.text_channels));
    return t5;
}

// Infinity runs in fp32 (tf32 allowed) or in the official bf16 mode ("bf16" and
// "bf16-autocast" both mean it: bf16 blocks under autocast, InfinityTransformerImpl::
// use_autocast_bf16). fp16 has no official counterpart.
void check_precision(const LoadOptions& options, const std::string& what) {
    if (options.precision == Precision::Fp16)
        throw std::invalid_argument(what +
                                    " is an Infinity model: precision fp32, tf32 or bf16 (the "
                                    "official bf16 mode); fp16 is not supported");
}

// Before the model moves to the device (see InfinityPipeline::from_weights).
bool bf16_blocks(const LoadOptions& options) {
    return options.precision == Precision::Bf16;
}

// ModelSpec::stream_blocks on a new pipeline, before the T5 takes device memory: a count streams
// now; kStreamBlocksAuto streams nothing yet and returns true (the runner streams before each run).
bool apply_stream_blocks(InfinityPipeline& pipe, int64_t stream_blocks) {
    if (stream_blocks == ModelSpec::kStreamBlocksAuto) return true;
    pipe.stream_blocks(stream_blocks);
    return false;
}

}  // namespace

std::unique_ptr<Runner> load_infinity_runner(const StateDict& all, const ModelSpec& spec,
                                             const LoadOptions& options) {
    check_precision(options, spec.model_path);
    const at::Device device = parse_device(options.device);
    auto pipe = InfinityPipeline::from_weights(all, spec.model_path, spec.vae_path, device,
                                               bf16_blocks(options));
    pipe.sampler->set_exec_policy(options.exec);
    const bool auto_stream = apply_stream_blocks(pipe, spec.stream_blocks);
    auto t5 = open_text_encoder(spec.text_encoder_path, spec.text_encoder_offload, device,
                                pipe.model->config(), spec.model_path);
    auto runner = std::make_unique<InfinityRunner>(
        std::move(pipe), spec.model_path, std::move(t5), options.tf32,
        read_infinity_image_size(spec.model_path, spec.vae_path));
    runner->set_auto_stream(auto_stream);
    return runner;
}

std::unique_ptr<Runner> random_infinity_runner(const InfinityConfig& config,
                                               const BsqVaeConfig& vae, uint64_t seed,
                                               const LoadOptions& options,
                                               const std::string& text_encoder_path,
                                               bool text_encoder_offload, int64_t stream_blocks) {
    check_precision(options, "--random");
    const at::Device device = parse_device(options.device);
    auto model = random_infinity(config, seed);
    if (bf16_blocks(options)) model->use_autocast_bf16();
    model->to(device);
    model->eval();
    BsqVae v(BsqVaeImpl::random(vae, seed + 1));
    v->to(device);
    v->eval();
    auto pipe = InfinityPipeline::from(model, v);
    // The execution policy reaches the loop (kernel paths, fused RoPE, graph pools): before
    // session 29 it was never passed on, so VARSCOPE_REFERENCE_KERNELS / VARSCOPE_FUSED_ROPE
    // changed nothing for Infinity (seen on the H200: RoPE "off" timed the fused kernel).
    pipe.sampler->set_exec_policy(options.exec);
    const bool auto_stream = apply_stream_blocks(pipe, stream_blocks);
    auto t5 = open_text_encoder(text_encoder_path, text_encoder_offload, device, config,
                                "a random Infinity");
    auto runner =
        std::make_unique<InfinityRunner>(std::move(pipe), "", std::move(t5), options.tf32);
    runner->set_auto_stream(auto_stream);
    return runner;
}

}  // namespace varscope
