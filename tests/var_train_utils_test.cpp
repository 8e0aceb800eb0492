// VAR training helpers: foreground-token mask, depth growth that keeps the function, EMA, and a
// tiny training run with EMA + growth + int8 export.
#include "core/training/var_train_utils.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "core/io/checkpoint.h"
#include "core/io/module_binding.h"
#include "core/io/quant_int8.h"
#include "core/training/trainers.h"
#include "tests/test_util.h"
#include "tests/tiny_models.h"

using namespace varscope;

TEST(VarTrainUtils, ForegroundMaskMarksTheCellsOfNonWhitePixels) {
    auto img = at::full({2, 3, 16, 16}, 255, at::kByte);
    img[1][2][0][0] = 0;      // one blue-less pixel in the top-left corner
    img[1][0][15][15] = 249;  // just below the white threshold, bottom-right
    auto m = foreground_token_mask(img, {1, 2, 4});
    ASSERT_EQ(m.sizes(), (at::IntArrayRef{2, 1 + 4 + 16}));
    EXPECT_FALSE(m[0].any().item<bool>());  // a white image is all background
    auto expected = at::zeros({21}, at::kBool);
    expected[0] = true;                 // 1x1: the whole image
    expected[1] = expected[4] = true;   // 2x2: top-left and bottom-right cells
    expected[5] = expected[20] = true;  // 4x4: the same corners
    EXPECT_TRUE(m[1].equal(expected)) << m[1];
    img[1][0][15][15] = 250;  // at the threshold counts as white
    EXPECT_EQ(foreground_token_mask(img, {1, 2, 4})[1].sum().item<int64_t>(), 3);
}

TEST(VarTrainUtils, GrownModelComputesWhatTheSmallOneDid) {
    for (bool shared : {true, false}) {
        auto small = varscope::testing::tiny_pipeline(5, shared);
        auto& s = *small.sampler().transformer();
        auto cfg = small.var_config();
        cfg.depth = 5;  // 2 -> 5 blocks: old blocks land on 0 and 2
        VarTransformer big(cfg);
        big->init_weights(7);
        varscope::testing::randomise(*big, 8);  // new blocks must not matter whatever their weights
        EXPECT_EQ(grow_var_from(*big, module_state_dict(s), "small"), 2);
        auto gen = at::detail::createCPUGenerator(2);
        auto labels = at::tensor({0, 3, -1}, at::kLong);
        auto x = at::randn({3, cfg.total_tokens() - cfg.first_l(), cfg.cvae}, gen);
        at::NoGradGuard g;
        s.eval();
        big->eval();
        auto a = s.forward_teacher(labels, x), b = big->forward_teacher(labels, x);
        EXPECT_LT((a - b).abs().max().item<float>(), 1e-5f) << "shared_aln " << shared;
        EXPECT_TRUE(big->named_parameters()["blocks.2.ffn.fc1.weight"].equal(
            s.named_parameters()["blocks.1.ffn.fc1.weight"]));
        EXPECT_TRUE(big->named_parameters()["blocks.3.attn.proj.weight"].eq(0).all().item<bool>());
        EXPECT_FALSE(
            big->named_parameters()["blocks.3.attn.mat_qkv.weight"].eq(0).all().item<bool>());
        // The new blocks are live: changing one's output projection changes the logits.
        big->named_parameters()["blocks.4.ffn.fc2.weight"].add_(0.5);
        EXPECT_GT((big->forward_teacher(labels, x) - a).abs().max().item<float>(), 1e-3f);
    }
    auto small = varscope::testing::tiny_pipeline(5, true);
    auto cfg = small.var_config();
    cfg.depth = 1;
    VarTransformer shallower(cfg);
    EXPECT_THROW(grow_var_from(*shallower, module_state_dict(*small.sampler().transformer()), "x"),
                 std::invalid_argument);
}

TEST(VarTrainUtils, EmaMovesTowardsTheWeights) {
    std::vector<at::Tensor> ema{at::zeros({3}), at::ones({2, 2})};
    std::vector<at::Tensor> w{at::full({3}, 10.0), at::full({2, 2}, 3.0)};
    ema_update(ema, w, 0.9);
    EXPECT_TRUE(ema[0].allclose(at::full({3}, 1.0)));
    EXPECT_TRUE(ema[1].allclose(at::full({2, 2}, 1.2)));
    EXPECT_THROW(ema_update(ema, {w[0]}, 0.9), std::invalid_argument);
}

TEST(VarTrainUtils, AutocastGuardIsANoOpOnTheCpu) {
    {
        AutocastBf16 g(at::Device("cpu"), true);
        EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
        EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCUDA));
    }
    EXPECT_TRUE(at::autocast::is_autocast_cache_enabled());
}

TEST(VarTrainUtils, GrowEmaInt8RunReportsAllThreeAndShipsInt8) {
    varscope::testing::TempDir dir;
    auto gen = at::detail::createCPUGenerator(3);
    // Dark squares on white, so there are foreground and background tokens.
    auto img = at::full({16, 3, 8, 8}, 255, at::kByte);
    for (int64_t i = 0; i < 16; ++i)
        img[i]
            .narrow(1, i % 4, 4)
            .narrow(2, (i / 4) % 4, 4)
            .copy_(at::randint(0, 200, {3, 4, 4}, gen, at::kByte));
    save_safetensors({{"images", img}, {"labels", at::arange(16, at::kLong).remainder(4)}},
                     dir.file("pack.safetensors"));
    auto pipe = varscope::testing::tiny_pipeline(1, true);
    save_safetensors(module_state_dict(*pipe.sampler().vqvae()), dir.file("vae.safetensors"));
    auto cfg = pipe.var_config();
    cfg.num_classes = 4;
    VarTransformer small(cfg);
    small->init_weights(1);
    save_safetensors(module_state_dict(*small), dir.file("small.safetensors"));

    VarTrainJob job;
    job.model = cfg;
    job.model.depth = 4;
    job.train.steps = 6;
    job.train.batch = 8;
    job.train.lr = 1e-3;
    job.train.warmup = 2;
    job.train.log_every = 1;
    job.train.device = "cpu";
    job.data_path = dir.file("pack.safetensors");
    job.vae_path = dir.file("vae.safetensors");
    job.init_path = dir.file("small.safetensors");
    job.run_dir = dir.file("run");
    job.ema_rate = 0.5;
    job.grow_depth = true;
    job.export_int8 = true;
    std::ostringstream out;
    auto r = train_var(job, out);
    EXPECT_NE(out.str().find("grown from 2 to 4 blocks"), std::string::npos) << out.str();
    for (const char* k : {"init", "ema", "export"}) {
        ASSERT_TRUE(r.contains(k)) << r.dump();
        EXPECT_GT(r[k]["fg_fraction"].get<double>(), 0.0);
        EXPECT_LT(r[k]["fg_fraction"].get<double>(), 1.0);
        EXPECT_GE(r[k]["fg_token_acc"].get<double>(), 0.0);
    }
    EXPECT_NE(r["ema"]["loss"].get<double>(),
              r["loss"].get<double>());  // EMA differs from the raw weights
    // The shipped file is the EMA, int8, and loads with official names only.
    const auto meta = read_safetensors_metadata(dir.file("run/export-fp16.safetensors"));
    ASSERT_EQ(meta.count(kQuantMetadataKey), 1u);
    auto sd = load_checkpoint(dir.file("run/export-fp16.safetensors"));
    for (auto& [name, t] : sd) EXPECT_EQ(name.find(".qscale"), std::string::npos) << name;
    EXPECT_EQ(VarConfig::infer_from(sd, cfg.patch_nums).depth, 4);
    EXPECT_NEAR(r["export"]["loss"].get<double>(), r["ema"]["loss"].get<double>(), 0.05);
    EXPECT_TRUE(std::filesystem::exists(dir.file("run/export-raw-fp16.safetensors")));
}
