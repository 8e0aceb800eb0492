// core/eval/emoji_quality.h: which class a prompt names, emoji scores through shard files, the
// per-config emoji Frechet distance / accuracy / agreement, the manifest's "emoji" key, and the
// eval job with metrics.emoji on a small random VAR and a tiny random emoji network.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/eval/emoji_quality.h"
#include "core/eval/eval_job.h"
#include "core/eval/shards.h"
#include "core/eval/sweep.h"
#include "core/io/checkpoint.h"
#include "core/io/module_binding.h"
#include "core/metrics/feature_stats.h"
#include "tests/error_of.h"
#include "tests/test_util.h"
#include "tests/tiny_models.h"

namespace varscope {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::TempDir;

std::vector<ClassInfo> some_classes() {
    return {{"CAT FACE", "cat", {"cat"}, ""},
            {"THUMBS UP SIGN", "+1", {"+1", "thumbsup"}, ""},
            {"UPWARDS BLACK ARROW", "arrow_up", {"arrow_up", "up"}, ""},
            {"BLACK HEART", "black_heart", {}, ""},
            {"HEAVY BLACK HEART", "heart", {"heart"}, ""},
            {"RED APPLE", "apple", {}, ""},
            {"GREEN APPLE", "green_apple", {"red apple"}, ""}};
}

TEST(EvalEmojiQuality, ThePromptNamesAClassOnlyWhenItIsClear) {
    const auto c = some_classes();
    EXPECT_EQ(class_named_by_prompt("cat", c), 0);
    EXPECT_EQ(class_named_by_prompt("Cat Face", c), 0);
    EXPECT_EQ(class_named_by_prompt("thumbsup", c), 1);
    EXPECT_EQ(class_named_by_prompt("a picture of thumbs up sign drawn in the twemoji style", c),
              1);
    // The longest phrase wins: "heavy black heart" over "black heart".
    EXPECT_EQ(class_named_by_prompt("an icon of a heavy black heart", c), 4);
    EXPECT_EQ(class_named_by_prompt("an icon of a black heart", c), 3);
    // One word inside a longer prompt is not enough ("up", "cat", "heart" are aliases).
    EXPECT_EQ(class_named_by_prompt("a cat jumping up", c), -1);
    // Two classes share the longest phrase ("red apple"): not counted.
    EXPECT_EQ(class_named_by_prompt("a shiny red apple", c), -1);
    EXPECT_EQ(class_named_by_prompt("red apple", c), -1);
    EXPECT_EQ(class_named_by_prompt("a dog", c), -1);
    EXPECT_EQ(class_named_by_prompt("", c), -1);

    EvalManifest m;
    m.classes = {3, -1, 0};
    EXPECT_EQ(emoji_targets(m, {}), (std::vector<int64_t>{3, -1, 0}));
    m.classes.clear();
    m.prompts = {"cat", "a dog", "thumbs up sign"};
    EXPECT_EQ(emoji_targets(m, c), (std::vector<int64_t>{0, -1, 1}));
}

EmojiFeatures scores_of(const at::Tensor& features, const std::vector<int64_t>& predicted,
                        int64_t classes = 5) {
    EmojiFeatures f;
    f.features = features;
    f.logits = at::zeros({features.size(0), classes});
    for (size_t i = 0; i < predicted.size(); ++i)
        f.logits[static_cast<int64_t>(i)][predicted[i]] = 1.0;
    return f;
}

TEST(EvalEmojiQuality, ScoresTravelThroughShardsAndGiveDistanceAccuracyAndAgreement) {
    const auto opt = at::TensorOptions().dtype(at::kFloat);
    const auto base = at::randn({40, 4}, opt);
    // Two shards, each with the baseline and two configs: "same" has the baseline's features,
    // "shifted" every feature + 1.
    std::vector<nlohmann::json> shards;
    for (int64_t s = 0; s < 2; ++s) {
        ShardEmojiScores scores;
        const auto part = base.narrow(0, 20 * s, 20);
        std::vector<int64_t> target(20), pred(20), other(20);
        for (int64_t i = 0; i < 20; ++i) {
            target[i] = i % 4 == 0 ? -1 : i % 5;          // every 4th not counted
            pred[i] = i % 5;                              // right wherever counted
            other[i] = i < 10 ? i % 5 : (i % 5 + 1) % 5;  // wrong in the second half
        }
        scores.add(kBaselineConfig, scores_of(part, pred), target);
        scores.add("same", scores_of(part, pred), target);
        scores.add("shifted", scores_of(part + 1, other), target);
        shards.push_back({{"shard", s}, {"emoji_features", scores.to_json()}});
    }
    const auto gathered = gather_emoji_scores(shards);
    ASSERT_EQ(gathered.size(), 3u);
    EXPECT_TRUE(at::equal(gathered.at("same").features, base));
    EXPECT_EQ(gathered.at("shifted").predicted.size(), 40u);

    const auto ref = feature_stats(base.to(at::kDouble));
    const auto q = emoji_quality_metrics(gathered, ref.mu, ref.sigma);
    // The baseline against the data set's own statistics (its own features here): 0.
    EXPECT_NEAR(q[kBaselineConfig]["fid"]["dataset"].get<double>(), 0.0, 1e-6);
    EXPECT_TRUE(q[kBaselineConfig]["fid"]["baseline"].is_null());
    EXPECT_TRUE(q[kBaselineConfig]["baseline_agreement"].is_null());
    EXPECT_NEAR(q["same"]["fid"]["baseline"].get<double>(), 0.0, 1e-6);
    // A shift by 1 in each of 4 features: ||mu1 - mu2||^2 = 4, covariances equal.
    EXPECT_NEAR(q["shifted"]["fid"]["baseline"].get<double>(), 4.0, 1e-4);
    // 40 images, 10 not counted; "shifted" is wrong on the counted second halves of both shards.
    EXPECT_EQ(q["same"]["accuracy"]["counted"], 30);
    EXPECT_EQ(q["same"]["accuracy"]["correct"], 30);
    int64_t correct = 0;
    for (int64_t i = 0; i < 20; ++i) correct += i % 4 != 0 && i < 10;
    EXPECT_EQ(q["shifted"]["accuracy"]["correct"], 2 * correct);
    EXPECT_DOUBLE_EQ(q["shifted"]["accuracy"]["rate"].get<double>(), 2.0 * correct / 30.0);
    EXPECT_DOUBLE_EQ(q["shifted"]["baseline_agreement"].get<double>(), 0.5);
    EXPECT_DOUBLE_EQ(q["same"]["baseline_agreement"].get<double>(), 1.0);
    // No reference statistics: no distance to the data set.
    EXPECT_TRUE(emoji_quality_metrics(gathered, {}, {})["same"]["fid"]["dataset"].is_null());

    // Damaged or missing scores name the shard.
    auto bad = shards;
    bad[1]["emoji_features"]["same"]["predicted"] = {1, 2};
    EXPECT_NE(error_of<ShardFileError>([&] { gather_emoji_scores(bad); }).find("shard 1"),
              std::string::npos);
    bad = shards;
    bad[0].erase("emoji_features");
    EXPECT_NE(error_of<ShardFileError>([&] { gather_emoji_scores(bad); }).find("no emoji features"),
              std::string::npos);
}

// A tiny random emoji network of `classes` classes with reference statistics.
std::string write_tiny_network(const TempDir& dir, int64_t classes) {
    EmojiFeatureConfig c;
    c.channels = {8, 16};
    c.groups = 4;
    c.num_classes = classes;
    torch::manual_seed(11);
    EmojiFeatureNet net(c);
    StateDict sd = module_state_dict(*net);
    sd[kEmojiReferenceMu] = at::zeros({16}, at::kDouble);
    sd[kEmojiReferenceSigma] = at::eye(16, at::kDouble).mul(0.01);
    const std::string path = dir.file("emoji-" + std::to_string(classes) + ".safetensors");
    save_safetensors(
        sd, path, {{"varscope.kind", kEmojiFeaturesKind}, {"varscope.config", c.to_json().dump()}});
    return path;
}

TEST(EvalEmojiQuality, ManifestTakesTheEmojiNetwork) {
    TempDir dir;
    const std::string net = write_tiny_network(dir, 10);
    nlohmann::json j = {{"model", {{"embedded", "var"}}},
                        {"classes", {1}},
                        {"seeds", {0}},
                        {"configs", {{"a", nlohmann::json::object()}}},
                        {"output_dir", "out"},
                        {"metrics", {{"emoji", fs::path(net).filename().string()}}}};
    const auto m = parse_manifest(j, "'m.json'", dir.path().string());
    EXPECT_EQ(m.metrics.emoji, net);
    EXPECT_TRUE(m.metrics.enabled());
    EXPECT_FALSE(m.metrics.inception_enabled());
    EXPECT_EQ(m.work_json()["metrics"], nlohmann::json({{"emoji", net}}));
    auto error = [&](const nlohmann::json& metrics) {
        auto k = j;
        k["metrics"] = metrics;
        return error_of<ManifestError>([&] { parse_manifest(k, "'m.json'", dir.path().string()); });
    };
    EXPECT_NE(error({{"emoji", "nothing.safetensors"}}).find("metrics.emoji: no such file"),
              std::string::npos);
    EXPECT_NE(error({{"emoji", 3}}).find("metrics.emoji: expected true"), std::string::npos);
    EXPECT_NE(error({{"emoji", net}, {"reference", net}}).find("metrics.reference"),
              std::string::npos);
    EXPECT_NE(error(nlohmann::json::object()).find("\"emoji\": true"), std::string::npos);
    // "emoji": false is off.
    auto k = j;
    k["metrics"] = {{"emoji", false}, {"inception", net}};
    EXPECT_FALSE(parse_manifest(k, "'m.json'", dir.path().string()).metrics.emoji_enabled());
}

TEST(EvalEmojiQuality, TheEvalJobScoresEveryConfigAndResumesToTheSameNumbers) {
    TempDir dir;
    EvalManifest m;
    m.classes = {1, 2, -1};
    m.seeds = {5, 6};
    m.batch = 3;
    m.configs = {{"skip1", {{"skip", {{"enabled", true}, {"last_n", 1}}}}}};
    m.output_dir = dir.file("out");
    m.warmup = false;
    m.metrics.emoji = write_tiny_network(dir, 10);
    auto runner = var_runner(testing::small_pipeline(7));
    const auto first = run_eval_job(m, *runner, {});
    const auto& configs = first.result["configs"];
    ASSERT_EQ(configs.size(), 2u);
    for (const auto& c : configs) {
        SCOPED_TRACE(c["name"].dump());
        const auto& e = c["quality"]["emoji"];
        EXPECT_FALSE(c["quality"].contains("fid"));  // no Inception asked for
        EXPECT_EQ(e["images"], 6);
        EXPECT_TRUE(e["fid"]["dataset"].is_number());
        EXPECT_EQ(e["accuracy"]["counted"], 4);  // class -1 is not counted
    }
    EXPECT_TRUE(configs[1]["quality"]["emoji"]["fid"]["baseline"].is_number());
    EXPECT_TRUE(configs[1]["quality"]["emoji"]["baseline_agreement"].is_number());
    const auto again = run_eval_job(m, *runner, {});
    EXPECT_EQ(again.computed, 0);
    EXPECT_EQ(again.result["configs"][1]["quality"], configs[1]["quality"]);
    std::ifstream csv(fs::path(m.output_dir) / "summary.csv");
    std::string header;
    std::getline(csv, header);
    EXPECT_NE(header.find(",emoji_fid_dataset,emoji_fid_baseline,emoji_accuracy,"),
              std::string::npos)
        << header;
    EXPECT_EQ(header.find("fid_reference"), std::string::npos) << header;

    // A network of other classes than the model's is refused before sampling.
    m.metrics.emoji = write_tiny_network(dir, 7);
    m.output_dir = dir.file("out2");
    EXPECT_NE(error_of<ManifestError>([&] { run_eval_job(m, *runner, {}); }).find("7 classes"),
              std::string::npos);
    EXPECT_FALSE(fs::exists(shard_path(m.output_dir, 0)));
}

TEST(EvalEmojiQuality, SweepsTakeEmojiAccuracyAndAgreementAsTheQualityAxis) {
    auto config = [](const std::string& name, double speedup, double rate, double agreement) {
        return nlohmann::json{
            {"name", name},
            {"speedup", speedup},
            {"images_per_s", speedup},
            {"quality",
             {{"emoji",
               {{"accuracy", {{"rate", rate}, {"counted", 8}, {"correct", 8 * rate}}},
                {"baseline_agreement", agreement}}}}}};
    };
    const nlohmann::json result = {{"configs",
                                    {config("baseline", 1.0, 0.75, 0), config("a", 2.0, 0.5, 0.5),
                                     config("b", 1.5, 0.25, 0.75)}}};
    const std::vector<SweepPoint> points = {{"a", {}, {{"skip.last_n", 1}}},
                                            {"b", {}, {{"skip.last_n", 2}}}};
    const auto acc = sweep_summary(result, points, "emoji_accuracy");
    EXPECT_EQ(acc["points"][0]["quality"], 0.75);  // the baseline's own accuracy
    EXPECT_EQ(acc["points"][1]["quality"], 0.5);
    EXPECT_EQ(acc["points"][1]["values"], nlohmann::json({{"skip.last_n", 1}}));
    EXPECT_EQ(acc["pareto_front"], nlohmann::json({"baseline", "a"}));  // b: slower, worse than a
    const auto agree = sweep_summary(result, points, "emoji_agreement");
    EXPECT_EQ(agree["points"][0]["quality"], 1.0);
    EXPECT_EQ(agree["pareto_front"], nlohmann::json({"baseline", "a", "b"}));
    // A result without emoji metrics, or an unknown axis, is explained.
    auto plain = result;
    for (auto& c : plain["configs"]) c.erase("quality");
    EXPECT_NE(error_of<std::invalid_argument>([&] {
                  sweep_summary(plain, points, "emoji_accuracy");
              }).find("\"emoji\": true"),
              std::string::npos);
    EXPECT_NE(error_of<std::invalid_argument>([&] {
                  sweep_summary(result, points, "emoji_fid");
              }).find("emoji_agreement"),
              std::string::npos);
}

}  // namespace
}  // namespace varscope
