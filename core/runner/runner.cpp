// open_runner(): the one place that tells model families apart. The checkpoint is read once;
// its tensor names decide the family (core/models/detect.h), and the family's runner binds the
// tensors already read.
#include "core/runner/runner.h"

#include "core/io/checkpoint.h"
#include "core/models/detect.h"
#include "core/resources.h"
#include "core/runner/runner_internal.h"

namespace varscope {

const char* family_id(Family f) {
    return f == Family::Mar ? "mar" : f == Family::Infinity ? "infinity" : "var";
}

Family family_from_id(const std::string& id) {
    return id == "mar" ? Family::Mar : id == "infinity" ? Family::Infinity : Family::Var;
}

const char* family_title(Family f) {
    return f == Family::Mar ? "MAR" : f == Family::Infinity ? "Infinity" : "VAR";
}

namespace {

// The embedded model's files where the spec names none (a --vae given with it is kept).
ModelSpec with_embedded_files(ModelSpec spec) {
    if (!spec.embedded_model()) return spec;
    if (spec.embedded == Family::Infinity) {
        const T2iModelFiles f = embedded_t2i_files();  // CheckpointError naming what is missing
        spec.model_path = f.model_path;
        if (spec.vae_path.empty()) spec.vae_path = f.vae_path;
        if (spec.text_encoder_path.empty()) spec.text_encoder_path = f.text_encoder_path;
    } else if (spec.embedded == Family::Mar) {
        const MarModelFiles f = embedded_mar_files();  // CheckpointError naming what is missing
        spec.model_path = f.mar_path;
        if (spec.vae_path.empty()) spec.vae_path = f.vae_path;
    } else {
        const VarModelFiles f = embedded_model_files();
        spec.model_path = f.var_path;
        if (spec.vae_path.empty()) spec.vae_path = f.vae_path;
    }
    return spec;
}

}  // namespace

std::unique_ptr<Runner> open_runner(const ModelSpec& requested, const LoadOptions& options) {
    const ModelSpec spec = with_embedded_files(requested);
    const StateDict all = load_checkpoint(spec.model_path);
    const DetectedFamily found = detect_family_nested(all);
    switch (found.family) {
        case ModelFamily::VarTransformer:
            return load_var_runner(found.prefix.empty() ? all : select_prefix(all, found.prefix),
                                   spec, options);
        case ModelFamily::MarTransformer:
            return load_mar_runner(all, spec, options);
        case ModelFamily::InfinityTransformer:
            return load_infinity_runner(all, spec, options);
        default:
            break;
    }
    if (spec.named_as == Family::Mar)  // says what the file holds instead
        select_mar_weights(all, spec.prefer_ema, nullptr, spec.model_path);
    if (spec.named_as == Family::Var)
        throw CheckpointError(
            spec.model_path +
            ": expected a VAR transformer checkpoint, but its tensors look like " +
            family_name(found.family));
    throw CheckpointError(
        spec.model_path +
        ": not a VAR, MAR or Infinity transformer checkpoint (its tensors look like " +
        family_name(found.family) + ")");
}

std::shared_ptr<const AccelPlan> accel_plan(Family family, const std::string& arg) {
    if (family == Family::Infinity) return infinity_accel_plan(arg);
    return family == Family::Mar ? mar_accel_plan(arg) : var_accel_plan(arg);
}

Family detect_runner_family(const std::string& model_path) {
    const DetectedFamily found = detect_family_nested(load_checkpoint(model_path));
    if (found.family == ModelFamily::VarTransformer) return Family::Var;
    if (found.family == ModelFamily::MarTransformer) return Family::Mar;
    if (found.family == ModelFamily::InfinityTransformer) return Family::Infinity;
    throw CheckpointError(
        model_path + ": not a VAR, MAR or Infinity transformer checkpoint (its tensors look like " +
        family_name(found.family) + ")");
}

}  // namespace varscope
