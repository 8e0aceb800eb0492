#include "app/exec_env/exec_env.h"

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/resources.h"

namespace varscope::exec_env {
namespace {

enum class Kind { Switch, Choice, Rows, Removed, Path };

// A choice's names are core's (exec_policy_from_json checks them; `values` says them for people).
struct Entry {
    Variable doc;
    Kind kind;
};

const std::vector<Entry>& entries() {
    static const std::vector<Entry> table{
        {{"VARSCOPE_REFERENCE_KERNELS", "reference_kernels", "0 or 1",
          "0: the CUDA kernels where they apply; 1: every kernels/ dispatcher runs its LibTorch "
          "reference (debugging)"},
         Kind::Switch},
        {{"VARSCOPE_FUSED_ROPE", "fused_rope", "0 or 1",
          "1: Infinity's q/k RoPE and bf16 cast as one CUDA kernel; 0: the ATen operations "
          "(same bits)"},
         Kind::Switch},
        {{"VARSCOPE_FUSED_ELEMENTWISE", "fused_elementwise", "0 or 1",
          "1: the bf16-autocast blocks' AdaLN modulation + bf16 cast, gated residual sums and "
          "VAR's q/k normalisation as one CUDA kernel each; 0: the ATen operations (same bits)"},
         Kind::Switch},
        {{"VARSCOPE_DIFF_PDL", "diff_pdl", "0 or 1",
          "1: programmatic dependent launch between the fused DiffLoss kernels; 0: without"},
         Kind::Switch},
        {{"VARSCOPE_DIFF_ROW_SPLIT", "diff_row_split", "0 or 1",
          "1: DiffLoss linear layers over 8 rows in 8-row tiles, one CTA each; 0: 16/32-row "
          "tiles per CTA (within one 16-bit ulp)"},
         Kind::Switch},
        {{"VARSCOPE_DIFF_FOLD_PROJ", "diff_fold_proj", "0 or 1",
          "1: the DiffLoss input projection folded into block 0's fc1 kernel; 0: two kernels"},
         Kind::Switch},
        {{"VARSCOPE_DIFF_LEAN", "diff_lean", "0 or 1",
          "1: the lean DiffLoss linear-layer kernels (LayerNorm affine staged early, empty rows "
          "skipped); 0: the plain ones"},
         Kind::Switch},
        {{"VARSCOPE_DIFF_CACHED_LAYOUT", "diff_cached_layout", "auto, channels, split or rows",
          "auto: split at 1 latent, rows above; the others force the head MLP cache's one-kernel "
          "step's CTA layout (kernels/exec_policy.h)"},
         Kind::Choice},
        {{"VARSCOPE_MAR_FUSED_HEAD", "mar_fused_head", "0 or 1",
          "1: MAR's DiffLoss head on the fused kernels where they take it; 0: always the module "
          "path"},
         Kind::Switch},
        {{"VARSCOPE_MAR_FUSED_MAX_ROWS", "mar_fused_max_rows", "auto or a whole number >= 0",
          "auto: the fused head kernels up to 16 rows (2N with CFG) for heads up to width 1024, "
          "8 above; N: up to N rows"},
         Kind::Rows},
        {{"VARSCOPE_MAR_HYBRID_CACHED_STEP", "mar_hybrid_cached_step", "0 or 1",
          "1: beyond the fused rows, the head MLP cache's reuse steps as one kernel; 0: module "
          "path throughout"},
         Kind::Switch},
        {{"VARSCOPE_MAR_FULL_MODULATIONS", "mar_full_modulations", "0 or 1",
          "0: beyond the fused rows the head computes only the AdaLN modulations each step uses; "
          "1: all of them"},
         Kind::Switch},
        {{"VARSCOPE_MAR_HOOK_GRAPHS", "mar_hook_graphs", "steps or diffusion",
          "steps: MAR hooks with a graph signature run inside whole-step CUDA graphs; diffusion: "
          "the transformer stays eager, only the reverse diffusion is a graph"},
         Kind::Choice},
        {{"VARSCOPE_MAR_GRAPH_POOL", "mar_graph_pool", "chained or own",
          "chained: MAR's whole-step graphs share one memory pool; own: a pool per graph"},
         Kind::Choice},
        {{"VARSCOPE_VAR_GRAPH_POOL", "var_graph_pool", "chained or own",
          "chained: the VAR and Infinity loops' per-scale step graphs share one memory pool; "
          "own: a pool per step graph"},
         Kind::Choice},
        {{"VARSCOPE_AMS_KV_SIMILARITY", "ams_kv_similarity", "auto or reference",
          "auto: AMS-KV's scale similarity on the fused CUDA kernel where it runs; reference: "
          "the Gram-matrix reference"},
         Kind::Choice},
        {{"VARSCOPE_PROFILE_AMS_KV", "profile_ams_kv", "0 or 1",
          "1: AMS-KV prints where its eviction step's time went after every image (synchronises "
          "the device)"},
         Kind::Switch},
        {{"VARSCOPE_SM90_IMPL", "", "(removed)",
          "chose among sm_90a attention schedules that were deleted as never the default "
          "(bench/results/pruned-kernels.md); setting it is an error"},
         Kind::Removed},
        {{"VARSCOPE_RESOURCES", "", "a folder",
          "where the shipped models are (default: share/varscope beside the program, else the "
          "source tree's resources/)"},
         Kind::Path},
    };
    return table;
}

// The process's environment as a Lookup.
const char* process_environment(const char* name) {
    return std::getenv(name);
}

[[noreturn]] void reject(const char* name, const std::string& value, const std::string& takes) {
    throw std::invalid_argument(std::string(name) + "='" + value + "': expected " + takes +
                                " (docs/exec-policy.md; unset it for the default)");
}

// The variable's value as its ExecPolicy JSON value (the rule in exec_env.h); a choice's name is
// checked by exec_policy_from_json.
nlohmann::json parse(const Entry& e, const std::string& v) {
    const char* name = e.doc.name;
    switch (e.kind) {
        case Kind::Switch:
            if (v == "0" || v == "1") return v == "1";
            reject(name, v, "0 or 1");
        case Kind::Choice:
            return v;
        case Kind::Rows: {
            if (v == "auto") return v;
            const bool digits = v.find_first_not_of("0123456789") == std::string::npos;
            if (!digits || v.size() > 18) reject(name, v, e.doc.values);
            return std::stoll(v);
        }
        case Kind::Removed:
            throw std::invalid_argument(std::string(name) + "='" + v +
                                        "': this variable was removed: the sm_90a attention "
                                        "kernels it chose among were deleted, each head dim runs "
                                        "its measured-fastest one (bench/results/"
                                        "pruned-kernels.md); unset it");
        case Kind::Path:
            break;
    }
    return v;
}

}  // namespace

const std::vector<Variable>& variables() {
    static const std::vector<Variable> docs = [] {
        std::vector<Variable> d;
        for (const auto& e : entries()) d.push_back(e.doc);
        return d;
    }();
    return docs;
}

ExecPolicy policy_from(const Lookup& env) {
    nlohmann::json settings = nlohmann::json::object();
    for (const auto& e : entries()) {
        const char* value = env(e.doc.name);
        if (value == nullptr || *value == '\0' || e.kind == Kind::Path) continue;
        const auto parsed = parse(e, value);
        if (*e.doc.key == '\0') continue;
        try {  // core's check of this one setting (a choice's names), under the variable's name
            exec_policy_from_json({{e.doc.key, parsed}});
        } catch (const std::invalid_argument&) {
            reject(e.doc.name, value, e.doc.values);
        }
        settings[e.doc.key] = parsed;
    }
    return exec_policy_from_json(settings);
}

ExecPolicy policy_from_environment() {
    return policy_from(process_environment);
}

std::string resource_dir_from(const Lookup& env) {
    const char* v = env("VARSCOPE_RESOURCES");
    return v != nullptr ? v : "";
}

void apply_resource_dir_from_environment() {
    set_resource_dir_override(resource_dir_from(process_environment));
}

}  // namespace varscope::exec_env
