#include "ui/engine/engine.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "core/accel/accel_config.h"
#include "core/accel/mar_accel_config.h"
#include "core/io/checkpoint.h"
#include "core/mar_pipeline.h"
#include "core/metrics/image_metrics.h"
#include "core/models/detect.h"
#include "core/pipeline.h"
#include "core/resources.h"
#include "ui/engine/engine_convert.h"

namespace varscope::gui {
namespace {

// Records everything and reports each finished scale with its decoded f_hat (the preview,
// kept for the filmstrip so it is decoded once).
class ProgressRecorder : public ProbeRecorder {
  public:
    using Decode = std::function<RgbImage(const at::Tensor& fhat)>;
    ProgressRecorder(Selection sel, const ProgressFn& progress, int64_t scales, Decode decode)
        : ProbeRecorder(std::move(sel)), progress_(progress), scales_(scales), decode_(decode) {}
    void on_scale(ScaleRecord r) override {
        const int64_t si = r.scale;
        RgbImage preview;
        if (r.f_hat.defined() && decode_) preview = decode_(r.f_hat);
        ProbeRecorder::on_scale(std::move(r));
        if (progress_) progress_(si, scales_, preview);
        previews_[si] = std::move(preview);
    }
    RgbImage preview(int64_t scale) const {
        const auto it = previews_.find(scale);
        return it == previews_.end() ? RgbImage{} : it->second;
    }

  private:
    const ProgressFn& progress_;
    int64_t scales_;
    Decode decode_;
    std::map<int64_t, RgbImage> previews_;
};

}  // namespace

const char* family_id(Family f) {
    return f == Family::Mar ? "mar" : "var";
}
Family family_from_id(const std::string& id) {
    return id == "mar" ? Family::Mar : Family::Var;
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
            return "files|" + var_path + "|" + vae_path + steps + where;
        case Kind::Custom:
            return "custom|" + custom_name + where;
    }
    return {};
}

std::string ModelSource::display_name() const {
    switch (kind) {
        case Kind::Embedded:
            return family == Family::Mar ? "Embedded emoji MAR" : "Embedded emoji VAR";
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
    const auto& [class_id_, seed_, cfg_, top_k_, top_p_, num_iter_, cfg_schedule_, temperature_,
                 accel_json_, attention_layer_, filmstrip_, accel_records_, cuda_graphs_] = *this;
    // The accelerated side's part: its config and whether its hooks record.
    (void)accel_json_;
    (void)accel_records_;
    // JSON keeps the doubles' every digit (a stream's default 6 digits gave cfg 4.0000001 the
    // key of 4.0) and names each value, so no two fields can run together.
    const nlohmann::json key = {{"class_id", class_id_},
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

Engine::Engine() = default;
Engine::~Engine() = default;

bool Engine::loaded() const {
    return pipeline_ != nullptr || mar_ != nullptr;
}

void Engine::load(const ModelSource& source) {
    const LoadOptions opt = load_options(source.device, source.precision);
    std::unique_ptr<VarPipeline> p;
    switch (source.kind) {
        case ModelSource::Kind::Embedded:
            if (source.family == Family::Mar) return load_mar(source);
            p = std::make_unique<VarPipeline>(VarPipeline::load(embedded_model_files(), opt));
            break;
        case ModelSource::Kind::Files:
            // The family from the tensor names (read once more by the pipeline's loader: the
            // price of one detection path for every file format).
            if (detect_family_nested(load_checkpoint(source.var_path)).family ==
                ModelFamily::MarTransformer)
                return load_mar(source);
            p = std::make_unique<VarPipeline>(
                VarPipeline::load({source.var_path, source.vae_path, {}}, opt));
            break;
        case ModelSource::Kind::Custom:
            throw std::invalid_argument("a custom model must be installed with set_pipeline()");
    }
    set_pipeline(std::move(p), source);
}

void Engine::set_pipeline(std::unique_ptr<VarPipeline> pipeline, const ModelSource& source) {
    pipeline_ = std::move(pipeline);
    mar_.reset();
    key_ = source.key();
    const auto& v = pipeline_->var_config();
    info_ = {};
    info_.description = pipeline_->describe();
    info_.device = pipeline_->device().str();
    info_.precision = source.precision;
    info_.num_classes = v.num_classes;
    info_.depth = v.depth;
    info_.num_heads = v.num_heads;
    info_.patch_nums = v.patch_nums;
    info_.counts.scales = v.num_scales();
    info_.counts.tokens = v.total_tokens();
    info_.image_size = v.patch_nums.back() * pipeline_->vae_config().downsample();
    const std::string var_path = source.kind == ModelSource::Kind::Embedded
                                     ? embedded_model_files().var_path
                                     : source.var_path;
    if (!var_path.empty()) info_.class_list_path = class_list_for(var_path, v.num_classes);
    try {
        if (!var_path.empty()) info_.recommended = read_sampling_recommendation(var_path);
    } catch (const std::exception&) {
        // A malformed recommendation must not stop the model from loading: offer none.
    }
}

RunOutput Engine::run(const GenerationSettings& s, bool accelerated,
                      const std::atomic<bool>* cancel, const ProgressFn& progress) {
    if (mar_) return run_mar(s, accelerated, cancel, progress);
    return run_var(s, accelerated, cancel, progress);
}

RunOutput Engine::run_var(const GenerationSettings& s, bool accelerated,
                          const std::atomic<bool>* cancel, const ProgressFn& progress) {
    if (!pipeline_) throw std::runtime_error("no model is loaded");
    const auto& cfg = pipeline_->var_config();
    VarSampleOptions opt;
    opt.class_ids = {s.class_id};
    opt.seed = s.seed;
    opt.cfg = s.cfg;
    opt.top_k = s.top_k;
    opt.top_p = s.top_p;
    opt.cancel = cancel;
    opt.cuda_graphs = s.cuda_graphs;
    opt.validate(cfg);

    ProbeRecorder::Selection sel;
    if (s.attention_layer >= 0 && s.attention_layer < cfg.depth) sel.layers = {s.attention_layer};
    sel.fhat = s.filmstrip;
    sel.accel = s.accel_records;
    auto vae = pipeline_->sampler().vqvae();
    const at::Device device = pipeline_->device();
    ProgressRecorder rec(
        sel, progress, cfg.num_scales(), [vae, device](const at::Tensor& f_hat) mutable {
            c10::InferenceMode guard;
            return to_rgb(vae->decode(f_hat.narrow(0, 0, 1).to(device))[0].add(1).mul(0.5));
        });

    RunOutput out;
    std::shared_ptr<SamplingHooks> hooks;
    if (accelerated) {
        const AccelConfig ac = AccelConfig::from_json(nlohmann::json::parse(s.accel_json));
        out.accel_summary = ac.summary();
        hooks = build_accelerators(ac, cfg, &rec);
    } else {
        out.accel_summary = "baseline";
    }
    VarSampleResult res;
    try {
        res = pipeline_->generate(opt, hooks.get(), &rec);
    } catch (const SamplingCancelled&) {
        throw Cancelled();
    }

    out.image = to_rgb(res.images[0]);
    out.label = res.labels[0].item<int64_t>();
    out.overhead_ms = res.probe_millis + res.graph_capture_millis;
    out.total_ms = res.total_millis - out.overhead_ms;
    out.decode_ms = res.decode_millis;
    out.kv_bytes = res.kv_bytes;
    out.cuda = device.is_cuda();
    out.cuda_graphs = res.cuda_graphs;

    for (auto& r : rec.scales()) {
        if (cancel && cancel->load()) throw Cancelled();
        ScaleOutput so;
        so.scale = r.scale;
        so.patch_num = r.patch_num;
        so.millis = r.millis;
        so.attention_flops = r.attention_flops;
        so.skipped = r.skipped;
        if (r.tokens.defined()) {
            auto t = r.tokens[0].to(at::kLong).contiguous();
            so.tokens.assign(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
        }
        so.fhat = rec.preview(r.scale);
        out.scales.push_back(std::move(so));
    }
    for (auto& a : rec.attention()) out.attention.push_back({a.scale, a.layer, to_array(a.probs)});
    for (auto& a : rec.accel())
        out.accel.push_back({a.method, a.kind, a.scale, a.layer, to_array(a.data), a.values});
    return out;
}

const std::vector<MethodSpec>& Engine::methods(Family f) {
    return f == Family::Mar ? mar_accel_methods() : accel_methods();
}

std::map<std::string, nlohmann::json> Engine::presets(Family f) {
    return f == Family::Mar ? mar_accel_presets() : accel_presets();
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
