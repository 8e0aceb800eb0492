#include "ui/engine/engine.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <sstream>

#include "app/exec_env/exec_env.h"
#include "core/accel/accel_config.h"
#include "core/accel/mar_accel_config.h"
#include "core/analysis/attention_analysis.h"
#include "core/analysis/method_masks.h"
#include "core/metrics/image_metrics.h"
#include "core/resources.h"
#include "core/runner/batch_search.h"  // is_out_of_memory
#include "core/runner/runner.h"
#include "core/text/sentencepiece_tokenizer.h"
#include "kernels/memory_stats.h"
#include "ui/engine/engine_convert.h"

namespace varscope::gui {
namespace {

// Records everything and reports each finished step with its preview (the image so far, kept
// for the filmstrip so it is decoded once).
class ProgressRecorder : public ProbeRecorder {
  public:
    ProgressRecorder(Selection sel, const ProgressFn& progress, int64_t steps, const Runner& runner)
        : ProbeRecorder(std::move(sel)), progress_(progress), steps_(steps), runner_(runner) {}
    void on_scale(ScaleRecord r) override {
        const int64_t step = r.scale;
        RgbImage preview;
        if (r.f_hat.defined()) {
            const at::Tensor image = runner_.preview(r.f_hat);
            if (image.defined()) preview = to_rgb(image);
        }
        ProbeRecorder::on_scale(std::move(r));
        if (progress_) progress_(step, steps_, preview);
        previews_[step] = std::move(preview);
    }
    RgbImage preview(int64_t step) const {
        const auto it = previews_.find(step);
        return it == previews_.end() ? RgbImage{} : it->second;
    }

  private:
    const ProgressFn& progress_;
    int64_t steps_;
    const Runner& runner_;
    std::map<int64_t, RgbImage> previews_;
};

// The kept set of the recorded attention layer at every scale, from the accelerated run's
// records (what its overlay dims). Empty where the masks cannot be read: the run itself stands.
std::vector<MaskOutput> masks_of(const Runner& runner, const AccelPlan& plan,
                                 const ProbeRecorder& rec, int64_t layer) {
    std::vector<MaskOutput> out;
    if (runner.family() == Family::Mar || layer < 0) return out;
    const ModelShape shape = runner.shape();
    if (layer >= shape.layers) return out;
    const analysis::ScheduleLayout layout{shape.step_sides, shape.layers, shape.heads};
    try {
        const auto set = analysis::masks_of_run(AccelConfig::from_json(plan.to_json()), rec.accel(),
                                                rec.scales(), layout);
        for (int64_t s = 0; s < static_cast<int64_t>(layout.sides.size()); ++s) {
            MaskOutput m;
            m.scale = s;
            m.layer = layer;
            m.queries = layout.tokens(s);
            m.keys = layout.tokens_through(s);
            const at::Tensor kept =
                analysis::dense_keep(set.at(s, layer), shape.heads, m.queries, m.keys)
                    .to(at::kByte)
                    .contiguous();
            m.heads = kept.size(0);
            m.kept.assign(kept.data_ptr<uint8_t>(), kept.data_ptr<uint8_t>() + kept.numel());
            out.push_back(std::move(m));
        }
    } catch (const std::exception&) {
        out.clear();
    }
    return out;
}

}  // namespace

const analysis::HeadMeasures* AnalysisOutput::find(int64_t scale, int64_t layer,
                                                   int64_t head) const {
    for (const auto& r : records)
        if (r.scale == scale && r.layer == layer && r.head == head) return &r;
    return nullptr;
}

const std::vector<std::string>& model_precisions() {
    static const std::vector<std::string> names{"fp32", "bf16", "fp16"};
    return names;
}

std::string model_precision_names() {
    const auto& names = model_precisions();
    std::string out;
    for (size_t i = 0; i < names.size(); ++i)
        out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
    return out;
}

bool is_model_precision(const std::string& name) {
    const auto& names = model_precisions();
    return std::find(names.begin(), names.end(), name) != names.end();
}

std::string ModelSource::key() const {
    // The diffusion respacing is fixed when a MAR model loads, so it is part of the key.
    const std::string steps = diffusion_steps.empty() ? "" : "|steps" + diffusion_steps;
    const std::string where = "|" + device + "|" + precision;
    switch (kind) {
        case Kind::Embedded:
            return std::string("embedded|") + family_id(family) + steps + where;
        case Kind::Files:
            return "files|" + var_path + "|" + vae_path + (t5_path.empty() ? "" : "|" + t5_path) +
                   (low_memory ? "|low-memory" : "") + steps + where;
        case Kind::Custom:
            return "custom|" + custom_name + where;
    }
    return {};
}

std::string ModelSource::display_name() const {
    switch (kind) {
        case Kind::Embedded:
            return family == Family::Mar        ? "Embedded emoji MAR"
                   : family == Family::Infinity ? "Embedded emoji text-to-image"
                                                : "Embedded emoji VAR";
        case Kind::Files:
            return std::filesystem::path(var_path).filename().string();
        case Kind::Custom:
            return custom_name;
    }
    return {};
}

std::string GenerationSettings::baseline_key(const std::string& model_key) const {
    // Every field by name, bound at once: a field added to GenerationSettings breaks this
    // binding until it is placed here, in the key or (accelerated side only) out of it.
    const auto& [class_id_, prompt_, keep_unknown_words_, seed_, cfg_, top_k_, top_p_, num_iter_,
                 cfg_schedule_, temperature_, accel_json_, attention_layer_, filmstrip_,
                 accel_records_, cuda_graphs_] = *this;
    // The accelerated side's part: its config and whether its hooks record.
    (void)accel_json_;
    (void)accel_records_;
    // JSON keeps the doubles' every digit (a stream's default 6 digits gave cfg 4.0000001 the
    // key of 4.0) and names each value, so no two fields can run together.
    const nlohmann::json key = {{"class_id", class_id_},
                                {"prompt", prompt_},
                                {"keep_unknown_words", keep_unknown_words_},
                                {"seed", seed_},
                                {"cfg", cfg_},
                                {"top_k", top_k_},
                                {"top_p", top_p_},
                                {"num_iter", num_iter_},
                                {"cfg_schedule", cfg_schedule_},
                                {"temperature", temperature_},
                                {"attention_layer", attention_layer_},
                                {"filmstrip", filmstrip_},
                                {"cuda_graphs", cuda_graphs_}};
    return model_key + "|" + key.dump();
}

Engine::Engine() : exec_(exec_env::policy_from_environment()) {}
Engine::~Engine() = default;

bool Engine::loaded() const {
    return runner_ != nullptr;
}

void Engine::load(const ModelSource& source) {
    if (source.kind == ModelSource::Kind::Custom)
        throw std::invalid_argument("a custom model must be installed with set_runner()");
    ModelSpec spec;
    spec.embedded = source.family;
    if (source.kind == ModelSource::Kind::Files) {
        spec.model_path = source.var_path;
        spec.vae_path = source.vae_path;
        spec.text_encoder_path = source.t5_path;
        spec.text_encoder_offload = source.low_memory;
        spec.stream_blocks = source.low_memory ? ModelSpec::kStreamBlocksAuto : 0;
        if (spec.vae_path.empty() && detect_runner_family(spec.model_path) == Family::Mar)
            throw std::invalid_argument(source.var_path +
                                        " is a MAR model: it needs its KL VAE (e.g. kl16.ckpt) "
                                        "to make images; open the pair again with the VAE file");
    }
    spec.diffusion_steps = source.diffusion_steps;
    LoadOptions opt = load_options(source.device, source.precision);
    opt.exec = exec_;
    auto runner = open_runner(spec, opt);
    // Known once the file is read (a second read would double a large model's load).
    if (runner->family() == Family::Infinity && source.kind == ModelSource::Kind::Files &&
        (spec.vae_path.empty() || spec.text_encoder_path.empty()))
        throw std::invalid_argument(source.var_path +
                                    " is an Infinity (text-to-image) model: open it with its BSQ "
                                    "VAE and its T5 encoder folder (config.json, "
                                    "model.safetensors, spiece.model)");
    set_runner(std::move(runner), source);
    if (info_.text_to_image()) {
        const std::string t5 = source.kind == ModelSource::Kind::Embedded
                                   ? embedded_t2i_files().text_encoder_path
                                   : source.t5_path;
        spiece_path_ = (std::filesystem::path(t5) / "spiece.model").string();
    }
}

void Engine::set_pipeline(std::unique_ptr<VarPipeline> pipeline, const ModelSource& source) {
    set_runner(var_runner(std::move(*pipeline)), source);
}

void Engine::set_mar_pipeline(std::unique_ptr<MarPipeline> pipeline, const ModelSource& source) {
    set_runner(mar_runner(std::move(*pipeline)), source);
}

void Engine::set_runner(std::unique_ptr<Runner> runner, const ModelSource& source) {
    runner_ = std::move(runner);
    spiece_path_.clear();  // load() sets it for a text-to-image model
    key_ = source.key();
    const ModelShape shape = runner_->shape();
    info_ = {};
    info_.family = runner_->family();
    info_.description = runner_->describe();
    info_.device = runner_->device().str();
    info_.precision = source.precision;
    info_.num_classes = shape.num_classes;
    info_.depth = shape.layers;
    info_.num_heads = shape.heads;
    info_.patch_nums = shape.step_sides;
    info_.counts = shape.counts;
    info_.image_size = shape.image_size;
    const std::string& path = runner_->model_path();
    if (!path.empty()) info_.class_list_path = class_list_for(path, shape.num_classes);
    if (info_.family == Family::Mar)
        info_.diffusion_steps = runner_->settings_json({})["num_sampling_steps"].get<std::string>();
    if (info_.family == Family::Infinity) {  // no file recommendation: the official settings
        const SampleSettings d = runner_->defaults();
        info_.recommended.cfg = d.cfg;
        info_.recommended.top_k = d.top_k;
        info_.recommended.top_p = d.top_p;
    }
    // A malformed recommendation must not stop the model from loading: offer none.
    try {
        if (!path.empty() && info_.family == Family::Var)
            info_.recommended = read_sampling_recommendation(path);
        if (!path.empty() && info_.family == Family::Mar)
            info_.mar_recommended = read_mar_sampling_recommendation(path);
    } catch (const std::exception&) {
    }
}

SampleSettings Engine::sample_settings(const GenerationSettings& s,
                                       const std::atomic<bool>* cancel) const {
    Runner& runner = *runner_;
    // A text-to-image model starts from its own defaults (the image size its file names).
    SampleSettings opt = info_.text_to_image() ? runner.defaults() : SampleSettings{};
    if (info_.text_to_image()) {
        if (s.prompt.empty()) throw std::invalid_argument("type a prompt: this model draws text");
        opt.prompts = {s.prompt};
        opt.keep_unknown_words = s.keep_unknown_words;
    } else {
        opt.class_ids = {s.class_id};
    }
    opt.seed = s.seed;
    opt.cfg = s.cfg;
    opt.top_k = s.top_k;
    opt.top_p = s.top_p;
    opt.num_iter = s.num_iter;
    opt.cfg_schedule = parse_cfg_schedule(s.cfg_schedule);
    opt.temperature = s.temperature;
    opt.cancel = cancel;
    opt.cuda_graphs = s.cuda_graphs;
    runner.validate(opt);
    // A run that cannot fit is refused before it starts (the app stays usable).
    check_memory_fits(runner.estimate_memory(opt), available_memory(runner.device()),
                      runner.device().str());
    return opt;
}

RunOutput Engine::run(const GenerationSettings& s, bool accelerated,
                      const std::atomic<bool>* cancel, const ProgressFn& progress) {
    if (!runner_) throw std::runtime_error("no model is loaded");
    Runner& runner = *runner_;
    SampleSettings opt = sample_settings(s, cancel);
    // The parts of each step by the host clock on the CPU (nearly free there); on a GPU they
    // would need event-timed graphs of their own, so the app leaves them to `bench e2e`.
    opt.time_parts = runner.device().is_cpu();
    ProbeRecorder::Selection sel;
    if (s.attention_layer >= 0 && s.attention_layer < info_.depth) sel.layers = {s.attention_layer};
    sel.fhat = s.filmstrip && runner.has_decoder();
    sel.accel = s.accel_records;
    ProgressRecorder rec(sel, progress, runner.steps(opt), runner);

    RunOutput out;
    out.family = runner.family();
    std::shared_ptr<const AccelPlan> plan;
    if (accelerated) {
        plan = runner.parse_accel(nlohmann::json::parse(s.accel_json));
        out.accel_summary = plan->summary();
    } else {
        out.accel_summary = "baseline";
    }
    RunResult res;
    try {
        res = runner.generate(opt, plan.get(), &rec);
    } catch (const SamplingCancelled&) {
        throw Cancelled();
    } catch (const std::exception& e) {
        if (!is_out_of_memory(e)) throw;
        kernels::empty_cuda_cache();  // what the run held is released: the app stays usable
        throw std::runtime_error(
            "out of " + runner.device().str() + " memory (this run's estimate: " +
            format_bytes(runner.estimate_memory(opt).bytes()) + "); the model stays loaded");
    }
    if (!res.images.defined())
        throw std::runtime_error("this model has no VAE attached: nothing to show");

    out.image = to_rgb(res.images[0]);
    out.label = res.labels[0].item<int64_t>();
    out.overhead_ms = res.probe_millis + res.graph_capture_millis;
    out.total_ms = res.model_millis();
    out.decode_ms = res.decode_millis;
    out.kv_bytes = res.kv_bytes;
    out.cuda = runner.device().is_cuda();
    out.cuda_graphs = res.cuda_graphs;
    out.notices = res.notices;

    const int64_t side = info_.patch_nums.empty() ? 0 : info_.patch_nums.back();
    for (const auto& r : rec.scales()) {
        if (cancel && cancel->load()) throw Cancelled();
        ScaleOutput so;
        so.scale = r.scale;
        so.patch_num = r.patch_num > 0 ? r.patch_num : side;  // MAR steps: the token grid
        so.millis = r.millis;
        so.attention_flops = r.attention_flops;
        so.skipped = r.skipped;
        so.tokens = runner.step_map(res, r);
        so.fhat = rec.preview(r.scale);
        so.work_counted = !res.step_costs.empty();
        for (const StepCost& c : res.step_costs)
            if (c.scale == so.scale) {
                so.part_flops = c.flops;
                so.part_ms = c.ms;
                so.parts_timed = c.timed;
            }
        out.scales.push_back(std::move(so));
    }
    for (auto& a : rec.attention()) out.attention.push_back({a.scale, a.layer, to_array(a.probs)});
    if (plan && s.accel_records) out.masks = masks_of(runner, *plan, rec, s.attention_layer);
    for (auto& a : runner.inspector_records(res, rec.accel()))
        out.accel.push_back({a.method, a.kind, a.scale, a.layer, to_array(a.data), a.values});
    if (info_.text_to_image() && !spiece_path_.empty()) {
        // The words of the cross-attention maps; a tokenizer that fails only loses the words.
        try {
            const SentencePieceTokenizer tok(spiece_path_);
            for (const int64_t id : tok.encode(s.prompt).ids)
                out.text_tokens.push_back(id == SentencePieceTokenizer::kEosId
                                              ? "</s>"
                                              : tok.decode_pieces({static_cast<int>(id)}));
        } catch (const std::exception&) {
            out.text_tokens.clear();
        }
    }
    return out;
}

AnalysisOutput Engine::analyze(const GenerationSettings& s, const std::atomic<bool>* cancel) {
    if (!runner_) throw std::runtime_error("no model is loaded");
    Runner& runner = *runner_;
    const auto t = std::chrono::steady_clock::now();
    const SampleSettings opt = sample_settings(s, cancel);
    const auto plan = runner.parse_accel(nlohmann::json::parse(s.accel_json));
    analysis::AnalysisOptions options;
    options.time_dense = false;  // the app shows the measures, not the capture's overhead
    analysis::AttentionAnalysis a;
    try {
        a = analysis::analyze_attention(runner, opt, *plan, options);
    } catch (const SamplingCancelled&) {
        throw Cancelled();
    } catch (const std::exception& e) {
        if (!is_out_of_memory(e)) throw;
        kernels::empty_cuda_cache();
        throw std::runtime_error("out of " + runner.device().str() +
                                 " memory in the attention analysis; the model stays loaded");
    }
    AnalysisOutput out;
    out.method = a.method;
    out.sides = a.layout.sides;
    out.layers = a.layout.layers;
    out.heads_total = a.layout.heads;
    out.heads = a.heads;
    out.records = a.records;
    out.head_types = a.head_types;
    out.layer_types = a.layer_types;
    out.typing = a.typing;
    nlohmann::json j = analysis::to_json(a);
    j["device"] = runner.device().str();
    j["seed"] = s.seed;
    j["precision"] = info_.precision;
    out.json = j.dump(2);
    out.csv = analysis::to_csv(a);
    out.millis =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
    return out;
}

const std::vector<MethodSpec>& Engine::methods(Family f) {
    return f == Family::Mar ? mar_accel_methods() : accel_methods();
}

std::map<std::string, nlohmann::json> Engine::presets(Family f) {
    if (f == Family::Mar) return mar_accel_presets();
    return f == Family::Infinity ? infinity_accel_presets() : accel_presets();
}

std::string Engine::validate_accel(const nlohmann::json& j, Family f) {
    try {
        if (f == Family::Mar)
            MarAccelConfig::from_json(j);
        else
            AccelConfig::from_json(j);
        return {};
    } catch (const std::exception& e) {
        return e.what();
    }
}

nlohmann::json Engine::fit_accel(const nlohmann::json& j, Family f, int64_t scales,
                                 std::vector<std::string>* notes) {
    if (accel_family(f) != Family::Var) return j;
    try {
        return fit_to_schedule(AccelConfig::from_json(j), scales, notes).to_json();
    } catch (const std::exception&) {
        return j;  // validate_accel names the problem
    }
}

std::string Engine::accel_summary(const nlohmann::json& j, Family f) {
    try {
        return f == Family::Mar ? MarAccelConfig::from_json(j).summary()
                                : AccelConfig::from_json(j).summary();
    } catch (const std::exception&) {
        return "invalid";
    }
}

bool Engine::cuda_available() {
    return varscope::cuda_available();
}

ImageQuality Engine::image_quality(const RgbImage& a, const RgbImage& b) {
    if (a.width != b.width || a.height != b.height || a.empty() || b.empty())
        throw std::invalid_argument("image_quality: the images differ in size or are empty");
    auto to_tensor = [](const RgbImage& im) {  // (1, 3, H, W) in [0, 1]
        const at::Tensor hwc =
            at::from_blob(const_cast<uint8_t*>(im.rgb.data()), {im.height, im.width, 3}, at::kByte);
        return hwc.permute({2, 0, 1}).unsqueeze(0).to(at::kFloat).div(255.0);
    };
    const at::Tensor ta = to_tensor(a), tb = to_tensor(b);
    return {varscope::psnr(ta, tb).at(0), varscope::ssim(ta, tb).at(0)};
}
bool Engine::embedded_available() {
    return embedded_model_available();
}

SamplingRecommendation Engine::embedded_recommendation() {
    if (!embedded_model_available()) return {};
    try {
        return read_sampling_recommendation(embedded_model_files().var_path);
    } catch (const std::exception&) {
        return {};
    }
}

bool Engine::embedded_t2i_available() {
    return varscope::embedded_t2i_available();
}

bool Engine::embedded_mar_available() {
    return varscope::embedded_mar_available();
}

MarSamplingRecommendation Engine::embedded_mar_recommendation() {
    if (!varscope::embedded_mar_available()) return {};
    try {
        return read_mar_sampling_recommendation(embedded_mar_files().mar_path);
    } catch (const std::exception&) {
        return {};
    }
}

std::string Engine::embedded_class_list() {
    if (!embedded_model_available()) return {};
    return class_list_for(embedded_model_files().var_path, 0);
}

}  // namespace varscope::gui
