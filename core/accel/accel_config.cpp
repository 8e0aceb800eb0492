#include "core/accel/accel_config.h"

#include <fstream>
#include <sstream>

namespace varscope {
namespace {

const std::vector<std::string>& method_ids() {
    static const std::vector<std::string> ids = {"skip", "fastvar", "sparvar", "lazyvar", "ams_kv"};
    return ids;
}

}  // namespace

bool AccelConfig::any_enabled() const {
    return skip.enabled || fastvar.enabled || sparvar.enabled || lazyvar.enabled || ams_kv.enabled;
}

std::string AccelConfig::summary() const {
    std::string s;
    auto add = [&](bool on, const std::string& name) {
        if (on) s += (s.empty() ? "" : " + ") + name;
    };
    add(skip.enabled, "skip-" + std::to_string(skip.last_n));
    add(fastvar.enabled, "FastVAR");
    add(sparvar.enabled, "SparVAR");
    add(lazyvar.enabled, "LazyVAR");
    add(ams_kv.enabled, "AMS-KV");
    return s.empty() ? "baseline" : s;
}

AccelConfig AccelConfig::from_json(const nlohmann::json& j) {
    if (!j.is_object()) throw AccelConfigError("accelerator config must be a JSON object");
    for (const auto& [key, value] : j.items()) {
        bool known = false;
        for (const auto& id : method_ids()) known = known || id == key;
        if (!known) {
            std::string allowed;
            for (const auto& id : method_ids()) allowed += (allowed.empty() ? "" : ", ") + id;
            throw AccelConfigError(key + ": unknown accelerator (allowed: " + allowed + ")");
        }
    }
    auto part = [&](const char* id) {
        auto it = j.find(id);
        return it == j.end() ? nlohmann::json{{"enabled", false}} : *it;
    };
    AccelConfig c;
    c.skip = ScaleSkipConfig::from_json(part("skip"));
    c.fastvar = FastVarConfig::from_json(part("fastvar"));
    c.sparvar = SparVarConfig::from_json(part("sparvar"));
    c.lazyvar = LazyVarConfig::from_json(part("lazyvar"));
    c.ams_kv = AmsKvConfig::from_json(part("ams_kv"));
    return c;
}

AccelConfig AccelConfig::from_file(const std::string& path) {
    const nlohmann::json j = accel_file_json(path, "");
    return with_config_path(path, [&] { return from_json(j); });
}

AccelConfig AccelConfig::from_argument(const std::string& arg) {
    std::string file;
    const nlohmann::json j = accel_argument_json(arg, accel_presets(), "", &file);
    return with_config_path(file, [&] { return from_json(j); });
}

nlohmann::json AccelConfig::to_json() const {
    return {{"skip", skip.to_json()},
            {"fastvar", fastvar.to_json()},
            {"sparvar", sparvar.to_json()},
            {"lazyvar", lazyvar.to_json()},
            {"ams_kv", ams_kv.to_json()}};
}

const std::vector<MethodSpec>& accel_methods() {
    static const std::vector<MethodSpec> all = {ScaleSkipConfig::spec(), FastVarConfig::spec(),
                                                SparVarConfig::spec(), LazyVarConfig::spec(),
                                                AmsKvConfig::spec()};
    return all;
}

const std::map<std::string, nlohmann::json>& accel_presets() {
    static const std::map<std::string, nlohmann::json> presets = [] {
        std::map<std::string, nlohmann::json> p;
        p["baseline"] = nlohmann::json::object();
        for (const auto& m : accel_methods()) {
            auto d = m.defaults();
            d["enabled"] = true;
            p[m.id] = {{m.id, d}};
        }
        auto on = [](const MethodSpec& m) {
            auto d = m.defaults();
            d["enabled"] = true;
            return d;
        };
        // The papers' combinations. sparvar.txt pairs SparVAR with skipping the last 2 scales;
        // the decision scale then stays the one before the first sparse scale that still runs.
        auto sparvar_skip = on(SparVarConfig::spec());
        sparvar_skip["sparse_scales"] = 3;
        auto skip2 = on(ScaleSkipConfig::spec());
        skip2["last_n"] = 2;
        p["sparvar+skip"] = {{"sparvar", sparvar_skip}, {"skip", skip2}};
        p["fastvar+ams_kv"] = {{"fastvar", on(FastVarConfig::spec())},
                               {"ams_kv", on(AmsKvConfig::spec())}};
        // The stacking search of issue #30 (bench/results/2026-11-29-h200/session26): of the
        // stacks within the quality of the papers' own SparVAR + skip-2 on the embedded VAR, the
        // fastest at 1024^2 (3.12x our graphed dense on VAR-d30, 13 scales, bf16, batch 1).
        p["lazyvar+skip"] = {{"lazyvar", on(LazyVarConfig::spec())},
                             {"skip", on(ScaleSkipConfig::spec())}};
        return p;
    }();
    return presets;
}

std::shared_ptr<SamplingHooks> build_accelerators(const AccelConfig& cfg, const VarConfig& model,
                                                  ProbeSink* probe) {
    if (!cfg.any_enabled()) return nullptr;
    // Grouped steps (LazyVAR's PGD) pack several scales into one pass; the per-block token
    // pruning and sparse-attention policies assume one scale per step.
    if (cfg.lazyvar.enabled && (cfg.fastvar.enabled || cfg.sparvar.enabled))
        throw AccelConfigError(
            "lazyvar: cannot be combined with fastvar or sparvar (they prune or sparsify per "
            "scale; LazyVAR decodes groups of scales in one pass)");
    // SparVAR's index mapping needs every query row and the full key prefix of each scale.
    if (cfg.sparvar.enabled && (cfg.fastvar.enabled || cfg.ams_kv.enabled))
        throw AccelConfigError(
            "sparvar: cannot be combined with fastvar or ams_kv (its CS4A index mapping and CSLA "
            "masks address every query token and the full key prefix of each scale)");
    auto chain = std::make_shared<HookChain>();
    if (cfg.skip.enabled) chain->add(make_scale_skip(cfg.skip, model, probe));
    if (cfg.lazyvar.enabled) chain->add(make_lazyvar(cfg.lazyvar, model, probe));
    if (cfg.fastvar.enabled) chain->add(make_fastvar(cfg.fastvar, model, probe));
    if (cfg.sparvar.enabled) chain->add(make_sparvar(cfg.sparvar, model, probe));
    if (cfg.ams_kv.enabled) chain->add(make_ams_kv(cfg.ams_kv, model, probe));
    return chain;
}

}  // namespace varscope
