// `varscope-cli methods`: the accelerators, their hyperparameters (paper symbol, range, default)
// and the presets, from the same tables that validate configs and build the GUI's sliders.
#include <iostream>

#include "app/cli/commands.h"
#include "core/accel/accel_config.h"
#include "core/accel/mar_accel_config.h"

namespace varscope::cli {
namespace {

const char* kind_text(ParamKind k) {
    switch (k) {
        case ParamKind::Bool:
            return "bool";
        case ParamKind::Int:
            return "int";
        case ParamKind::Real:
            return "real";
        case ParamKind::IntList:
            return "int list";
        case ParamKind::RealList:
            return "real list";
    }
    return "?";
}

// One model family's accelerators: VAR's (generate/compare --accel) or MAR's (compare-mar).
struct Family {
    const char* name;
    const char* flag;
    const std::vector<MethodSpec>& methods;
    std::map<std::string, nlohmann::json> presets;
};

nlohmann::json family_json(const Family& f) {
    nlohmann::json j = {{"presets", f.presets}, {"methods", nlohmann::json::array()}};
    for (const auto& m : f.methods) {
        nlohmann::json params = nlohmann::json::array();
        for (const auto& p : m.params) {
            params.push_back({{"key", p.key},
                              {"label", p.label},
                              {"symbol", p.symbol},
                              {"kind", kind_text(p.kind)},
                              {"min", p.min},
                              {"max", p.max},
                              {"default", p.default_value},
                              {"help", p.help}});
            if (p.counts != ParamCount::None)  // the largest value a model accepts: count + offset
                params.back()["model_bound"] = {{"count", param_count_name(p.counts)},
                                                {"offset", p.count_offset}};
        }
        j["methods"].push_back({{"id", m.id},
                                {"title", m.title},
                                {"paper", m.paper},
                                {"summary", m.summary},
                                {"params", params}});
    }
    return j;
}

void print_family(const Family& f, bool markdown) {
    for (const auto& m : f.methods) {
        if (markdown) {
            std::cout << "### " << m.title << " (`" << m.id << "`)\n\n"
                      << m.summary << " Source: " << m.paper
                      << ".\n\n| key | symbol | type | range | default | meaning "
                         "|\n|---|---|---|---|---|---|\n";
            for (const auto& p : m.params)
                std::cout << "| `" << p.key << "` | " << p.symbol << " | " << kind_text(p.kind)
                          << " | [" << p.min << ", " << p.max << "]" << model_bound_text(p)
                          << " | `" << p.default_value.dump() << "` | " << p.help << " |\n";
            std::cout << "\n";
            continue;
        }
        std::cout << m.title << " (\"" << m.id << "\") - " << m.summary << "\n  source: " << m.paper
                  << "\n";
        for (const auto& p : m.params)
            std::cout << "  " << p.key << (p.symbol.empty() ? "" : " (" + p.symbol + ")") << ": "
                      << kind_text(p.kind) << " in [" << p.min << ", " << p.max << "]"
                      << model_bound_text(p) << ", default " << p.default_value.dump() << "\n      "
                      << p.help << "\n";
    }
    std::cout << (markdown ? std::string("### ") + f.name + " presets\n\n"
                           : std::string(f.name) + " presets (" + f.flag + " NAME):\n");
    for (const auto& [name, j] : f.presets)
        std::cout << (markdown ? "- `" + name + "`: `" + j.dump() + "`\n"
                               : "  " + name + ": " + j.dump() + "\n");
}

// Infinity runs the VAR methods through the same hooks; its own presets are the papers'
// Infinity-2B settings (the VAR presets apply too).
void print_infinity_presets(bool markdown) {
    std::cout << (markdown ? "\n### Infinity presets\n\nThe VAR methods and presets, and the "
                             "papers' Infinity-2B settings for its 13-scale 1024² schedule:\n\n"
                           : "Infinity presets (the VAR ones and these; generate/compare "
                             "--accel NAME):\n");
    for (const auto& [name, j] : infinity_accel_presets()) {
        if (accel_presets().count(name)) continue;
        std::cout << (markdown ? "- `" + name + "`: `" + j.dump() + "`\n"
                               : "  " + name + ": " + j.dump() + "\n");
    }
}

int run(bool json, bool markdown) {
    const Family var{"VAR", "generate/compare --accel", accel_methods(), accel_presets()};
    const Family infinity{"Infinity", "generate/compare --accel", accel_methods(),
                          infinity_accel_presets()};
    const Family mar{"MAR", "compare-mar --accel", mar_accel_methods(), mar_accel_presets()};
    if (json) {
        nlohmann::json j = family_json(var);  // top level: VAR (as before); the others by name
        j["infinity"] = family_json(infinity);
        j["mar"] = family_json(mar);
        std::cout << j.dump(2) << "\n";
        return 0;
    }
    if (markdown) std::cout << "## VAR accelerators\n\n";
    print_family(var, markdown);
    print_infinity_presets(markdown);
    std::cout << (markdown ? "\n## MAR accelerators\n\n" : "\n");
    print_family(mar, markdown);
    return 0;
}

}  // namespace

Command add_methods(CLI::App& app) {
    auto* cmd =
        app.add_subcommand("methods", "list the accelerators, their hyperparameters and presets");
    auto json = std::make_shared<bool>(false);
    auto md = std::make_shared<bool>(false);
    cmd->add_flag("--json", *json, "as JSON");
    cmd->add_flag("--markdown", *md, "as Markdown tables (docs/accelerators.md)");
    return [json, md]() { return run(*json, *md); };
}

}  // namespace varscope::cli
