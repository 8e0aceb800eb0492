#include "ui/run_types.h"

#include "core/io/json_fields.h"

namespace varscope::gui {

nlohmann::json Request::to_json() const {
    const char* kinds[] = {"embedded", "files", "custom"};
    nlohmann::json m = {{"kind", kinds[static_cast<int>(model.kind)]},
                        {"family", family_id(model.family)},
                        {"device", model.device},
                        {"precision", model.precision}};
    if (!model.diffusion_steps.empty()) m["diffusion_steps"] = model.diffusion_steps;
    if (model.kind == ModelSource::Kind::Files) {
        m["var"] = model.var_path;
        m["vae"] = model.vae_path;
        if (!model.t5_path.empty()) m["t5"] = model.t5_path;
        if (model.low_memory) m["low_memory"] = true;
    }
    if (model.kind == ModelSource::Kind::Custom) m["name"] = model.custom_name;
    return {{"varscope", 1},
            {"model", m},
            {"prompt", prompt.toStdString()},
            {"class_id", gen.class_id},
            {"seed", gen.seed},
            {"cfg", gen.cfg},
            {"top_k", gen.top_k},
            {"top_p", gen.top_p},
            {"num_iter", gen.num_iter},
            {"cfg_schedule", gen.cfg_schedule},
            {"temperature", gen.temperature},
            {"keep_unknown_words", gen.keep_unknown_words},
            {"accel", accel}};
}

Request Request::from_json(const nlohmann::json& j) {
    if (!j.is_object() || !j.contains("varscope"))
        throw std::invalid_argument("not VARScope generation settings");
    // A key this version does not know would be dropped without a word and the restored run
    // would differ from the one that was saved ("top_kk": 5 ran top-k 900).
    const Request defaults;
    const nlohmann::json known = defaults.to_json();
    require_known_fields(j, known, "settings");
    const auto& m = j.at("model");
    require_known_fields(m, known["model"], "settings: model",
                         {"diffusion_steps", "var", "vae", "t5", "low_memory", "name"});
    Request r;
    const std::string kind = m.value("kind", "embedded");
    r.model.kind = kind == "files"    ? ModelSource::Kind::Files
                   : kind == "custom" ? ModelSource::Kind::Custom
                                      : ModelSource::Kind::Embedded;
    r.model.family = family_from_id(m.value("family", "var"));
    r.model.diffusion_steps = m.value("diffusion_steps", "");
    r.model.device = m.value("device", "cpu");
    r.model.precision = m.value("precision", "fp32");
    if (!is_model_precision(r.model.precision))
        throw std::invalid_argument("model precision must be " + model_precision_names() +
                                    ", got '" + r.model.precision + "'");
    r.model.var_path = m.value("var", "");
    r.model.vae_path = m.value("vae", "");
    r.model.t5_path = m.value("t5", "");
    r.model.low_memory = m.value("low_memory", false);
    r.model.custom_name = m.value("name", "");
    r.prompt = QString::fromStdString(j.value("prompt", ""));
    // A text-to-image model's text is its prompt.
    if (r.model.family == Family::Infinity) r.gen.prompt = r.prompt.trimmed().toStdString();
    // Absent fields keep GenerationSettings' defaults; a count given as 2.5 or 1e40 is refused
    // rather than cast (a PNG's settings chunk is anyone's to write).
    auto get = [&](const char* k, auto& v) { read_json_field(j, k, v, "settings: "); };
    get("class_id", r.gen.class_id);
    get("seed", r.gen.seed);
    get("cfg", r.gen.cfg);
    get("top_k", r.gen.top_k);
    get("top_p", r.gen.top_p);
    get("num_iter", r.gen.num_iter);
    get("cfg_schedule", r.gen.cfg_schedule);
    get("temperature", r.gen.temperature);
    get("keep_unknown_words", r.gen.keep_unknown_words);
    r.accel = j.value("accel", nlohmann::json::object());
    return r;
}

double attention_flops_of(const RunOutput& run) {
    double sum = 0;
    for (const auto& s : run.scales) sum += s.attention_flops;
    return sum;
}

QImage to_qimage(const RgbImage& img) {
    if (img.empty()) return {};
    return QImage(img.rgb.data(), img.width, img.height, img.width * 3, QImage::Format_RGB888)
        .copy();
}

std::vector<ScaleSummary> scale_summary_of(const SideResult& r) {
    return r.stored_scales.empty() ? summarize_scales(r.run) : r.stored_scales;
}

std::optional<Side> sideToRunAgainEagerly(const RunOutput& base, const RunOutput& accel) {
    if (base.cuda_graphs == accel.cuda_graphs) return std::nullopt;
    return base.cuda_graphs ? Side::Baseline : Side::Accelerated;
}

}  // namespace varscope::gui
