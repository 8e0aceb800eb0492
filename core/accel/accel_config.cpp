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
    // Every scale-family preset by name (infinity_accel_presets() holds the VAR ones too); a
    // setting that does not fit the model is refused when its hooks are built.
    const nlohmann::json j = accel_argument_json(arg, infinity_accel_presets(), "", &file);
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
        // AMS-KV with its budgets on cuDNN's 128-key tile (ams_kv.h, key_tile): at VAR-d30
        // 1024^2, 13 scales, bf16-autocast on an H200, 1.318x the baseline's best images/s where
        // the paper's budgets give 1.296x (bench/results/2026-12-01-h200/session42).
        auto ams_kv_tiled = on(AmsKvConfig::spec());
        ams_kv_tiled["key_tile"] = 128;
        p["ams_kv-tile128"] = {{"ams_kv", ams_kv_tiled}};
        // The stacking search of issue #30 (bench/results/2026-11-29-h200/session26): of the
        // stacks within the quality of the papers' own SparVAR + skip-2 on the embedded VAR, the
        // fastest at 1024^2 (3.12x our graphed dense on VAR-d30, 13 scales, bf16, batch 1).
        p["lazyvar+skip"] = {{"lazyvar", on(LazyVarConfig::spec())},
                             {"skip", on(ScaleSkipConfig::spec())}};
        return p;
    }();
    return presets;
}

const std::map<std::string, nlohmann::json>& infinity_accel_presets() {
    static const std::map<std::string, nlohmann::json> presets = [] {
        std::map<std::string, nlohmann::json> p = accel_presets();
        auto on = [](const MethodSpec& m) {
            auto d = m.defaults();
            d["enabled"] = true;
            return d;
        };
        // The papers' Infinity-2B settings at 1024^2: 13 scales of sides 1, 2, 4, 6, 8, 12, 16,
        // 20, 24, 32, 40, 48, 64 (si 0..12). docs/accelerators.md cites each.
        // fastvar.txt §4.1 (Implementation Details): the last N = 4 scales pruned by
        // {40 %, 50 %, 100 %, 100 %} (100 % = the scale is skipped); Table 1: 2.7x.
        auto fastvar = on(FastVarConfig::spec());
        fastvar["ratios"] = {0.4, 0.5, 1.0, 1.0};
        p["infinity-fastvar"] = {{"fastvar", fastvar}};
        // lazyvar.txt, "A Complete Example" and the main table (2.94x): scales 1-9 intact,
        // scales 10-13 (si 9..12) one group keeping [20 %, 10 %, 5 %, 1 %], cumulative index.
        auto lazyvar = on(LazyVarConfig::spec());
        lazyvar["start_scale"] = 9;
        lazyvar["group_size"] = 4;
        lazyvar["ratios"] = {0.2, 0.1, 0.05, 0.01};
        lazyvar["cumulative"] = true;
        p["infinity-lazyvar"] = {{"lazyvar", lazyvar}};
        // sparvar.txt App. C (i): decision scale 11 (1-based), the last 2 scales sparse; CS4A to
        // CSLA 6:4; the rest at the paper's defaults (SparVAR's table defaults are these).
        // Table 2: 1.38x on 2B, 1.57x on 8B.
        auto sparvar = on(SparVarConfig::spec());
        sparvar["sparse_scales"] = 2;
        sparvar["cs4a_fraction"] = 0.6;
        p["infinity-sparvar"] = {{"sparvar", sparvar}};
        // App. C (ii): the last 2 scales skipped, decision scale 10, only scale 11 sparse
        // (sparse_scales counts from the end of the full schedule). Table 2: 1.70x / 2.28x.
        auto sparvar_skip = sparvar;
        sparvar_skip["sparse_scales"] = 3;
        auto skip2 = on(ScaleSkipConfig::spec());
        skip2["last_n"] = 2;
        p["infinity-sparvar+skip"] = {{"sparvar", sparvar_skip}, {"skip", skip2}};
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
    if (cfg.lazyvar.enabled) {
        try {
            chain->add(make_lazyvar(cfg.lazyvar, model, probe));
        } catch (const AccelConfigError& e) {
            // A setting written for a longer schedule: name one that fits this model (not
            // applied here: an index is not clipped silently).
            std::vector<std::string> notes;
            const auto fitted = fit_to_schedule(cfg.lazyvar, model.num_scales(), &notes);
            if (notes.empty()) throw;
            throw AccelConfigError(std::string(e.what()) + " (for the model's " +
                                   std::to_string(model.num_scales()) +
                                   " scales, with the pruned scales at the end: " +
                                   nlohmann::json{{"lazyvar", fitted.to_json()}}.dump() + ")");
        }
    }
    if (cfg.fastvar.enabled) chain->add(make_fastvar(cfg.fastvar, model, probe));
    if (cfg.sparvar.enabled) chain->add(make_sparvar(cfg.sparvar, model, probe));
    if (cfg.ams_kv.enabled) chain->add(make_ams_kv(cfg.ams_kv, model, probe));
    return chain;
}

AccelConfig fit_to_schedule(const AccelConfig& cfg, int64_t scales,
                            std::vector<std::string>* notes) {
    AccelConfig out = cfg;
    out.lazyvar = fit_to_schedule(cfg.lazyvar, scales, notes);
    return out;
}

}  // namespace varscope
