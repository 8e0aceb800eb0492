#include "core/exec_policy.h"

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <utility>
#include <vector>

#include "core/io/json_fields.h"

namespace varscope {
namespace {

using kernels::DiffCachedLayout;
using nlohmann::json;

// A setting whose JSON value is one of a few names.
template <class T>
using Choices = std::vector<std::pair<const char*, T>>;

// The choices' names, the default first (the values docs/exec-policy.md lists).
const Choices<DiffCachedLayout> kLayouts{{"auto", DiffCachedLayout::Auto},
                                         {"channels", DiffCachedLayout::Channels},
                                         {"split", DiffCachedLayout::Split},
                                         {"rows", DiffCachedLayout::Rows}};
const Choices<bool> kHookGraphs{{"steps", true}, {"diffusion", false}};
const Choices<bool> kGraphPool{{"chained", true}, {"own", false}};
const Choices<bool> kSimilarity{{"auto", false}, {"reference", true}};

template <class T>
const char* name_of(const Choices<T>& c, T v) {
    for (const auto& [n, x] : c)
        if (x == v) return n;
    return "?";
}

template <class T>
T choice(const json& v, const char* key, const Choices<T>& c) {
    std::string names;
    for (const auto& [n, x] : c) {
        if (v.is_string() && v.get<std::string>() == n) return x;
        names += std::string(names.empty() ? "" : ", ") + n;
    }
    throw std::invalid_argument(std::string("exec policy: '") + key + "' must be one of " + names +
                                ", got " + v.dump());
}

bool flag(const json& v, const char* key) {
    if (!v.is_boolean())
        throw std::invalid_argument(std::string("exec policy: '") + key +
                                    "' must be true or false, got " + v.dump());
    return v.get<bool>();
}

int64_t rows_or_auto(const json& v, const char* key) {
    if (v.is_string() && v.get<std::string>() == "auto") return -1;
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
        throw std::invalid_argument(std::string("exec policy: '") + key +
                                    "' must be \"auto\" or a whole number >= 0, got " + v.dump());
    return v.get<int64_t>();
}

}  // namespace

int64_t ExecPolicy::mar_fused_head_max_rows(int64_t width) const {
    if (mar_fused_max_rows >= 0) return mar_fused_max_rows;
    return width <= 1024 ? 16 : 8;
}

bool ExecPolicy::operator==(const ExecPolicy& o) const {
    return kernels == o.kernels && mar_fused_head == o.mar_fused_head &&
           mar_fused_max_rows == o.mar_fused_max_rows &&
           mar_hybrid_cached_step == o.mar_hybrid_cached_step &&
           mar_full_modulations == o.mar_full_modulations &&
           mar_hook_step_graphs == o.mar_hook_step_graphs &&
           mar_chained_graph_pool == o.mar_chained_graph_pool &&
           var_chained_graph_pool == o.var_chained_graph_pool &&
           ams_kv_reference_similarity == o.ams_kv_reference_similarity &&
           profile_ams_kv == o.profile_ams_kv;
}

json to_json(const ExecPolicy& p) {
    const auto& k = p.kernels;
    return {{"reference_kernels", k.reference},
            {"sm90_attention", k.sm90_attention},
            {"fused_rope", k.fused_rope},
            {"fused_elementwise", k.fused_elementwise},
            {"diff_pdl", k.diff.pdl},
            {"diff_row_split", k.diff.row_split},
            {"diff_fold_proj", k.diff.fold_proj},
            {"diff_lean", k.diff.lean},
            {"diff_cached_layout", name_of(kLayouts, k.diff.cached_layout)},
            {"mar_fused_head", p.mar_fused_head},
            {"mar_fused_max_rows",
             p.mar_fused_max_rows < 0 ? json("auto") : json(p.mar_fused_max_rows)},
            {"mar_hybrid_cached_step", p.mar_hybrid_cached_step},
            {"mar_full_modulations", p.mar_full_modulations},
            {"mar_hook_graphs", name_of(kHookGraphs, p.mar_hook_step_graphs)},
            {"mar_graph_pool", name_of(kGraphPool, p.mar_chained_graph_pool)},
            {"var_graph_pool", name_of(kGraphPool, p.var_chained_graph_pool)},
            {"ams_kv_similarity", name_of(kSimilarity, p.ams_kv_reference_similarity)},
            {"profile_ams_kv", p.profile_ams_kv}};
}

ExecPolicy exec_policy_from_json(const json& j) {
    if (!j.is_object())
        throw std::invalid_argument("exec policy: expected a JSON object, got " + j.dump());
    ExecPolicy p;
    require_known_fields(j, to_json(p), "exec policy");
    auto& k = p.kernels;
    for (const auto& [key, v] : j.items()) {
        const char* n = key.c_str();
        if (key == "reference_kernels")
            k.reference = flag(v, n);
        else if (key == "sm90_attention")
            k.sm90_attention = flag(v, n);
        else if (key == "fused_rope")
            k.fused_rope = flag(v, n);
        else if (key == "fused_elementwise")
            k.fused_elementwise = flag(v, n);
        else if (key == "diff_pdl")
            k.diff.pdl = flag(v, n);
        else if (key == "diff_row_split")
            k.diff.row_split = flag(v, n);
        else if (key == "diff_fold_proj")
            k.diff.fold_proj = flag(v, n);
        else if (key == "diff_lean")
            k.diff.lean = flag(v, n);
        else if (key == "diff_cached_layout")
            k.diff.cached_layout = choice(v, n, kLayouts);
        else if (key == "mar_fused_head")
            p.mar_fused_head = flag(v, n);
        else if (key == "mar_fused_max_rows")
            p.mar_fused_max_rows = rows_or_auto(v, n);
        else if (key == "mar_hybrid_cached_step")
            p.mar_hybrid_cached_step = flag(v, n);
        else if (key == "mar_full_modulations")
            p.mar_full_modulations = flag(v, n);
        else if (key == "mar_hook_graphs")
            p.mar_hook_step_graphs = choice(v, n, kHookGraphs);
        else if (key == "mar_graph_pool")
            p.mar_chained_graph_pool = choice(v, n, kGraphPool);
        else if (key == "var_graph_pool")
            p.var_chained_graph_pool = choice(v, n, kGraphPool);
        else if (key == "ams_kv_similarity")
            p.ams_kv_reference_similarity = choice(v, n, kSimilarity);
        else if (key == "profile_ams_kv")
            p.profile_ams_kv = flag(v, n);
    }
    return p;
}

std::string describe(const ExecPolicy& p) {
    const json set = to_json(p), defaults = to_json(ExecPolicy{});
    std::string out;
    for (const auto& [key, v] : set.items()) {
        if (v == defaults.at(key)) continue;
        out += (out.empty() ? "" : ", ") + key + "=" +
               (v.is_string() ? v.get<std::string>() : v.dump());
    }
    return out.empty() ? "defaults" : out;
}

}  // namespace varscope
