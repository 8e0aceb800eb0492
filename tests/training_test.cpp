// Training commands on tiny data: a run learns something, checkpoints, resumes, exports.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/io/checkpoint.h"
#include "core/io/module_binding.h"
#include "core/models/mar.h"
#include "core/training/trainers.h"
#include "tests/test_util.h"
#include "tests/tiny_models.h"

using namespace varscope;

namespace {

// 16 random 8x8 images in 4 classes.
std::string tiny_pack(const varscope::testing::TempDir& dir) {
    auto gen = at::detail::createCPUGenerator(3);
    auto img = at::randint(0, 256, {16, 3, 8, 8}, gen, at::TensorOptions().dtype(at::kByte));
    save_safetensors({{"images", img}, {"labels", at::arange(16, at::kLong).remainder(4)}},
                     dir.file("pack.safetensors"));
    return dir.file("pack.safetensors");
}

TrainConfig tiny_train(int64_t steps) {
    TrainConfig t;
    t.steps = steps;
    t.batch = 8;
    t.lr = 1e-3;
    t.warmup = 2;
    t.log_every = 1;
    t.checkpoint_every = 100;
    t.device = "cpu";
    return t;
}

int64_t log_lines(const std::string& path) {
    std::ifstream f(path);
    int64_t n = 0;
    for (std::string l; std::getline(f, l);) ++n;
    return n;
}

}  // namespace

TEST(Training, ConfigErrorsNameTheKey) {
    EXPECT_THROW(TrainConfig::from_json({{"steps", 0}}), std::invalid_argument);
    try {
        TrainConfig::from_json({{"lr", "fast"}});
        FAIL();
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("'lr'"), std::string::npos);
    }
    TrainConfig c = TrainConfig::from_json({{"steps", 100}, {"warmup", 10}, {"lr", 1e-3}});
    EXPECT_LT(c.lr_at(0), c.lr_at(9));
    EXPECT_NEAR(c.lr_at(10), 1e-3, 1e-9);
    EXPECT_NEAR(c.lr_at(100), 1e-4, 1e-9);  // cosine to 10 %
}

// A misspelt key is named instead of falling back to its default ("vocab_sizee" trained the
// 256 px default VQVAE and failed later on an unrelated shape), and the shipped training configs
// still read.
TEST(Training, ConfigsRefuseUnknownKeysAndTheShippedOnesRead) {
    const auto error_of = [](auto&& parse) {
        try {
            parse();
        } catch (const std::invalid_argument& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    EXPECT_NE(error_of([] {
                  TrainConfig::from_json({{"stepz", 3}});
              }).find("train config: unknown field 'stepz'"),
              std::string::npos);
    EXPECT_NE(error_of([] {
                  VqvaeConfig::from_json({{"vocab_sizee", 64}});
              }).find("VQVAE config: unknown field 'vocab_sizee'"),
              std::string::npos);
    EXPECT_NE(error_of([] {
                  VqvaeConfig::from_json({{"vocab_size", "x"}});
              }).find("VQVAE config"),
              std::string::npos);
    EXPECT_NE(error_of([] {
                  VarConfig::from_json({{"dept", 4}});
              }).find("VAR config: unknown field 'dept'"),
              std::string::npos);
    for (const char* name : {"emoji-vqvae", "emoji-var", "emoji-var-d16", "emoji-mar"}) {
        std::ifstream f(varscope::testing::source_dir() + "/resources/training/" + name + ".json");
        ASSERT_TRUE(f.good()) << name;
        const auto j = nlohmann::json::parse(f);
        EXPECT_NO_THROW(TrainConfig::from_json(j.at("train"))) << name;
        const auto& model = j.at("model");
        const std::string n = name;
        const auto parse_model = [&] {
            if (n == "emoji-vqvae") return (void)VqvaeConfig::from_json(model);
            if (n == "emoji-mar") return (void)varscope::MarConfig::from_json(model);
            (void)VarConfig::from_json(model);
        };
        EXPECT_NO_THROW(parse_model()) << name;
    }
}

TEST(Training, VarRunLearnsResumesAndExports) {
    varscope::testing::TempDir dir;
    const auto pack = tiny_pack(dir);
    auto pipe = varscope::testing::tiny_pipeline();
    save_safetensors(module_state_dict(*pipe.sampler().vqvae()), dir.file("vae.safetensors"));

    VarTrainJob job;
    job.model = varscope::testing::tiny_var_config(/*shared_aln=*/true);
    job.model.num_classes = 4;
    job.train = tiny_train(12);
    job.data_path = pack;
    job.vae_path = dir.file("vae.safetensors");
    job.run_dir = dir.file("run");
    std::ostringstream out;
    auto report = train_var(job, out);
    EXPECT_EQ(report["steps"], 12);
    // Loss falls on data this small.
    std::ifstream f(dir.file("run/log.jsonl"));
    std::string first, line, last_step;
    std::getline(f, first);
    while (std::getline(f, line))
        if (line.find("\"step\"") != std::string::npos) last_step = line;
    EXPECT_LT(nlohmann::json::parse(last_step)["loss"].get<double>(),
              nlohmann::json::parse(first)["loss"].get<double>());

    // Asking for more steps continues from the checkpoint instead of starting over.
    const int64_t lines = log_lines(dir.file("run/log.jsonl"));
    job.train.steps = 14;
    std::ostringstream out2;
    train_var(job, out2);
    EXPECT_NE(out2.str().find("resumed at step 12"), std::string::npos) << out2.str();
    EXPECT_EQ(log_lines(dir.file("run/log.jsonl")),
              lines + 3);  // steps 12, 13 and the final report

    // A damaged run folder is named, not trained backwards or read as miniz's words.
    const std::string state = dir.file("run/state.json");
    const std::string good_state = [&] {
        std::ifstream in(state);
        return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }();
    for (const char* bad : {R"({"step": -5})", R"({"step": 2.5})"}) {
        std::ofstream(state) << bad;
        std::ostringstream sink;
        try {
            train_var(job, sink);
            ADD_FAILURE() << bad << " accepted";
        } catch (const std::invalid_argument& e) {
            EXPECT_NE(std::string(e.what()).find("state.json is not a valid training state"),
                      std::string::npos)
                << e.what();
        }
    }
    std::ofstream(state) << good_state;
    std::ofstream(dir.file("run/optimizer.pt"), std::ios::trunc) << "PK";
    try {
        std::ostringstream sink;
        train_var(job, sink);
        ADD_FAILURE() << "a truncated optimizer.pt was accepted";
    } catch (const varscope::CheckpointError& e) {
        EXPECT_NE(std::string(e.what()).find("optimizer.pt: cannot resume"), std::string::npos)
            << e.what();
    }

    // The fp16 export loads through the normal pipeline path.
    auto loaded = VarPipeline::load(
        {dir.file("run/export-fp16.safetensors"), dir.file("vae.safetensors"), {}}, {});
    EXPECT_EQ(loaded.var_config().num_classes, 4);
    EXPECT_EQ(
        read_safetensors_metadata(dir.file("run/export-fp16.safetensors")).count("varscope.config"),
        1u);
}

TEST(Training, VqvaeRunReportsPsnrAndUsage) {
    varscope::testing::TempDir dir;
    VqvaeTrainJob job;
    job.model = varscope::testing::tiny_vqvae_config();
    job.train = tiny_train(3);
    job.data_path = tiny_pack(dir);
    job.run_dir = dir.file("vq");
    std::ostringstream out;
    auto r = train_vqvae(job, out);
    EXPECT_GT(r["psnr_db"].get<double>(), 0.0);
    EXPECT_GT(r["codebook_usage"].get<double>(), 0.0);
    EXPECT_LE(r["codebook_usage"].get<double>(), 1.0);
    EXPECT_NO_THROW(load_checkpoint(dir.file("vq/export-fp16.safetensors")));
}

TEST(Training, MissingDataTensorsAreExplained) {
    varscope::testing::TempDir dir;
    save_safetensors({{"pixels", at::zeros({1})}}, dir.file("bad.safetensors"));
    try {
        load_image_dataset(dir.file("bad.safetensors"), at::Device(at::kCPU));
        FAIL();
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("pack-emoji"), std::string::npos);
    }
}
