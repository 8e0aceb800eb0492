// The execution policy (core/exec_policy.h) and the one place that fills it from the environment
// (app/exec_env): today's defaults, one parsing rule with clear errors, the JSON form, the
// documentation table, and no getenv below app/ and ui/.
#include "core/exec_policy.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "app/exec_env/exec_env.h"
#include "tests/cli_run.h"
#include "tests/test_util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using varscope::ExecPolicy;
using varscope::kernels::DiffCachedLayout;
namespace exec_env = varscope::exec_env;

// An environment of the given variables only.
exec_env::Lookup env_of(std::map<std::string, std::string> vars) {
    return [vars = std::move(vars)](const char* name) -> const char* {
        const auto it = vars.find(name);
        return it == vars.end() ? nullptr : it->second.c_str();
    };
}

// The message policy_from throws for one variable set to `value` ("" when it does not throw).
std::string error_for(const std::string& name, const std::string& value) {
    try {
        exec_env::policy_from(env_of({{name, value}}));
    } catch (const std::invalid_argument& e) {
        return e.what();
    }
    return "";
}

std::string read_file(const std::string& path) {
    std::ifstream f(path);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

}  // namespace

// The defaults are what ran before the policy existed with no VARSCOPE_* variable set (each was
// read where it was used, defaulting as below).
TEST(ExecPolicy, DefaultsAreTheBehaviourWithoutVariables) {
    const ExecPolicy p;
    EXPECT_FALSE(p.kernels.reference);
    EXPECT_TRUE(p.kernels.sm90_attention);
    EXPECT_TRUE(p.kernels.fused_rope);
    EXPECT_TRUE(p.kernels.fused_elementwise);
    EXPECT_TRUE(p.kernels.diff.pdl);
    EXPECT_TRUE(p.kernels.diff.row_split);
    EXPECT_TRUE(p.kernels.diff.fold_proj);
    EXPECT_TRUE(p.kernels.diff.lean);
    EXPECT_EQ(p.kernels.diff.cached_layout, DiffCachedLayout::Auto);
    EXPECT_TRUE(p.mar_fused_head);
    EXPECT_EQ(p.mar_fused_max_rows, -1);
    EXPECT_EQ(p.mar_fused_head_max_rows(1024), 16);  // by width: 16 up to 1024, 8 above
    EXPECT_EQ(p.mar_fused_head_max_rows(1280), 8);
    EXPECT_TRUE(p.mar_hybrid_cached_step);
    EXPECT_FALSE(p.mar_full_modulations);
    EXPECT_TRUE(p.mar_hook_step_graphs);
    EXPECT_TRUE(p.mar_chained_graph_pool);
    EXPECT_TRUE(p.var_chained_graph_pool);
    EXPECT_FALSE(p.ams_kv_reference_similarity);
    EXPECT_FALSE(p.profile_ams_kv);
    EXPECT_EQ(varscope::describe(p), "defaults");
    // No variable, or every variable empty: the defaults.
    EXPECT_EQ(exec_env::policy_from(env_of({})), p);
    std::map<std::string, std::string> empty;
    for (const auto& v : exec_env::variables()) empty[v.name] = "";
    EXPECT_EQ(exec_env::policy_from(env_of(empty)), p);
}

TEST(ExecPolicy, JsonRoundTripAndStrictReading) {
    const ExecPolicy defaults;
    EXPECT_EQ(varscope::exec_policy_from_json(varscope::to_json(defaults)), defaults);
    EXPECT_EQ(varscope::exec_policy_from_json(json::object()), defaults);
    ExecPolicy p;
    p.kernels.reference = true;
    p.kernels.sm90_attention = false;
    p.kernels.fused_rope = false;
    p.kernels.fused_elementwise = false;
    p.kernels.diff = {false, false, false, false, DiffCachedLayout::Rows};
    p.mar_fused_head = false;
    p.mar_fused_max_rows = 256;
    p.mar_hybrid_cached_step = false;
    p.mar_full_modulations = true;
    p.mar_hook_step_graphs = false;
    p.mar_chained_graph_pool = false;
    p.var_chained_graph_pool = false;
    p.ams_kv_reference_similarity = true;
    p.profile_ams_kv = true;
    const json j = varscope::to_json(p);
    EXPECT_EQ(j["diff_cached_layout"], "rows");
    EXPECT_EQ(j["mar_fused_max_rows"], 256);
    EXPECT_EQ(j["mar_hook_graphs"], "diffusion");
    EXPECT_EQ(j["mar_graph_pool"], "own");
    EXPECT_EQ(j["var_graph_pool"], "own");
    EXPECT_EQ(j["ams_kv_similarity"], "reference");
    EXPECT_EQ(varscope::to_json(defaults)["mar_fused_max_rows"], "auto");
    EXPECT_EQ(varscope::exec_policy_from_json(j), p);
    EXPECT_EQ(varscope::exec_policy_from_json(json::parse(j.dump())), p);  // through text
    // Each setting changes the policy (none is lost in the round trip above by accident).
    for (const auto& [key, v] : j.items()) {
        const ExecPolicy one = varscope::exec_policy_from_json({{key, v}});
        EXPECT_NE(one, defaults) << key;
        EXPECT_NE(varscope::describe(one).find(key), std::string::npos) << key;
    }
    // Unknown keys and values of the wrong kind are errors naming the key.
    auto message = [](const json& bad) {
        try {
            varscope::exec_policy_from_json(bad);
        } catch (const std::invalid_argument& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    EXPECT_NE(message({{"diff_pdll", false}}).find("diff_pdll"), std::string::npos);
    EXPECT_NE(message({{"diff_pdl", 0}}).find("diff_pdl"), std::string::npos);
    EXPECT_NE(message({{"diff_cached_layout", "columns"}}).find("diff_cached_layout"),
              std::string::npos);
    EXPECT_NE(message({{"mar_fused_max_rows", -3}}).find("mar_fused_max_rows"), std::string::npos);
    EXPECT_NE(message({{"mar_fused_max_rows", "many"}}).find("mar_fused_max_rows"),
              std::string::npos);
    EXPECT_NE(message(json::array()).find("object"), std::string::npos);
}

// Every variable with a value it takes sets its field; with any other value it stops the
// program with a message that names it, the value and what it takes.
TEST(ExecEnv, OneRuleForEveryVariable) {
    const ExecPolicy p = exec_env::policy_from(env_of({{"VARSCOPE_REFERENCE_KERNELS", "1"},
                                                       {"VARSCOPE_DIFF_PDL", "0"},
                                                       {"VARSCOPE_FUSED_ROPE", "0"},
                                                       {"VARSCOPE_FUSED_ELEMENTWISE", "0"},
                                                       {"VARSCOPE_DIFF_ROW_SPLIT", "0"},
                                                       {"VARSCOPE_DIFF_FOLD_PROJ", "0"},
                                                       {"VARSCOPE_DIFF_LEAN", "0"},
                                                       {"VARSCOPE_DIFF_CACHED_LAYOUT", "split"},
                                                       {"VARSCOPE_MAR_FUSED_HEAD", "0"},
                                                       {"VARSCOPE_MAR_FUSED_MAX_ROWS", "256"},
                                                       {"VARSCOPE_MAR_HYBRID_CACHED_STEP", "0"},
                                                       {"VARSCOPE_MAR_FULL_MODULATIONS", "1"},
                                                       {"VARSCOPE_MAR_HOOK_GRAPHS", "diffusion"},
                                                       {"VARSCOPE_MAR_GRAPH_POOL", "own"},
                                                       {"VARSCOPE_VAR_GRAPH_POOL", "own"},
                                                       {"VARSCOPE_AMS_KV_SIMILARITY", "reference"},
                                                       {"VARSCOPE_PROFILE_AMS_KV", "1"}}));
    EXPECT_TRUE(p.kernels.reference);
    EXPECT_FALSE(p.kernels.fused_rope);
    EXPECT_FALSE(p.kernels.fused_elementwise);
    EXPECT_FALSE(p.kernels.diff.pdl);
    EXPECT_FALSE(p.kernels.diff.row_split);
    EXPECT_FALSE(p.kernels.diff.fold_proj);
    EXPECT_FALSE(p.kernels.diff.lean);
    EXPECT_EQ(p.kernels.diff.cached_layout, DiffCachedLayout::Split);
    EXPECT_FALSE(p.mar_fused_head);
    EXPECT_EQ(p.mar_fused_max_rows, 256);
    EXPECT_EQ(p.mar_fused_head_max_rows(1024), 256);
    EXPECT_FALSE(p.mar_hybrid_cached_step);
    EXPECT_TRUE(p.mar_full_modulations);
    EXPECT_FALSE(p.mar_hook_step_graphs);
    EXPECT_FALSE(p.mar_chained_graph_pool);
    EXPECT_FALSE(p.var_chained_graph_pool);
    EXPECT_TRUE(p.ams_kv_reference_similarity);
    EXPECT_TRUE(p.profile_ams_kv);
    EXPECT_TRUE(p.kernels.sm90_attention);  // no variable
    // The defaults spelt out are the defaults.
    EXPECT_EQ(exec_env::policy_from(env_of({{"VARSCOPE_DIFF_PDL", "1"},
                                            {"VARSCOPE_DIFF_CACHED_LAYOUT", "auto"},
                                            {"VARSCOPE_MAR_FUSED_MAX_ROWS", "auto"},
                                            {"VARSCOPE_MAR_HOOK_GRAPHS", "steps"},
                                            {"VARSCOPE_MAR_GRAPH_POOL", "chained"},
                                            {"VARSCOPE_VAR_GRAPH_POOL", "chained"},
                                            {"VARSCOPE_AMS_KV_SIMILARITY", "auto"},
                                            {"VARSCOPE_PROFILE_AMS_KV", "0"}})),
              ExecPolicy{});
    EXPECT_EQ(exec_env::policy_from(env_of({{"VARSCOPE_MAR_FUSED_MAX_ROWS", "0"}}))
                  .mar_fused_head_max_rows(512),
              0);
    // Bad values: switches take 0 or 1 only, choices their names exactly, counts digits.
    const std::map<std::string, std::vector<std::string>> bad{
        {"VARSCOPE_DIFF_PDL", {"off", "true", "2", " 1", "yes"}},
        {"VARSCOPE_REFERENCE_KERNELS", {"on", "01x"}},
        {"VARSCOPE_PROFILE_AMS_KV", {"y"}},
        {"VARSCOPE_DIFF_CACHED_LAYOUT", {"Rows", "row", "columns"}},
        {"VARSCOPE_MAR_HOOK_GRAPHS", {"step", "none"}},
        {"VARSCOPE_MAR_GRAPH_POOL", {"shared"}},
        {"VARSCOPE_VAR_GRAPH_POOL", {"one", "Own"}},
        {"VARSCOPE_AMS_KV_SIMILARITY", {"cuda", "ref"}},
        {"VARSCOPE_MAR_FUSED_MAX_ROWS", {"-1", "16 ", "1e3", "x", "99999999999999999999"}}};
    for (const auto& [name, values] : bad)
        for (const auto& v : values) {
            const std::string e = error_for(name, v);
            EXPECT_NE(e.find(name), std::string::npos) << name << "=" << v << ": " << e;
            EXPECT_NE(e.find("'" + v + "'"), std::string::npos) << e;
            EXPECT_NE(e.find("expected"), std::string::npos) << e;
        }
    // The removed schedule switch is an error that says why.
    const std::string removed = error_for("VARSCOPE_SM90_IMPL", "12");
    EXPECT_NE(removed.find("VARSCOPE_SM90_IMPL"), std::string::npos) << removed;
    EXPECT_NE(removed.find("pruned-kernels.md"), std::string::npos) << removed;
    // VARSCOPE_RESOURCES is a folder, not a switch.
    EXPECT_EQ(exec_env::resource_dir_from(env_of({{"VARSCOPE_RESOURCES", "/x/y"}})), "/x/y");
    EXPECT_EQ(exec_env::resource_dir_from(env_of({})), "");
    EXPECT_EQ(exec_env::policy_from(env_of({{"VARSCOPE_RESOURCES", "/x/y"}})), ExecPolicy{});
}

// docs/exec-policy.md lists every variable, and every setting of the JSON form has a variable
// (sm90_attention excepted: benchmarks and tests set it).
TEST(ExecEnv, EveryVariableIsDocumented) {
    const std::string doc = read_file(std::string(VARSCOPE_SOURCE_DIR) + "/docs/exec-policy.md");
    ASSERT_FALSE(doc.empty());
    std::map<std::string, bool> keys;
    // Kept in a variable: items() of a temporary would outlive it (a use after free).
    const nlohmann::json defaults = varscope::to_json(ExecPolicy{});
    for (const auto& [key, v] : defaults.items()) keys[key] = false;
    for (const auto& v : exec_env::variables()) {
        EXPECT_NE(doc.find(std::string("`") + v.name + "`"), std::string::npos) << v.name;
        if (*v.key != '\0') {
            ASSERT_TRUE(keys.count(v.key)) << v.name << " sets an unknown key " << v.key;
            keys[v.key] = true;
            EXPECT_NE(doc.find(std::string("`") + v.key + "`"), std::string::npos) << v.key;
        }
    }
    for (const auto& [key, has_variable] : keys)
        EXPECT_TRUE(has_variable || key == "sm90_attention") << key << " has no variable";
}

// Core and kernels read no environment: the programs fill the policy (app/exec_env) and pass it
// down. A getenv that comes back below app/ and ui/ fails here.
TEST(ExecPolicy, NoGetenvBelowAppAndUi) {
    for (const char* dir : {"core", "kernels"}) {
        const fs::path root = fs::path(VARSCOPE_SOURCE_DIR) / dir;
        ASSERT_TRUE(fs::is_directory(root)) << root;
        int files = 0;
        for (const auto& entry : fs::recursive_directory_iterator(root)) {
            if (!entry.is_regular_file()) continue;
            ++files;
            const std::string text = read_file(entry.path().string());
            EXPECT_EQ(text.find("getenv"), std::string::npos)
                << entry.path().string()
                << " reads the environment: take the setting from ExecPolicy "
                   "(docs/exec-policy.md)";
        }
        EXPECT_GT(files, 10) << root;
    }
}

// The CLI reads the variables once, at start: a malformed one is bad input (exit 2) naming it;
// `info` prints the policy; the timings JSON records it.
TEST(ExecEnv, CliChecksPrintsAndRecordsThePolicy) {
    using varscope::testing::run_cli;
    auto bad = run_cli("methods", "VARSCOPE_DIFF_ROW_SPLIT=off");
    EXPECT_EQ(bad.code, 2) << bad.out;
    EXPECT_NE(bad.out.find("VARSCOPE_DIFF_ROW_SPLIT='off'"), std::string::npos) << bad.out;
    auto removed = run_cli("methods", "VARSCOPE_SM90_IMPL=12");
    EXPECT_EQ(removed.code, 2) << removed.out;

    varscope::testing::TempDir dir;
    const std::string img = dir.file("img.ppm"), timings = dir.file("t.json");
    auto gen = run_cli("generate --random 2 --patch-nums 1,2 --class 1 -q -o " + img +
                           " --timings-json " + timings,
                       "VARSCOPE_DIFF_PDL=0 VARSCOPE_MAR_GRAPH_POOL=own");
    ASSERT_EQ(gen.code, 0) << gen.out;
    const json t = json::parse(read_file(timings));
    ASSERT_TRUE(t.contains("exec_policy")) << t.dump();
    ExecPolicy want;
    want.kernels.diff.pdl = false;
    want.mar_chained_graph_pool = false;
    EXPECT_EQ(varscope::exec_policy_from_json(t["exec_policy"]), want);

    const std::string model =
        std::string(VARSCOPE_SOURCE_DIR) + "/resources/models/emoji-vqvae.safetensors";
    auto info = run_cli("info " + model, "VARSCOPE_DIFF_PDL=0");
    ASSERT_EQ(info.code, 0) << info.out;
    EXPECT_NE(info.out.find("exec:    diff_pdl=false"), std::string::npos) << info.out;
    auto info_defaults = run_cli("info " + model);
    EXPECT_NE(info_defaults.out.find("exec:    defaults"), std::string::npos) << info_defaults.out;
}
