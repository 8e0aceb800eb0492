#include "core/eval/manifest.h"

#include <filesystem>
#include <set>

#include "core/io/json_fields.h"
#include "core/io/json_read.h"
#include "core/metrics/emoji_features.h"

namespace varscope {
namespace {

namespace fs = std::filesystem;

struct Reader {
    std::string source;
    std::string base_dir;

    [[noreturn]] void fail(const std::string& field, const std::string& what) const {
        throw ManifestError("manifest " + source + ": " + field + ": " + what);
    }
    void known(const nlohmann::json& j, const std::string& field,
               std::initializer_list<const char*> keys) const {
        nlohmann::json allowed = nlohmann::json::object();
        for (const char* k : keys) allowed[k] = nullptr;
        try {
            require_known_fields(j, allowed, field.empty() ? "top level" : field);
        } catch (const std::invalid_argument& e) {
            throw ManifestError("manifest " + source + ": " + e.what());
        }
    }
    std::string path(const nlohmann::json& j, const std::string& field, bool must_exist) const {
        if (!j.is_string() || j.get<std::string>().empty()) fail(field, "expected a path");
        fs::path p = j.get<std::string>();
        if (p.is_relative() && !base_dir.empty()) p = fs::path(base_dir) / p;
        if (must_exist && !fs::exists(p)) fail(field, "no such file '" + p.string() + "'");
        return p.string();
    }
    int64_t positive(const nlohmann::json& j, const std::string& field) const {
        if (!j.is_number_integer() || j.get<int64_t>() < 1)
            fail(field, "expected a positive integer, got " + j.dump());
        return j.get<int64_t>();
    }
    std::string text(const nlohmann::json& j, const std::string& field) const {
        if (!j.is_string()) fail(field, "expected a string, got " + j.dump());
        return j.get<std::string>();
    }
};

bool is_seed(const nlohmann::json& j) {
    return j.is_number_unsigned() || (j.is_number_integer() && j.get<int64_t>() >= 0);
}

void read_model(const Reader& r, const nlohmann::json& j, EvalManifest& m) {
    if (!j.is_object())
        r.fail("model",
               "expected an object ({\"embedded\": \"var\"}, {\"path\": ...} or "
               "{\"random\": depth})");
    r.known(j, "model",
            {"embedded", "path", "vae", "text_encoder", "diffusion_steps", "family", "random",
             "init_seed"});
    ModelSpec& spec = m.model;
    if (int(j.contains("embedded")) + int(j.contains("path")) + int(j.contains("random")) != 1)
        r.fail("model",
               "name one of \"path\" (a checkpoint), \"embedded\" (\"t2i\", \"var\" "
               "or \"mar\") or \"random\" (a VAR depth: random weights, for timing)");
    if (j.contains("init_seed") && !j.contains("random"))
        r.fail("model.init_seed", "seeds random weights: needs \"random\"");
    if (j.contains("random")) {
        const auto& d = j["random"];
        if (!d.is_number_integer() || d.get<int64_t>() < 1 || d.get<int64_t>() > 64)
            r.fail("model.random", "expected a VAR depth in [1, 64] (e.g. 30), got " + d.dump());
        for (const char* k : {"vae", "text_encoder", "diffusion_steps", "family"})
            if (j.contains(k))
                r.fail(std::string("model.") + k, "random weights bring their own architecture");
        m.random_depth = d.get<int64_t>();
        if (j.contains("init_seed")) {
            if (!is_seed(j["init_seed"]))
                r.fail("model.init_seed", "expected an integer >= 0, got " + j["init_seed"].dump());
            m.init_seed = j["init_seed"].get<uint64_t>();
        }
        return;
    }
    if (j.contains("embedded")) {
        const std::string f = r.text(j["embedded"], "model.embedded");
        if (f != "var" && f != "mar" && f != "t2i" && f != "infinity")
            r.fail("model.embedded",
                   "expected \"t2i\" (the emoji text-to-image model), \"var\" or \"mar\", got \"" +
                       f + "\"");
        spec.embedded = f == "t2i" ? Family::Infinity : family_from_id(f);
        if (j.contains("vae")) r.fail("model.vae", "the embedded model brings its own VAE");
    } else {
        spec.model_path = r.path(j["path"], "model.path", true);
        if (j.contains("vae")) spec.vae_path = r.path(j["vae"], "model.vae", true);
    }
    if (j.contains("family")) {
        const std::string f = r.text(j["family"], "model.family");
        if (f != "var" && f != "mar" && f != "infinity")
            r.fail("model.family", "expected \"var\", \"mar\" or \"infinity\", got \"" + f + "\"");
        spec.named_as = family_from_id(f);
    }
    if (j.contains("text_encoder"))
        spec.text_encoder_path = r.path(j["text_encoder"], "model.text_encoder", true);
    if (j.contains("diffusion_steps"))
        spec.diffusion_steps = r.text(j["diffusion_steps"], "model.diffusion_steps");
}

std::vector<uint64_t> read_seeds(const Reader& r, const nlohmann::json& j) {
    std::vector<uint64_t> seeds;
    if (j.is_object()) {  // {"first": 0, "count": 50}
        r.known(j, "seeds", {"first", "count"});
        if (!j.contains("count")) r.fail("seeds", "a range needs \"count\"");
        const auto first = j.value("first", nlohmann::json(0));
        if (!is_seed(first)) r.fail("seeds.first", "expected an integer >= 0");
        const int64_t n = r.positive(j["count"], "seeds.count");
        for (int64_t i = 0; i < n; ++i) seeds.push_back(first.get<uint64_t>() + i);
    } else if (j.is_array() && !j.empty()) {
        std::set<uint64_t> seen;
        for (size_t i = 0; i < j.size(); ++i) {
            const std::string f = "seeds[" + std::to_string(i) + "]";
            if (!is_seed(j[i])) r.fail(f, "expected an integer >= 0, got " + j[i].dump());
            if (!seen.insert(j[i].get<uint64_t>()).second) r.fail(f, "seed listed twice");
            seeds.push_back(j[i].get<uint64_t>());
        }
    } else {
        r.fail("seeds", "expected a non-empty list of integers or {\"first\": n, \"count\": n}");
    }
    return seeds;
}

EvalMetricsSpec read_metrics(const Reader& r, const nlohmann::json& j) {
    if (!j.is_object())
        r.fail("metrics",
               "expected an object ({\"inception\": weight file, \"reference\": .npz} and/or "
               "{\"emoji\": true})");
    r.known(j, "metrics", {"inception", "reference", "emoji", "is_splits", "pr_k"});
    if (!j.contains("inception") && !j.contains("emoji"))
        r.fail("metrics.inception",
               "missing: the FID Inception weights (pytorch-fid's "
               "pt_inception-2015-12-05-6726825d.pth; nothing is downloaded), or name the emoji "
               "feature network (\"emoji\": true)");
    EvalMetricsSpec spec;
    if (j.contains("inception")) spec.inception = r.path(j["inception"], "metrics.inception", true);
    if (j.contains("reference")) {
        if (!j.contains("inception"))
            r.fail("metrics.reference",
                   "Inception statistics need \"inception\" (the emoji network brings its own)");
        spec.reference = r.path(j["reference"], "metrics.reference", true);
    }
    if (j.contains("emoji")) {
        const auto& e = j["emoji"];
        if (e.is_boolean()) {
            if (e.get<bool>()) {
                spec.emoji = shipped_emoji_features_path();
                if (!fs::exists(spec.emoji))
                    r.fail("metrics.emoji", "the shipped emoji feature network '" + spec.emoji +
                                                "' is missing (train one with varscope-cli train "
                                                "emoji-features, or name a file)");
            }
        } else {
            if (!e.is_string())
                r.fail("metrics.emoji", "expected true (the shipped network) or a file");
            spec.emoji = r.path(e, "metrics.emoji", true);
        }
    }
    if (j.contains("is_splits")) spec.is_splits = r.positive(j["is_splits"], "metrics.is_splits");
    if (j.contains("pr_k")) spec.pr_k = r.positive(j["pr_k"], "metrics.pr_k");
    return spec;
}

const std::set<std::string>& sampling_keys() {
    static const std::set<std::string> keys = {"cfg",      "top_k",       "top_p", "more_smooth",
                                               "num_iter", "temperature", "tau"};
    return keys;
}

}  // namespace

nlohmann::json EvalManifest::work_json() const {
    nlohmann::json configs_json = nlohmann::json::array();
    for (const auto& c : configs) configs_json.push_back({c.name, c.accel});
    nlohmann::json work = {{"model",
                            {{"path", model.model_path},
                             {"vae", model.vae_path},
                             {"embedded", family_id(model.embedded)},
                             {"text_encoder", model.text_encoder_path},
                             {"diffusion_steps", model.diffusion_steps}}},
                           {"device_type", device.rfind("cuda", 0) == 0 ? "cuda" : device},
                           {"precision", precision},
                           {"classes", classes},
                           {"prompts", prompts},
                           {"seeds", seeds},
                           {"batch", batch},
                           {"batches_per_shard", batches_per_shard},
                           {"sampling", sampling},
                           {"configs", configs_json}};
    if (random_depth > 0)  // absent otherwise: checkpoint manifests keep their fingerprints
        work["model"]["random"] = {{"depth", random_depth}, {"init_seed", init_seed}};
    // The shards then carry Inception features (the reference enters only the aggregation);
    // manifests without metrics keep their fingerprints.
    if (metrics.inception_enabled()) work["metrics"]["inception"] = metrics.inception;
    if (metrics.emoji_enabled()) work["metrics"]["emoji"] = metrics.emoji;
    return work;
}

EvalManifest parse_manifest(const nlohmann::json& j, const std::string& source,
                            const std::string& base_dir) {
    const Reader r{source, base_dir};
    if (!j.is_object()) r.fail("top level", "expected a JSON object");
    r.known(j, "",
            {"model", "device", "precision", "classes", "prompts", "seeds", "batch",
             "batches_per_shard", "sampling", "configs", "output_dir", "save_images", "warmup",
             "rank_timeout_s", "metrics", "overlap_scoring"});
    for (const char* required : {"model", "seeds", "configs", "output_dir"})
        if (!j.contains(required)) r.fail(required, "missing (required)");
    EvalManifest m;
    read_model(r, j["model"], m);
    if (j.contains("device")) m.device = r.text(j["device"], "device");
    if (j.contains("precision")) m.precision = r.text(j["precision"], "precision");

    if (j.contains("classes") == j.contains("prompts"))
        r.fail("classes", "name either \"classes\" (class ids) or \"prompts\" (Infinity)");
    if (j.contains("classes")) {
        const auto& c = j["classes"];
        if (!c.is_array() || c.empty()) r.fail("classes", "expected a non-empty list of class ids");
        for (size_t i = 0; i < c.size(); ++i) {
            if (!c[i].is_number_integer() || c[i].get<int64_t>() < -1)
                r.fail("classes[" + std::to_string(i) + "]",
                       "expected a class id (-1 = unconditional), got " + c[i].dump());
            m.classes.push_back(c[i].get<int64_t>());
        }
    } else {
        const auto& p = j["prompts"];
        if (!p.is_array() || p.empty()) r.fail("prompts", "expected a non-empty list of strings");
        for (size_t i = 0; i < p.size(); ++i)
            m.prompts.push_back(r.text(p[i], "prompts[" + std::to_string(i) + "]"));
    }
    m.seeds = read_seeds(r, j["seeds"]);
    if (j.contains("batch")) m.batch = r.positive(j["batch"], "batch");
    if (j.contains("batches_per_shard"))
        m.batches_per_shard = r.positive(j["batches_per_shard"], "batches_per_shard");

    if (j.contains("sampling")) {
        const auto& s = j["sampling"];
        if (!s.is_object()) r.fail("sampling", "expected an object");
        for (const auto& item : s.items()) {
            if (!sampling_keys().count(item.key())) {
                std::string allowed;
                for (const auto& k : sampling_keys()) allowed += (allowed.empty() ? "" : ", ") + k;
                r.fail("sampling", "unknown field '" + item.key() + "' (allowed: " + allowed + ")");
            }
            // What eval_settings reads each as: a whole number for counts (a fractional or huge
            // number would be cast), true/false for the switch, any number otherwise.
            const auto& v = item.value();
            const std::string& k = item.key();
            const bool flag = k == "more_smooth", count = k == "top_k" || k == "num_iter";
            const bool ok = flag    ? v.is_boolean()
                            : count ? json_value_fits<int64_t>(v)
                                    : json_value_fits<double>(v);
            if (!ok)
                r.fail("sampling." + k, std::string(flag    ? "expected true or false"
                                                    : count ? "expected a whole number"
                                                            : "expected a number") +
                                            ", got " + v.dump());
        }
        m.sampling = s;
    }

    const auto& configs = j["configs"];
    if (!configs.is_object() || configs.empty())
        r.fail("configs", "expected an object of named accelerator configs ({\"name\": {...}})");
    for (const auto& item : configs.items()) {
        const std::string f = "configs." + item.key();
        if (item.key() == kBaselineConfig)
            r.fail(f, "\"baseline\" is run by every job (accelerators off); name the others");
        if (item.key().empty() || item.key().find_first_of(",\"\n/") != std::string::npos)
            r.fail(f, "a config name must be non-empty without , \" / or newlines");
        nlohmann::json accel = item.value();
        if (accel.is_string()) {  // a preset name, or a file next to the manifest
            const fs::path p = accel.get<std::string>();
            if (p.is_relative() && !base_dir.empty() && fs::exists(fs::path(base_dir) / p))
                accel = (fs::path(base_dir) / p).string();
        } else if (!accel.is_object()) {
            r.fail(f, "expected an accelerator config (object), a preset name or a file");
        }
        m.configs.push_back({item.key(), accel});
    }
    m.output_dir = r.path(j["output_dir"], "output_dir", false);
    if (j.contains("save_images")) {
        if (!j["save_images"].is_boolean()) r.fail("save_images", "expected true or false");
        m.save_images = j["save_images"].get<bool>();
    }
    if (j.contains("warmup")) {
        if (!j["warmup"].is_boolean()) r.fail("warmup", "expected true or false");
        m.warmup = j["warmup"].get<bool>();
    }
    if (j.contains("overlap_scoring")) {
        if (!j["overlap_scoring"].is_boolean()) r.fail("overlap_scoring", "expected true or false");
        m.overlap_scoring = j["overlap_scoring"].get<bool>();
    }
    if (j.contains("rank_timeout_s")) {
        if (!j["rank_timeout_s"].is_number() || j["rank_timeout_s"].get<double>() <= 0)
            r.fail("rank_timeout_s", "expected a positive number of seconds");
        m.rank_timeout_s = j["rank_timeout_s"].get<double>();
    }
    if (j.contains("metrics")) m.metrics = read_metrics(r, j["metrics"]);
    return m;
}

EvalManifest read_manifest(const std::string& path) {
    const std::string source = "'" + path + "'";
    nlohmann::json j;
    try {
        j = read_json_file(path, "manifest " + source);
    } catch (const JsonReadError& e) {
        throw ManifestError(e.what());
    }
    return parse_manifest(j, source, fs::path(path).parent_path().string());
}

}  // namespace varscope
