// The engine's MAR half: loads MAR pipelines (the embedded emoji MAR or an official checkpoint
// with its KL VAE) and runs them, turning the loop's per-step probe records into what the
// panels draw: a preview per decoding step, the decode order as a token map, and LazyMAR's
// computed/reused tokens and similarities as token maps (the core records sequence positions;
// the grid layout is a display concern, so it is done here).
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <cmath>
#include <stdexcept>

#include "core/accel/lazymar.h"
#include "core/accel/mar_accel_config.h"
#include "core/mar_pipeline.h"
#include "core/resources.h"
#include "ui/engine/engine.h"
#include "ui/engine/engine_convert.h"

namespace varscope::gui {
namespace {

// Records everything and reports each finished step with a preview of the latents so far.
class MarProgressRecorder : public ProbeRecorder {
  public:
    MarProgressRecorder(Selection sel, const ProgressFn& progress, int64_t steps,
                        const MarPipeline& pipe)
        : ProbeRecorder(std::move(sel)), progress_(progress), steps_(steps), pipe_(pipe) {}
    void on_scale(ScaleRecord r) override {
        const int64_t step = r.scale;
        RgbImage preview;
        if (r.f_hat.defined() && pipe_.has_vae()) {
            c10::InferenceMode guard;
            preview = to_rgb(pipe_.decode_latents(r.f_hat.narrow(0, 0, 1).to(pipe_.device()))[0]);
        }
        ProbeRecorder::on_scale(std::move(r));
        if (progress_) progress_(step, steps_, preview);
        previews_.push_back(std::move(preview));
    }
    RgbImage preview(int64_t step) const {
        return step >= 0 && size_t(step) < previews_.size() ? previews_[size_t(step)] : RgbImage{};
    }

  private:
    const ProgressFn& progress_;
    int64_t steps_;
    const MarPipeline& pipe_;
    std::vector<RgbImage> previews_;
};

// Image positions of a sequence-indexed record (buffer slots first) as an (h, w) map.
FloatArray image_map(const at::Tensor& per_position, int64_t buffer, int64_t side) {
    return to_array(per_position.to(at::kFloat).narrow(0, buffer, side * side).view({side, side}));
}

}  // namespace

void Engine::load_mar(const ModelSource& source) {
    LoadOptions opt = load_options(source.device, source.precision);
    opt.exec = exec_;
    MarModelFiles files;
    if (source.kind == ModelSource::Kind::Embedded) {
        files = embedded_mar_files();  // with the file's recommended respacing
    } else {
        files.mar_path = source.var_path;
        files.vae_path = source.vae_path;
        if (files.vae_path.empty())
            throw std::invalid_argument(source.var_path +
                                        " is a MAR model: it needs its KL VAE (e.g. kl16.ckpt) to "
                                        "make images; open the pair again with the VAE file");
        try {
            const auto rec = read_mar_sampling_recommendation(files.mar_path);
            if (rec.num_sampling_steps) files.num_sampling_steps = *rec.num_sampling_steps;
        } catch (const std::exception&) {
            // A malformed recommendation must not stop the model from loading: official 100.
        }
    }
    if (!source.diffusion_steps.empty()) files.num_sampling_steps = source.diffusion_steps;
    set_mar_pipeline(std::make_unique<MarPipeline>(MarPipeline::load(files, opt)), source);
    info_.diffusion_steps = files.num_sampling_steps;
    info_.class_list_path = class_list_for(files.mar_path, info_.num_classes);
    try {
        info_.mar_recommended = read_mar_sampling_recommendation(files.mar_path);
    } catch (const std::exception&) {
        // As above: offer no recommendation.
    }
}

void Engine::set_mar_pipeline(std::unique_ptr<MarPipeline> pipeline, const ModelSource& source) {
    mar_ = std::move(pipeline);
    pipeline_.reset();
    key_ = source.key();
    const auto& c = mar_->config();
    info_ = {};
    info_.family = Family::Mar;
    info_.description = mar_->describe();
    info_.device = mar_->device().str();
    info_.precision = source.precision;
    info_.num_classes = c.class_num;
    info_.depth = c.encoder_depth + c.decoder_depth;
    info_.num_heads = c.decoder_num_heads;
    info_.patch_nums = {c.seq_h()};
    info_.counts.decoder_blocks = c.decoder_depth;
    info_.image_size = c.img_size;
    info_.diffusion_steps = c.num_sampling_steps;
}

RunOutput Engine::run_mar(const GenerationSettings& s, bool accelerated,
                          const std::atomic<bool>* cancel, const ProgressFn& progress) {
    if (!mar_) throw std::runtime_error("no model is loaded");
    const auto& c = mar_->config();
    MarSampleOptions opt;
    opt.class_ids = {s.class_id};
    opt.seed = s.seed;
    opt.num_iter = s.num_iter;
    opt.cfg = s.cfg;
    opt.cfg_schedule = parse_cfg_schedule(s.cfg_schedule);
    opt.temperature = s.temperature;
    opt.cancel = cancel;
    opt.cuda_graphs = s.cuda_graphs;
    opt.validate(c);

    ProbeRecorder::Selection sel;
    sel.fhat = s.filmstrip && mar_->has_vae();
    sel.accel = s.accel_records;
    MarProgressRecorder rec(sel, progress, s.num_iter, *mar_);

    RunOutput out;
    out.family = Family::Mar;
    std::shared_ptr<MarSamplingHooks> hooks;
    if (accelerated) {
        const auto ac = MarAccelConfig::from_json(nlohmann::json::parse(s.accel_json));
        out.accel_summary = ac.summary();
        hooks = build_mar_accelerators(ac, c, &rec);
        // LazyMAR's DiffLoss-head caches live in the sampler, not in the hooks.
        opt.head_cfg_cache_period = lazymar_head_period(ac.lazymar);
        opt.head_mlp_cache_period = lazymar_head_mlp_period(ac.lazymar);
    } else {
        out.accel_summary = "baseline";
    }
    MarSampleResult res;
    try {
        res = mar_->generate(opt, hooks.get(), &rec);
    } catch (const SamplingCancelled&) {
        throw Cancelled();
    }
    if (!res.images.defined())
        throw std::runtime_error("this MAR model has no VAE attached: nothing to show");

    out.image = to_rgb(res.images[0]);
    out.label = res.labels[0].item<int64_t>();
    out.overhead_ms = res.probe_millis + res.graph_capture_millis_call;
    out.total_ms = res.total_millis - out.overhead_ms;
    out.decode_ms = res.decode_millis;
    out.cuda = mar_->device().is_cuda();
    out.cuda_graphs = res.cuda_graphs;

    // Decode order of the first image: the step that decoded each grid position.
    const int64_t side = c.seq_h(), n = c.seq_len();
    std::vector<int64_t> step_of(size_t(n), -1);
    for (size_t step = 0; step < res.decoded.size(); ++step) {
        const auto pos = res.decoded[step][0].to(at::kCPU, at::kLong).contiguous();
        for (int64_t i = 0; i < pos.numel(); ++i)
            step_of[size_t(pos.data_ptr<int64_t>()[i])] = int64_t(step);
    }
    const auto scales = rec.scales();
    for (size_t i = 0; i < scales.size(); ++i) {
        if (cancel && cancel->load()) throw Cancelled();
        const auto& r = scales[i];
        ScaleOutput so;
        so.scale = r.scale;
        so.patch_num = side;
        so.millis = r.millis;
        so.attention_flops = r.attention_flops;
        so.tokens.resize(size_t(n));
        for (int64_t p = 0; p < n; ++p)
            so.tokens[size_t(p)] = step_of[size_t(p)] <= r.scale ? step_of[size_t(p)] : -1;
        so.fhat = rec.preview(r.scale);
        FloatArray order;
        order.shape = {side, side};
        order.values.assign(so.tokens.begin(), so.tokens.end());
        AccelOutput o{"mar", "decode_order", r.scale, -1, std::move(order), {}};
        o.values["decoded"] = double(res.decoded[i].size(1));
        o.values["still_masked"] =
            double(std::count(so.tokens.begin(), so.tokens.end(), int64_t{-1}));
        out.accel.push_back(std::move(o));
        out.scales.push_back(std::move(so));
    }
    for (auto& a : rec.accel()) {
        AccelOutput o{a.method, a.kind, a.scale, a.layer, {}, a.values};
        if (a.kind == probe_kinds::kLazyMarComputedRows) {
            // Sequence rows computed -> (h, w): 1 computed, 0 reused from the cache.
            auto computed = at::zeros({c.total_len()}, at::kFloat);
            computed.index_fill_(0, a.data.to(at::kLong), 1.0);
            o.kind = "lazymar_computed_map";
            o.data = image_map(computed, c.buffer_size, side);
        } else if (a.kind == probe_kinds::kLazyMarSimilarity && a.data.dim() == 1 &&
                   a.data.size(0) == c.total_len()) {
            o.data = image_map(a.data, c.buffer_size, side);
        } else {
            o.data = to_array(a.data);
        }
        out.accel.push_back(std::move(o));
    }
    return out;
}

}  // namespace varscope::gui
