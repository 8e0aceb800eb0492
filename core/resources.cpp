#include "core/resources.h"

#include <filesystem>
#include <vector>

#include "core/build_paths.h"
#include "core/models/sampling_recommendation.h"

namespace fs = std::filesystem;

namespace varscope {

std::string resolve_resource_dir(const char* env, const std::string& exe,
                                 const std::string& configured) {
    if (env && *env) return env;
    if (!exe.empty()) {
        // <prefix>/bin/varscope -> <prefix>/share/varscope, if the install put the models there.
        const fs::path installed = fs::path(exe).parent_path().parent_path() / "share" / "varscope";
        std::error_code ec;
        if (fs::is_directory(installed / "models", ec)) return installed.string();
    }
    return configured;
}

namespace {
std::string& resource_dir_override() {
    static std::string dir;  // set once by the program's main (set_resource_dir_override)
    return dir;
}
}  // namespace

void set_resource_dir_override(const std::string& dir) {
    resource_dir_override() = dir;
}

std::string resource_dir() {
    static const std::string exe = [] {  // the running executable does not change
        std::error_code ec;
        const fs::path p = fs::read_symlink("/proc/self/exe", ec);  // Linux; "" elsewhere
        return ec ? std::string() : p.string();
    }();
    return resolve_resource_dir(resource_dir_override().c_str(), exe, VARSCOPE_RESOURCE_DIR);
}

bool embedded_model_available() {
    const fs::path m = fs::path(resource_dir()) / "models";
    return fs::exists(m / "emoji-var.safetensors") && fs::exists(m / "emoji-vqvae.safetensors");
}

VarModelFiles embedded_model_files() {
    const fs::path m = fs::path(resource_dir()) / "models";
    VarModelFiles f{
        (m / "emoji-var.safetensors").string(), (m / "emoji-vqvae.safetensors").string(), {}};
    for (const auto& p : {f.var_path, f.vae_path})
        if (!fs::exists(p))
            throw CheckpointError(
                "the embedded emoji model is missing: '" + p +
                "' (set VARSCOPE_RESOURCES to the resources folder, or pass --var/--vae)");
    return f;
}

bool embedded_mar_available() {
    const fs::path m = fs::path(resource_dir()) / "models";
    return fs::exists(m / "emoji-mar.safetensors") && fs::exists(m / "emoji-klvae.safetensors");
}

MarModelFiles embedded_mar_files() {
    const fs::path m = fs::path(resource_dir()) / "models";
    MarModelFiles f;
    f.mar_path = (m / "emoji-mar.safetensors").string();
    f.vae_path = (m / "emoji-klvae.safetensors").string();
    for (const auto& p : {f.mar_path, f.vae_path})
        if (!fs::exists(p))
            throw CheckpointError(
                "the embedded emoji MAR is missing: '" + p +
                "' (set VARSCOPE_RESOURCES to the resources folder, or pass --mar/--vae)");
    if (const auto rec = read_mar_sampling_recommendation(f.mar_path); rec.num_sampling_steps)
        f.num_sampling_steps = *rec.num_sampling_steps;
    return f;
}

namespace {
T2iModelFiles t2i_files_in(const fs::path& m) {
    // One file, or shards under an index once the transformer outgrows the 16 MiB file cap.
    const fs::path one = m / "emoji-t2i-infinity.safetensors";
    const fs::path index = m / "emoji-t2i-infinity.safetensors.index.json";
    return {(fs::exists(one) || !fs::exists(index) ? one : index).string(),
            (m / "emoji-t2i-bsq-vae.safetensors").string(), (m / "emoji-t2i-t5").string()};
}
// Every file the model needs: the T5 folder counts only with its three files.
std::vector<std::string> t2i_required(const T2iModelFiles& f) {
    const fs::path t5(f.text_encoder_path);
    return {f.model_path, f.vae_path, (t5 / "config.json").string(),
            (t5 / "model.safetensors").string(), (t5 / "spiece.model").string()};
}
}  // namespace

bool embedded_t2i_available() {
    for (const auto& p : t2i_required(t2i_files_in(fs::path(resource_dir()) / "models")))
        if (!fs::exists(p)) return false;
    return true;
}

T2iModelFiles embedded_t2i_files() {
    const T2iModelFiles f = t2i_files_in(fs::path(resource_dir()) / "models");
    for (const auto& p : t2i_required(f))
        if (!fs::exists(p))
            throw CheckpointError("the embedded emoji text-to-image model is missing: '" + p +
                                  "' (set VARSCOPE_RESOURCES to the resources folder, or pass "
                                  "--infinity/--vae/--t5)");
    return f;
}

std::string class_list_for(const std::string& var_path, int64_t num_classes) {
    const fs::path v(var_path);
    for (const fs::path& c : {v.parent_path() / (v.stem().string() + "-classes.json"),
                              v.parent_path() / "emoji-classes.json"})
        if (fs::exists(c)) {
            // A list beside the checkpoint only counts if its size fits; checked by the caller.
            return c.string();
        }
    if (num_classes == 1000) {
        const fs::path in = fs::path(resource_dir()) / "imagenet-classes.json";
        if (fs::exists(in)) return in.string();
    }
    return {};
}

}  // namespace varscope
