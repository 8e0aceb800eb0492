// core/eval/quality.h: features through shard files, per-config FID / sFID / IS / precision-
// recall, reference checks; and the eval job with "metrics" on a small random VAR and the
// formula Inception (CPU: few images; each 2048-d Frechet distance is an eigenvalue problem).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/eval/eval_job.h"
#include "core/eval/quality.h"
#include "core/io/checkpoint.h"
#include "core/io/npy.h"
#include "core/metrics/feature_stats.h"
#include "tests/error_of.h"
#include "tests/test_util.h"
#include "tests/tiny_models.h"

namespace varscope {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::TempDir;

InceptionFeatures random_features(int64_t n, int64_t d, double shift) {
    InceptionFeatures f;
    const auto opt = at::TensorOptions().dtype(at::kFloat);
    f.pool3 = at::randn({n, d}, opt).add(shift);
    f.spatial = at::randn({n, d}, opt).add(shift);
    f.logits = at::randn({n, 5}, opt).mul(3);
    return f;
}

TEST(EvalQuality, FeaturesRoundTripThroughBase64Exactly) {
    for (int64_t n : {0, 1, 2, 3, 7}) {
        const auto t = at::randn({n, 3});
        EXPECT_TRUE(at::equal(decode_floats(encode_floats(t), n, 3), t)) << n;
    }
    EXPECT_NE(error_of<std::invalid_argument>([] {
                  decode_floats("AAAA", 2, 3);
              }).find("3 bytes, expected 2 x 3 float32"),
              std::string::npos);
    EXPECT_NE(
        error_of<std::invalid_argument>([] { decode_floats("AA*A", 0, 0); }).find("invalid base64"),
        std::string::npos);
    EXPECT_NE(error_of<std::invalid_argument>([] { decode_floats("AAA", 0, 0); }).find("length"),
              std::string::npos);

    ShardFeatures sf;
    InceptionFeatures f;
    f.pool3 = at::randn({2, kInceptionPool3Dim});
    f.spatial = at::randn({2, kInceptionSpatialDim});
    f.logits = at::randn({2, kInceptionLogitsDim});
    sf.add("baseline", f);
    sf.add("baseline", f);
    const nlohmann::json shard = {{"shard", 0}, {"features", sf.to_json()}};
    const auto back = gather_features({shard, shard});
    ASSERT_EQ(back.at("baseline").pool3.size(0), 8);
    EXPECT_TRUE(at::equal(back.at("baseline").logits.narrow(0, 2, 2), f.logits));

    auto broken = shard;
    broken["features"]["baseline"]["pool3"] = "AAAA";
    const auto e = error_of<ShardFileError>([&] { gather_features({broken}); });
    EXPECT_NE(e.find("shard 0: features of 'baseline'"), std::string::npos) << e;
    EXPECT_NE(error_of<ShardFileError>([] {
                  gather_features({{{"shard", 3}}});
              }).find("shard 3: no Inception features"),
              std::string::npos);
}

TEST(EvalQuality, PerConfigMetricsAgainstBaselineAndReference) {
    TempDir dir;
    const auto base = random_features(40, 6, 0.0);
    auto shifted = random_features(40, 6, 1.0);
    const auto reference = feature_stats(random_features(60, 6, 0.5).pool3);
    write_reference_stats(dir.file("ref.npz"), reference);  // no mu_s: no sFID vs reference
    EvalMetricsSpec spec;
    spec.inception = "unused";
    spec.reference = dir.file("ref.npz");
    spec.is_splits = 4;
    const auto q = quality_metrics(spec, {{"baseline", base}, {"same", base}, {"far", shifted}});
    EXPECT_EQ(q["baseline"]["feature_images"], 40);
    EXPECT_TRUE(q["baseline"]["fid"]["baseline"].is_null());
    EXPECT_TRUE(q["baseline"]["precision_recall"].is_null());
    EXPECT_TRUE(q["baseline"]["sfid"]["reference"].is_null());
    EXPECT_NEAR(q["same"]["fid"]["baseline"].get<double>(), 0.0, 1e-6);
    EXPECT_DOUBLE_EQ(q["same"]["precision_recall"]["precision"].get<double>(), 1.0);
    EXPECT_NEAR(q["far"]["fid"]["reference"].get<double>(),
                frechet_distance(feature_stats(shifted.pool3), reference), 1e-9);
    EXPECT_NEAR(q["far"]["sfid"]["baseline"].get<double>(),
                frechet_distance(feature_stats(shifted.spatial), feature_stats(base.spatial)),
                1e-9);
    EXPECT_GT(q["far"]["fid"]["baseline"].get<double>(), 3.0);  // mean shift 1 in 6 dims
    const auto is = inception_score(base.logits, 4);
    EXPECT_DOUBLE_EQ(q["baseline"]["inception_score"]["mean"].get<double>(), is.mean);
    // Too few images for the splits: no IS rather than an error after hours of sampling.
    spec.is_splits = 50;
    EXPECT_TRUE(
        quality_metrics(spec, {{"baseline", base}})["baseline"]["inception_score"].is_null());
}

TEST(EvalQuality, ReferenceStatisticsAreCheckedBeforeSampling) {
    TempDir dir;
    EvalMetricsSpec spec;
    spec.inception = "unused";
    spec.reference = dir.file("small.npz");
    write_npz({{"mu", at::zeros({8}, at::kDouble)}, {"sigma", at::eye(8, at::kDouble)}},
              spec.reference);
    auto e = error_of<ManifestError>([&] { check_reference_stats(spec); });
    EXPECT_NE(e.find("metrics.reference '" + spec.reference + "': mu has 8 values"),
              std::string::npos)
        << e;
    spec.reference = dir.file("nosigma.npz");
    write_npz({{"mu", at::zeros({8}, at::kDouble)}}, spec.reference);
    e = error_of<ManifestError>([&] { check_reference_stats(spec); });
    EXPECT_NE(e.find("no array 'sigma'"), std::string::npos) << e;
}

TEST(EvalQuality, TheEvalJobScoresEveryConfigAndResumesToTheSameNumbers) {
    TempDir dir;
    save_safetensors(synthetic_inception_weights(), dir.file("inception.safetensors"));
    EvalManifest m;
    m.classes = {1, 2, 3};
    m.seeds = {5, 6};
    m.batch = 3;
    m.configs = {{"skip1", {{"skip", {{"enabled", true}, {"last_n", 1}}}}}};
    m.output_dir = dir.file("out");
    m.warmup = false;
    m.metrics.inception = dir.file("inception.safetensors");
    m.metrics.is_splits = 2;
    m.metrics.pr_k = 2;
    auto runner = var_runner(testing::small_pipeline(7));
    const auto first = run_eval_job(m, *runner, {});
    const auto& configs = first.result["configs"];
    ASSERT_EQ(configs.size(), 2u);
    for (const auto& c : configs) {
        SCOPED_TRACE(c["name"].dump());
        ASSERT_TRUE(c.contains("quality"));
        EXPECT_EQ(c["quality"]["feature_images"], 6);
        EXPECT_TRUE(c["quality"]["fid"]["reference"].is_null());
        EXPECT_FALSE(c["quality"]["inception_score"].is_null());
    }
    const auto& skip = configs[1]["quality"];
    EXPECT_TRUE(skip["fid"]["baseline"].is_number());
    EXPECT_GE(skip["fid"]["baseline"].get<double>(), -1e-6);
    EXPECT_TRUE(skip["sfid"]["baseline"].is_number());
    EXPECT_EQ(skip["precision_recall"]["k"], 2);
    // The shard files carry the features; a restart reads them and gives the same numbers.
    const auto shard = read_shard_result(shard_path(m.output_dir, 0), 0, manifest_fingerprint(m));
    ASSERT_TRUE(shard.has_value());
    EXPECT_EQ((*shard)["features"]["skip1"]["images"], 3);
    const auto again = run_eval_job(m, *runner, {});
    EXPECT_EQ(again.computed, 0);
    EXPECT_EQ(again.result["configs"][1]["quality"], skip);
    std::ifstream csv(fs::path(m.output_dir) / "summary.csv");
    std::string header;
    std::getline(csv, header);
    EXPECT_NE(header.find(",fid_reference,fid_baseline,"), std::string::npos) << header;

    // A missing reference file is a manifest error before sampling (parse_manifest checks it
    // exists; the job checks what it holds).
    m.metrics.reference = dir.file("missing.npz");
    m.output_dir = dir.file("out2");
    EXPECT_NE(error_of<ManifestError>([&] { run_eval_job(m, *runner, {}); }).find("missing.npz"),
              std::string::npos);
    EXPECT_FALSE(fs::exists(shard_path(m.output_dir, 0)));
}

}  // namespace
}  // namespace varscope
