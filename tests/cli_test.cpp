// The CLI as a user meets it: exit codes and messages for bad input.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/io/checkpoint.h"
#include "core/models/sampling_recommendation.h"
#include "core/resources.h"
#include "tests/cli_image_ext.h"
#include "tests/cli_run.h"
#include "tests/test_util.h"

namespace {

using varscope::testing::cli_image_ext;
using varscope::testing::CliRun;

CliRun cli_env(const std::string& env, const std::string& args) {
    return varscope::testing::run_cli(args, env);
}

CliRun cli(const std::string& args) {
    return varscope::testing::run_cli(args);
}

}  // namespace

TEST(Cli, MissingCheckpointIsAClearError) {
    auto r = cli("generate --var /nonexistent/var.pth --vae /nonexistent/vae.pth -o x.ppm");
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("/nonexistent/var.pth"), std::string::npos) << r.out;
}

TEST(Cli, NoModelGiven) {
    varscope::testing::TempDir empty;  // no embedded model there
    auto r = cli_env("VARSCOPE_RESOURCES=" + empty.path().string(), "generate -o x.ppm");
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.out.find("no model"), std::string::npos) << r.out;
}

// Bad usage exits 2 whether CLI11 or the command finds it (CLI11's own codes were 105-109).
TEST(Cli, OutOfRangeFlags) {
    // Several classes set the batch: another --batch was ignored.
    auto batch = cli("generate --random 2 --patch-nums 1,2 --class 1,2,3 --batch 2 -o x.ppm");
    EXPECT_EQ(batch.code, 2) << batch.out;
    EXPECT_NE(batch.out.find("--batch 2 does not match the 3 classes"), std::string::npos)
        << batch.out;
    EXPECT_EQ(cli("generate --random 2 --top-p 3 -o x.ppm").code, 2);
    EXPECT_EQ(cli("generate --random 2 --device warp9 -o x.ppm").code, 2);
    EXPECT_EQ(cli("generate --random 2 --no-such-flag -o x.ppm").code, 2);
    EXPECT_EQ(cli("info /").code, 2);           // a folder where a file is expected
    EXPECT_EQ(cli("teacher-forward").code, 2);  // required options missing
    EXPECT_EQ(cli("--help").code, 0);
    // Seeds: "-1" wrapped to 2^64 - 1 and 2^64 was clamped there, so they gave one image.
    for (const char* seed : {"-1", "18446744073709551616", "abc"}) {
        auto r = cli(std::string("generate --random 2 --patch-nums 1,2 -o x.ppm --seed ") + seed);
        EXPECT_EQ(r.code, 2) << seed << "\n" << r.out;
        EXPECT_NE(r.out.find("--seed: a seed is"), std::string::npos) << r.out;
    }
    EXPECT_EQ(cli("generate-mar --random mar_base --init-seed -1 --tokens-out x.st").code, 2);
}

TEST(Cli, TruncatedCheckpointAndGoodRun) {
    varscope::testing::TempDir dir;
    {
        FILE* f = fopen(dir.file("broken.pth").c_str(), "wb");
        fputs("PK\x03\x04truncated", f);
        fclose(f);
    }
    auto bad = cli("info " + dir.file("broken.pth"));
    EXPECT_EQ(bad.code, 2) << bad.out;
    EXPECT_NE(bad.out.find("broken.pth"), std::string::npos) << bad.out;

    const std::string out = dir.file("img.ppm");
    auto good = cli("generate --random 2 --patch-nums 1,2 --class 1 --seed 3 -q -o " + out);
    ASSERT_EQ(good.code, 0) << good.out;
    FILE* f = fopen(out.c_str(), "rb");
    ASSERT_NE(f, nullptr);
    char magic[3] = {};
    EXPECT_EQ(fread(magic, 1, 2, f), 2u);
    fclose(f);
    EXPECT_STREQ(magic, "P6");
    // Refuses to overwrite without --force, keeping the existing file.
    auto again = cli("generate --random 2 --patch-nums 1,2 --class 1 -q -o " + out);
    EXPECT_EQ(again.code, 2);
    EXPECT_NE(again.out.find("--force"), std::string::npos) << again.out;
    auto fmt = cli("generate --random 2 --patch-nums 1,2 -o " + dir.file("img.gif"));
    EXPECT_EQ(fmt.code, 2) << fmt.out;
    EXPECT_NE(fmt.out.find("unsupported image format"), std::string::npos) << fmt.out;
    // Bad output paths fail before any sampling (no "run 1/1" progress line).
    EXPECT_EQ(fmt.out.find("run 1/"), std::string::npos) << fmt.out;
    auto no_dir =
        cli("generate --random 2 --patch-nums 1,2 --timings-json " + dir.file("missing/t.json"));
    EXPECT_EQ(no_dir.code, 2) << no_dir.out;
    EXPECT_NE(no_dir.out.find("does not exist"), std::string::npos) << no_dir.out;
    EXPECT_EQ(no_dir.out.find("run 1/"), std::string::npos) << no_dir.out;
}

TEST(Cli, EmbeddedModelGeneratesFromAPrompt) {
    varscope::testing::TempDir dir;
    const std::string out = dir.file("heart.ppm");
    // --family var: without it the embedded text-to-image model (when shipped) reads the prompt.
    auto r = cli("generate --family var --prompt \"red heart\" --seed 1 --cfg 3 -q -o " + out);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("[1891] HEAVY BLACK HEART"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("(class 1891)"), std::string::npos) << r.out;
}

TEST(Cli, EmbeddedModelRecommendationAppliesOnlyToUnsetFlags) {
    varscope::testing::TempDir dir;
    const std::string out = dir.file("x.ppm");
    auto r = cli("generate --class 1891 --seed 1 --top-k 900 -o " + out);
    ASSERT_EQ(r.code, 0) << r.out;
    // --top-k was given, so only cfg and top-p come from the model file.
    EXPECT_NE(r.out.find("using the model's recommended cfg 3, top-p 0.8"), std::string::npos)
        << r.out;
    auto all =
        cli("generate --class 1891 --seed 1 --cfg 2 --top-k 5 --top-p 0.5 --no-cuda-graphs -o " +
            out + " --force");
    ASSERT_EQ(all.code, 0) << all.out;
    EXPECT_EQ(all.out.find("recommended"), std::string::npos) << all.out;
}

TEST(Cli, EmbeddedMarGeneratesFromAPromptWithItsRecommendation) {
    varscope::testing::TempDir dir;
    const std::string out = dir.file("heart" + cli_image_ext());
    // Few steps keep it fast; the recommendation fills cfg, schedule and temperature only.
    auto r = cli(
        "generate-mar --prompt \"red heart\" --seed 1 --num-iter 2 --num-sampling-steps 5 -q -o " +
        out);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("embedded emoji MAR"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("[1891] HEAVY BLACK HEART"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("using the model's recommended cfg 3, linear cfg schedule, temperature 1"),
              std::string::npos)
        << r.out;
    EXPECT_EQ(r.out.find("250 diffusion steps"), std::string::npos) << r.out;
    EXPECT_TRUE(std::ifstream(out).good());
    auto both = cli("generate-mar --prompt heart --class 3 --num-iter 2 -o " + out + " --force");
    EXPECT_NE(both.code, 0);
    EXPECT_NE(both.out.find("either --prompt or --class"), std::string::npos) << both.out;
}

TEST(Cli, CompareWritesBothSidesDiffAndMetrics) {
    varscope::testing::TempDir dir;
    const std::string out = dir.file("cmp");
    auto r =
        cli("compare --random 2 --patch-nums 1,2,3 --class 1 --seed 2 --accel '{\"skip\": "
            "{\"last_n\": 1}}' -o " +
            out);
    ASSERT_EQ(r.code, 0) << r.out;
    // Without OpenCV the CLI writes .ppm; with it, PNG: the image names are the same either way.
    std::ifstream metrics(out + "/metrics.json");
    ASSERT_TRUE(metrics.good()) << r.out;
    const auto j = nlohmann::json::parse(metrics);
    EXPECT_EQ(j["accel_summary"], "skip-1");
    ASSERT_EQ(j["scales"].size(), 3u);
    EXPECT_DOUBLE_EQ(j["scales"][0]["identical_tokens"].get<double>(),
                     1.0);                                            // same seed, same scale 0
    EXPECT_EQ(j["scales"][2]["undecoded_tokens"].get<int64_t>(), 9);  // the skipped 3x3 scale
    // How each side was timed: on the CPU no CUDA graphs and, by default, no warm-up run (CUDA
    // gets one: its first run captures the graphs).
    EXPECT_EQ(j["baseline"]["cuda_graphs"], false);
    EXPECT_EQ(j["accelerated"]["cuda_graphs"], false);
    EXPECT_EQ(j["warmup_runs"], 0);
    // A second run refuses to overwrite.
    auto again = cli("compare --random 2 --patch-nums 1,2,3 --class 1 --accel skip -o " + out);
    EXPECT_NE(again.code, 0);
    EXPECT_NE(again.out.find("--force"), std::string::npos) << again.out;
    EXPECT_EQ(again.out.find("transformer time"), std::string::npos)
        << "refused after sampling: " << again.out;
}

// An existing image refuses before sampling (a long batch used to run first), each of a batch's
// numbered files alike; --force overwrites.
TEST(Cli, ExistingImagesRefuseBeforeSampling) {
    varscope::testing::TempDir dir;
    const std::string base =
        "generate --random 2 --patch-nums 1,2 --class 1 2 --seed 3 -o " + dir.file("img.ppm");
    ASSERT_EQ(cli(base).code, 0);
    for (const char* name : {"img_0.ppm", "img_1.ppm"})
        EXPECT_TRUE(std::ifstream(dir.file(name)).good()) << name;
    auto again = cli(base);
    EXPECT_EQ(again.code, 2) << again.out;
    EXPECT_NE(again.out.find("img_0.ppm' exists; pass --force"), std::string::npos) << again.out;
    EXPECT_EQ(again.out.find("run 1/1"), std::string::npos) << "sampled first:\n" << again.out;
    EXPECT_EQ(cli(base + " --force").code, 0);
    // Two outputs on one file (the tokens were written over the image, rc 0): refused first,
    // --force or not, also against a batch's numbered name.
    auto same = cli(base + " --force --tokens-out " + dir.file("img_1.ppm"));
    EXPECT_EQ(same.code, 2) << same.out;
    EXPECT_NE(same.out.find("--tokens-out and --out name"), std::string::npos) << same.out;
    EXPECT_EQ(same.out.find("run 1/1"), std::string::npos) << same.out;
}

// teacher-forward checks its input's tensors: out-of-range ids reached LibTorch's "index out of
// range in self" (exit 3), float ids were truncated and extra scales ignored (exit 0).
TEST(Cli, TeacherForwardChecksItsInput) {
    varscope::testing::TempDir dir;
    const auto ids = [](std::vector<int64_t> v) { return at::tensor(v, at::kLong); };
    const auto run = [&](varscope::StateDict in) {
        const std::string f = dir.file("in.safetensors");
        std::remove(f.c_str());
        varscope::save_safetensors(in, f);
        return cli("teacher-forward --random 2 --patch-nums 1,2 --input " + f + " --output " +
                   dir.file("out.safetensors"));
    };
    const auto t0 = ids({3}).view({1, 1}), t1 = ids({1, 2, 3, 4}).view({1, 4});
    auto good = run({{"labels", ids({5})}, {"tokens.0", t0}, {"tokens.1", t1}});
    EXPECT_EQ(good.code, 0) << good.out;
    std::remove(dir.file("out.safetensors").c_str());
    const std::vector<std::pair<varscope::StateDict, std::string>> cases = {
        {{{"labels", ids({5000})}, {"tokens.0", t0}, {"tokens.1", t1}}, "'labels' values must be"},
        {{{"labels", ids({5})}, {"tokens.0", ids({99999}).view({1, 1})}, {"tokens.1", t1}},
         "'tokens.0' values must be"},
        {{{"labels", ids({5})}, {"tokens.0", t0}, {"tokens.1", t1.to(at::kFloat)}},
         "'tokens.1' must hold integers"},
        {{{"labels", ids({5}).view({1, 1})}, {"tokens.0", t0}, {"tokens.1", t1}},
         "'labels' must be (B)"},
        {{{"labels", ids({5})}, {"tokens.0", t0}, {"tokens.1", t1}, {"tokens.2", t1}},
         "more token maps"}};
    for (const auto& [in, expected] : cases) {
        auto r = run(in);
        EXPECT_EQ(r.code, 2) << expected << "\n" << r.out;
        EXPECT_NE(r.out.find(expected), std::string::npos) << r.out;
    }
}

// A checkpoint of no known family is bad input (info exited 1, outside the documented codes).
TEST(Cli, InfoOnAnUnknownFamilyExits2) {
    varscope::testing::TempDir dir;
    const std::string f = dir.file("other.safetensors");
    varscope::save_safetensors({{"w", at::zeros({2})}}, f);
    auto r = cli("info " + f);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("no known model family"), std::string::npos) << r.out;
}

// A malformed sampling recommendation in a model file is warned about and ignored: the weights
// are fine (it refused the model with exit 3, even with every value given on the command line).
TEST(Cli, BadSamplingRecommendationIsIgnoredWithAWarning) {
    if (!varscope::embedded_model_available()) GTEST_SKIP() << "no embedded model";
    const auto files = varscope::embedded_model_files();
    varscope::testing::TempDir dir;
    auto meta = varscope::read_safetensors_metadata(files.var_path);
    meta.erase("varscope.quant");  // load_checkpoint gives the int8 weights dequantised
    meta[varscope::kSamplingMetadataKey] = R"({"cfg": "x"})";
    const std::string var = dir.file("var-bad-sampling.safetensors");
    varscope::save_safetensors(varscope::load_checkpoint(files.var_path), var, meta);
    auto r = cli("generate --var " + var + " --vae " + files.vae_path + " --class 1 -q -o " +
                 dir.file("x.ppm"));
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("warning: " + var + ": varscope.sampling.cfg"), std::string::npos)
        << r.out;
}

// The benchmarks' --json path is checked before any run (a bad one used to fail, or with
// bench attention to be dropped, only at the end).
TEST(Cli, BenchJsonPathIsCheckedFirst) {
    for (const char* cmd : {"bench e2e --random 2 --patch-nums 1,2", "bench mar --planned-flops",
                            "bench attention", "bench cs4a"}) {
        auto r = cli(std::string(cmd) + " --json /nonexistent-varscope/x.json");
        EXPECT_EQ(r.code, 2) << cmd << "\n" << r.out;
        EXPECT_NE(r.out.find("--json: output folder '/nonexistent-varscope' does not exist"),
                  std::string::npos)
            << cmd << "\n"
            << r.out;
    }
}

// bench e2e is written once against the Runner: the same command times a VAR and a MAR model
// (random weights, CPU), each with its family's comparison against the baseline's seed.
TEST(Cli, BenchE2eServesEveryFamily) {
    varscope::testing::TempDir dir;
    const auto read = [](const std::string& path) {
        std::ifstream f(path);
        return nlohmann::json::parse(f);
    };
    auto var =
        cli("bench e2e --random 2 --patch-nums 1,2,3 --class 1 --repeat 1 --warmup 0 "
            "--methods 'baseline;skip;baseline@eager' --json " +
            dir.file("var.json") + " --tokens-out " + dir.file("var.safetensors"));
    ASSERT_EQ(var.code, 0) << var.out;
    const auto v = read(dir.file("var.json"));
    EXPECT_EQ(v["family"], "var");
    ASSERT_EQ(v["methods"].size(), 3u);
    // The baseline against itself: every token identical; skip (last scale) decodes fewer.
    EXPECT_DOUBLE_EQ(v["methods"][0]["identical_tokens"].get<double>(), 1.0);
    EXPECT_EQ(v["methods"][1]["identical_tokens_per_step"].size(), 3u);
    EXPECT_LT(v["methods"][1]["identical_tokens"].get<double>(), 1.0);
    EXPECT_EQ(v["methods"][2]["identical_tokens_graphs_vs_eager"].get<double>(), 1.0);
    EXPECT_GT(v["methods"][0]["median_total_ms"].get<double>(), 0.0);
    const auto tokens = varscope::load_checkpoint(dir.file("var.safetensors"));
    EXPECT_EQ(tokens.count("tokens.2"), 1u);

    auto mar =
        cli("bench e2e --random mar_base --class 1 --num-iter 2 --num-sampling-steps 2 "
            "--repeat 1 --warmup 0 --json " +
            dir.file("mar.json"));
    ASSERT_EQ(mar.code, 0) << mar.out;
    const auto m = read(dir.file("mar.json"));
    EXPECT_EQ(m["family"], "mar");
    ASSERT_EQ(m["methods"].size(), 2u);  // the MAR default: baseline;lazymar
    EXPECT_EQ(m["methods"][1]["name"], "lazymar");
    EXPECT_DOUBLE_EQ(m["methods"][0]["vs_baseline"]["latent_relative_l2"].get<double>(), 0.0);
    EXPECT_TRUE(m["methods"][1]["vs_baseline"].contains("latent_relative_l2"));
    // A family's own flag on the other family's model is refused, as in generate.
    auto foreign = cli("bench e2e --random 2 --patch-nums 1,2 --num-iter 4 --repeat 1");
    EXPECT_EQ(foreign.code, 2) << foreign.out;
    EXPECT_NE(foreign.out.find("--num-iter is a MAR setting"), std::string::npos) << foreign.out;
}

// --trace writes one profiler trace per method (Chrome trace JSON with the run's operators) and
// names it in --json; an unwritable folder is refused before any run.
TEST(Cli, BenchE2eTraceWritesAProfilerTracePerMethod) {
    varscope::testing::TempDir dir;
    const std::string traces = dir.file("traces");
    auto r =
        cli("bench e2e --random 2 --patch-nums 1,2 --class 1 --repeat 1 --warmup 0 "
            "--no-cost-model --methods 'baseline;skip' --trace " +
            traces + " --json " + dir.file("e2e.json"));
    ASSERT_EQ(r.code, 0) << r.out;
    std::ifstream f(dir.file("e2e.json"));
    const auto j = nlohmann::json::parse(f);
    ASSERT_EQ(j["methods"].size(), 2u);
    const std::vector<std::string> want = {traces + "/00-baseline.trace.json",
                                           traces + "/01-skip.trace.json"};
    for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(j["methods"][i]["trace"], want[i]);
        std::ifstream t(want[i]);
        ASSERT_TRUE(t) << want[i];
        const auto trace = nlohmann::json::parse(t);
        size_t attention_ops = 0;  // the sampling loop's own operators were recorded
        for (const auto& e : trace["traceEvents"])
            if (e.value("cat", "") == "cpu_op" &&
                e.value("name", "").find("scaled_dot_product") != std::string::npos)
                ++attention_ops;
        EXPECT_GT(attention_ops, 0u) << want[i];
    }
    // The same folder again: the traces of the first run are kept unless --force.
    const std::string again =
        "bench e2e --random 2 --patch-nums 1,2 --class 1 --repeat 1 "
        "--warmup 0 --no-cost-model --methods 'baseline;skip' --trace " +
        traces;
    auto kept = cli(again);
    EXPECT_EQ(kept.code, 2) << kept.out;
    EXPECT_NE(kept.out.find("--trace: '" + want[0] + "' exists; pass --force"), std::string::npos)
        << kept.out;
    EXPECT_EQ(cli(again + " --force").code, 0);
    std::ofstream(dir.file("a-file")) << "x";  // a folder cannot be made under a file
    auto bad = cli("bench e2e --random 2 --patch-nums 1,2 --repeat 1 --warmup 0 --trace " +
                   dir.file("a-file") + "/traces");
    EXPECT_EQ(bad.code, 2) << bad.out;
    EXPECT_NE(bad.out.find("--trace: cannot create the folder"), std::string::npos) << bad.out;
    EXPECT_EQ(bad.out.find("baseline ..."), std::string::npos) << "ran first: " << bad.out;
}

TEST(Cli, BadAcceleratorConfigNamesTheField) {
    auto r = cli(
        "generate --random 2 --patch-nums 1,2 -q -o x.ppm --accel '{\"skip\": {\"last_n\": -3}}'");
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.out.find("skip.last_n: must be in [0, 12], got -3"), std::string::npos) << r.out;
    auto typo = cli(
        "generate --random 2 --patch-nums 1,2 -q -o x.ppm --accel '{\"skip\": {\"lastn\": 1}}'");
    EXPECT_NE(typo.out.find("skip.lastn: unknown field"), std::string::npos) << typo.out;
    auto missing = cli("compare --random 2 --patch-nums 1,2 --accel /nonexistent/cfg.json");
    EXPECT_NE(missing.out.find("neither a config file"), std::string::npos) << missing.out;
    auto model = cli(
        "generate --random 2 --patch-nums 1,2 -q -o x.ppm --accel '{\"skip\": {\"last_n\": 2}}'");
    EXPECT_NE(model.out.find("must be below the model's 2 scales"), std::string::npos) << model.out;
    // JSON that parses badly in other ways, and a folder, are bad input too (exit 3 with
    // nlohmann's or iostream's text before).
    varscope::testing::TempDir dir;
    for (const std::string& accel :
         {std::string("'{\"fastvar\": {\"ratios\": [1e400]}}'"), dir.path().string()}) {
        auto r = cli("generate --random 2 --patch-nums 1,2 -q -o x.ppm --accel " + accel);
        EXPECT_EQ(r.code, 2) << accel << "\n" << r.out;
        EXPECT_NE(r.out.find("--accel: "), std::string::npos) << r.out;
    }
    for (const std::string& random :
         {std::string("'{\"encoder_embed_dim\": 64'"), dir.path().string()}) {
        auto r = cli("generate-mar --random " + random + " --tokens-out x.safetensors");
        EXPECT_EQ(r.code, 2) << random << "\n" << r.out;
        EXPECT_NE(r.out.find("--random: "), std::string::npos) << r.out;
    }
}

// docs/accelerators.md ends with `methods --markdown`: the tables there were two LazyMAR
// settings behind before this test.
TEST(Cli, AcceleratorDocsMatchTheMethodTables) {
    std::ifstream f(std::string(VARSCOPE_SOURCE_DIR) + "/docs/accelerators.md");
    ASSERT_TRUE(f.good());
    const std::string doc((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const auto at = doc.find("## VAR accelerators");
    ASSERT_NE(at, std::string::npos);
    auto r = cli_env("", "methods --markdown");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(doc.substr(at), r.out)
        << "regenerate the tables: varscope-cli methods --markdown (from '## VAR accelerators')";
}

TEST(Cli, MethodsListsVarAndMarAccelerators) {
    auto r = cli_env("", "methods --json");
    ASSERT_EQ(r.code, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_TRUE(j.at("presets").contains("sparvar+skip"));
    ASSERT_EQ(j.at("mar").at("methods").size(), 1u);
    EXPECT_EQ(j["mar"]["methods"][0].at("id"), "lazymar");
    EXPECT_TRUE(j["mar"].at("presets").contains("lazymar-token"));
    // Infinity: the VAR presets and the papers' Infinity-2B settings (VAR's list has none).
    EXPECT_TRUE(j.at("infinity").at("presets").contains("sparvar+skip"));
    EXPECT_TRUE(j["infinity"]["presets"].contains("infinity-lazyvar"));
    EXPECT_FALSE(j["presets"].contains("infinity-lazyvar"));
}
