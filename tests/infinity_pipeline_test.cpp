// Infinity's pipeline: fixture transformer + a tiny random BSQ VAE, text features from a file,
// images out; the spatial-patchify path (Infinity-8B's layout) checked against the VAE's own
// summed codes.
#include "core/infinity_pipeline.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/io/checkpoint.h"
#include "tests/test_util.h"
#include "tests/tiny_bsq_vae.h"

using namespace varscope;

namespace {

// Test inputs independent of what ran before in the process (the global generator).
at::Generator seeded(uint64_t seed) {
    return at::make_generator<at::CPUGeneratorImpl>(seed);
}

std::string fixture(const std::string& name) {
    return varscope::testing::source_dir() + "/tests/fixtures/infinity_tiny/" + name;
}

BsqVaeConfig tiny_vae(int64_t d) {
    return varscope::testing::tiny_bsq_vae_config(d);
}

}  // namespace

TEST(InfinityPipeline, TextFeaturesToImagesWithTheOfficialBits) {
    std::ifstream f(fixture("schedules.json"));
    const auto j = nlohmann::json::parse(f);
    const auto text = load_text_features(fixture("teacher.safetensors"));
    EXPECT_EQ(text.lens, j["lens"].get<std::vector<int64_t>>());
    auto p = InfinityPipeline::load(fixture("infinity_tiny.pth"), "");
    p = InfinityPipeline::from(p.model, BsqVae(BsqVaeImpl::random(tiny_vae(8), 3)));
    const auto s = infinity_schedule(j["h_div_w"].get<double>(), j["pn"].get<std::string>());
    const auto& run = j["runs"]["logits_cfg"];
    InfinitySampleOptions o;
    o.seed = run["seed"].get<uint64_t>();
    o.cfg_list = run["cfg"].get<std::vector<double>>();
    o.tau_list = run["tau"].get<std::vector<double>>();
    o.top_k = run["top_k"].get<int64_t>();
    o.top_p = run["top_p"].get<double>();
    o.cfg_insertion_layer = run["cfg_insertion_layer"].get<std::vector<int64_t>>();
    const auto out = p.generate(text, s, o);
    const auto expected = load_safetensors(fixture("sample_logits_cfg.safetensors"));
    for (int64_t si = 0; si < s.num_scales(); ++si)
        EXPECT_TRUE(at::equal(out.sample.bits[si], expected.at("bits." + std::to_string(si))))
            << si;
    ASSERT_TRUE(out.images.defined());
    EXPECT_EQ(out.images.sizes(),
              (std::vector<int64_t>{2, 3, 4 * s.scales.back()[0], 4 * s.scales.back()[1]}));
    EXPECT_GE(out.images.min().item<double>(), 0.0);
    EXPECT_LE(out.images.max().item<double>(), 1.0);
    EXPECT_FALSE(p.generate(text, s, o, nullptr, nullptr, /*decode=*/false).images.defined());
    // A VAE of another width does not fit.
    EXPECT_THROW(InfinityPipeline::from(p.model, BsqVae(BsqVaeImpl::random(tiny_vae(6), 3))),
                 std::invalid_argument);
}

TEST(InfinityPipeline, SpatialPatchifyAccumulatesLikeTheVae) {
    c10::InferenceMode guard;
    auto cfg = InfinityConfig::infinity_2b();
    cfg.depth = 2, cfg.embed_dim = 64, cfg.num_heads = 4, cfg.mlp_hidden = 128,
    cfg.text_channels = 128;
    cfg.text_maxlen = 8, cfg.pool_heads = 1, cfg.codebook_dim = 8;  // 4 x 2 bits per token
    auto p =
        InfinityPipeline::from(random_infinity(cfg, 4), BsqVae(BsqVaeImpl::random(tiny_vae(2), 5)));
    ASSERT_TRUE(p.quant.spatial_patchify);
    const auto s = infinity_schedule(1.25, "0.06M").first(5);
    InfinityText text{at::randn({5, 128}, seeded(1)), {5}};
    InfinitySampleOptions o;
    const auto out = p.generate(text, s, o);
    std::vector<at::Tensor> bits;
    std::vector<bsq::Size3> vae_schedule;
    for (int64_t si = 0; si < s.num_scales(); ++si) {
        bits.push_back(bsq::unpatchify_bits(out.sample.bits[si].to(at::kLong)));
        vae_schedule.push_back({1, 2 * s.scales[si][0], 2 * s.scales[si][1]});
    }
    const auto reference = p.vae->summed_codes(bits, vae_schedule).squeeze(2);
    ASSERT_EQ(out.sample.summed_codes.sizes(), reference.sizes());
    EXPECT_TRUE(at::allclose(out.sample.summed_codes, reference, 1e-6, 1e-6));
    EXPECT_EQ(out.images.size(2), 2 * 4 * s.scales.back()[0]);
}

TEST(InfinityPipeline, TextFeatureFilesAreChecked) {
    varscope::testing::TempDir dir;
    save_safetensors({{"kv_compact", at::zeros({4, 8})}}, dir.file("t.safetensors"));
    try {
        load_text_features(dir.file("t.safetensors"));
        FAIL() << "missing lens accepted";
    } catch (const CheckpointError& e) {
        EXPECT_NE(std::string(e.what()).find("lens"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("t.safetensors"), std::string::npos) << e.what();
    }
    save_safetensors({{"kv_compact", at::zeros({4, 8})}, {"lens", at::tensor({3, 2})}},
                     dir.file("u.safetensors"));
    EXPECT_THROW(load_text_features(dir.file("u.safetensors")), CheckpointError);
}
