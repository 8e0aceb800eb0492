// core/eval/manifest.h: the eval job's manifest, read strictly.
#include <gtest/gtest.h>

#include <fstream>

#include "core/eval/manifest.h"
#include "tests/error_of.h"
#include "tests/test_util.h"

namespace varscope {
namespace {

using testing::error_of;
using testing::TempDir;

nlohmann::json minimal() {
    return nlohmann::json::parse(R"({
        "model": {"embedded": "var"},
        "classes": [1891, 581],
        "seeds": [3, 4],
        "configs": {"skip": {"scale_skip": {"enabled": true}}},
        "output_dir": "out"})");
}

std::string parse_error(const nlohmann::json& j) {
    return error_of<ManifestError>([&] { parse_manifest(j, "'m.json'", "/base"); });
}

TEST(EvalManifest, ReadsEveryField) {
    nlohmann::json j = minimal();
    j["device"] = "cuda:1";
    j["precision"] = "bf16";
    j["seeds"] = {{"first", 10}, {"count", 3}};
    j["batch"] = 2;
    j["batches_per_shard"] = 3;
    j["sampling"] = {{"cfg", 3.0}, {"top_k", 100}};
    j["configs"]["preset"] = "fastvar";
    j["save_images"] = true;
    j["rank_timeout_s"] = 60;
    j["warmup"] = false;
    const EvalManifest m = parse_manifest(j, "'m.json'", "/base");
    EXPECT_TRUE(m.model.embedded_model());
    EXPECT_EQ(m.model.embedded, Family::Var);
    EXPECT_EQ(m.device, "cuda:1");
    EXPECT_EQ(m.precision, "bf16");
    EXPECT_EQ(m.classes, (std::vector<int64_t>{1891, 581}));
    EXPECT_EQ(m.seeds, (std::vector<uint64_t>{10, 11, 12}));
    EXPECT_EQ(m.batch, 2);
    EXPECT_EQ(m.batches_per_shard, 3);
    EXPECT_EQ(m.sampling["top_k"], 100);
    ASSERT_EQ(m.configs.size(), 2u);  // by name
    EXPECT_EQ(m.configs[0].name, "preset");
    EXPECT_EQ(m.configs[0].accel, "fastvar");
    EXPECT_EQ(m.configs[1].name, "skip");
    EXPECT_TRUE(m.configs[1].accel.is_object());
    EXPECT_EQ(m.output_dir, "/base/out");  // relative to the manifest's folder
    EXPECT_TRUE(m.save_images);
    EXPECT_EQ(m.rank_timeout_s, 60);
    EXPECT_FALSE(m.warmup);
    EXPECT_EQ(m.conditions(), 2);
}

TEST(EvalManifest, UnknownKeysAreRefusedEverywhere) {
    nlohmann::json j = minimal();
    j["seed"] = 1;
    EXPECT_NE(parse_error(j).find("manifest 'm.json': top level: unknown field 'seed'"),
              std::string::npos)
        << parse_error(j);
    j = minimal();
    j["model"]["vae_path"] = "x";
    EXPECT_NE(parse_error(j).find("model: unknown field 'vae_path'"), std::string::npos);
    j = minimal();
    j["sampling"] = {{"cfgg", 2}};
    EXPECT_NE(parse_error(j).find("sampling: unknown field 'cfgg'"), std::string::npos);
    j = minimal();
    j["seeds"] = {{"first", 0}, {"count", 2}, {"step", 1}};
    EXPECT_NE(parse_error(j).find("seeds: unknown field 'step'"), std::string::npos);
}

// Each sampling value as it is read: counts whole (2.5 would be cast to 2, 1e40 is undefined
// behaviour), the switch true/false, the rest numbers (not true/false).
TEST(EvalManifest, SamplingValuesHaveTheirTypes) {
    const std::pair<const char*, nlohmann::json> bad[] = {{"top_k", 2.5},     {"top_k", 1e40},
                                                          {"num_iter", true}, {"more_smooth", 1},
                                                          {"cfg", true},      {"tau", "1"}};
    for (const auto& [key, value] : bad) {
        nlohmann::json j = minimal();
        j["sampling"] = {{key, value}};
        const std::string e = parse_error(j);
        EXPECT_NE(e.find(std::string("sampling.") + key), std::string::npos) << e;
        EXPECT_NE(e.find(", got " + value.dump()), std::string::npos) << e;
    }
    nlohmann::json j = minimal();
    j["sampling"] = {{"top_k", 5}, {"num_iter", 8}, {"more_smooth", false}, {"cfg", 4}};
    EXPECT_EQ(parse_error(j), "");
}

TEST(EvalManifest, MissingOrWrongFieldsAreNamed) {
    for (const char* key : {"model", "seeds", "configs", "output_dir"}) {
        nlohmann::json j = minimal();
        j.erase(key);
        EXPECT_NE(parse_error(j).find(std::string(key) + ": missing"), std::string::npos) << key;
    }
    nlohmann::json j = minimal();
    j["model"] = {{"path", "no-such-model.safetensors"}};
    EXPECT_NE(parse_error(j).find("model.path: no such file '/base/no-such-model.safetensors'"),
              std::string::npos)
        << parse_error(j);
    j = minimal();
    j["prompts"] = {"a cat"};
    EXPECT_NE(parse_error(j).find("either \"classes\""), std::string::npos);
    j = minimal();
    j["configs"]["baseline"] = nlohmann::json::object();
    EXPECT_NE(parse_error(j).find("configs.baseline"), std::string::npos);
    j = minimal();
    j["seeds"] = {1, 2, 1};
    EXPECT_NE(parse_error(j).find("seeds[2]: seed listed twice"), std::string::npos);
    j = minimal();
    j["classes"] = {1, "cat"};
    EXPECT_NE(parse_error(j).find("classes[1]"), std::string::npos);
    j = minimal();
    j["batch"] = 0;
    EXPECT_NE(parse_error(j).find("batch: expected a positive integer"), std::string::npos);
    j = minimal();
    j["configs"]["bad"] = 3;
    EXPECT_NE(parse_error(j).find("configs.bad"), std::string::npos);
}

TEST(EvalManifest, FileErrorsNameTheFile) {
    TempDir dir;
    const std::string path = dir.file("m.json");
    EXPECT_NE(error_of<ManifestError>([&] { read_manifest(path); }).find(path), std::string::npos);
    std::ofstream(path) << R"({"model": {"embedded": "var"}, "model": 1})";
    EXPECT_NE(error_of<ManifestError>([&] { read_manifest(path); }).find("model"),
              std::string::npos);
    std::ofstream(path) << minimal().dump();
    EXPECT_EQ(read_manifest(path).output_dir, (dir.path() / "out").string());
}

TEST(EvalManifest, WorkJsonLeavesOutTheOutputFolder) {
    EvalManifest a = parse_manifest(minimal(), "a", "/x");
    EvalManifest b = parse_manifest(minimal(), "b", "/y");
    EXPECT_NE(a.output_dir, b.output_dir);
    EXPECT_EQ(a.work_json(), b.work_json());
    b.seeds.push_back(9);
    EXPECT_NE(a.work_json(), b.work_json());
}

// The embedded models by name: the text-to-image one (the CLI's default) as "t2i" or "infinity".
TEST(EvalManifest, EmbeddedModelsByName) {
    for (const auto& [name, family] :
         std::vector<std::pair<std::string, Family>>{{"t2i", Family::Infinity},
                                                     {"infinity", Family::Infinity},
                                                     {"var", Family::Var},
                                                     {"mar", Family::Mar}}) {
        nlohmann::json j = minimal();
        j["model"] = {{"embedded", name}};
        EXPECT_EQ(parse_manifest(j, "'m.json'", "/base").model.embedded, family) << name;
    }
    nlohmann::json j = minimal();
    j["model"] = {{"embedded", "sdxl"}};
    EXPECT_NE(parse_error(j).find("expected \"t2i\""), std::string::npos) << parse_error(j);
}

}  // namespace
}  // namespace varscope

namespace varscope {
namespace {

// "metrics" (FID, IS, precision/recall): strict, files checked, and in the work definition only
// where given (older manifests keep their fingerprints).
TEST(EvalManifest, MetricsAreReadStrictly) {
    TempDir dir;
    std::ofstream(dir.file("inc.pth")) << "x";
    std::ofstream(dir.file("ref.npz")) << "x";
    nlohmann::json j = minimal();
    const auto plain = parse_manifest(j, "'m.json'", dir.path().string());
    EXPECT_FALSE(plain.metrics.enabled());
    EXPECT_FALSE(plain.work_json().contains("metrics"));

    j["metrics"] = {
        {"inception", "inc.pth"}, {"reference", "ref.npz"}, {"is_splits", 5}, {"pr_k", 4}};
    const auto m = parse_manifest(j, "'m.json'", dir.path().string());
    EXPECT_TRUE(m.metrics.enabled());
    EXPECT_EQ(m.metrics.inception, dir.file("inc.pth"));
    EXPECT_EQ(m.metrics.reference, dir.file("ref.npz"));
    EXPECT_EQ(m.metrics.is_splits, 5);
    EXPECT_EQ(m.metrics.pr_k, 4);
    EXPECT_EQ(m.work_json()["metrics"]["inception"], dir.file("inc.pth"));

    auto error = [&](nlohmann::json metrics) {
        nlohmann::json k = minimal();
        k["metrics"] = metrics;
        return error_of<ManifestError>([&] { parse_manifest(k, "'m.json'", dir.path().string()); });
    };
    EXPECT_NE(error({{"inception", "inc.pth"}, {"fid", true}}).find("fid"), std::string::npos);
    EXPECT_NE(error({{"reference", "ref.npz"}}).find("metrics.inception: missing"),
              std::string::npos);
    EXPECT_NE(error({{"inception", "nope.pth"}}).find("no such file"), std::string::npos);
    EXPECT_NE(error({{"inception", "inc.pth"}, {"reference", "nope.npz"}})
                  .find("metrics.reference: no such file"),
              std::string::npos);
    EXPECT_NE(error({{"inception", "inc.pth"}, {"is_splits", 0}}).find("metrics.is_splits"),
              std::string::npos);
    EXPECT_NE(error("inc.pth").find("metrics: expected an object"), std::string::npos);
}

}  // namespace
}  // namespace varscope
