// A model file's recommended sampling settings: parsing, range errors, files without one, and
// the shipped emoji VAR's entry.
#include "core/models/sampling_recommendation.h"

#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include "core/io/checkpoint.h"
#include "core/resources.h"
#include "tests/test_util.h"

namespace varscope {
namespace {

TEST(SamplingRecommendation, ParsesTheKnownKeys) {
    const auto r = parse_sampling_recommendation(R"({"cfg": 3, "top_k": 40, "top_p": 0.8})");
    ASSERT_TRUE(r.cfg && r.top_k && r.top_p);
    EXPECT_DOUBLE_EQ(*r.cfg, 3.0);
    EXPECT_EQ(*r.top_k, 40);
    EXPECT_DOUBLE_EQ(*r.top_p, 0.8);
    EXPECT_EQ(r.describe(), "cfg 3, top-k 40, top-p 0.8");
    const auto partial = parse_sampling_recommendation(R"({"top_k": 0})");
    EXPECT_FALSE(partial.cfg);
    EXPECT_EQ(partial.top_k.value_or(-1), 0);
    EXPECT_TRUE(parse_sampling_recommendation("{}").empty());
}

void expect_error(const std::string& text, const std::string& message) {
    try {
        parse_sampling_recommendation(text);
        ADD_FAILURE() << text << " was accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
}

TEST(SamplingRecommendation, NamesTheBadField) {
    expect_error(R"({"top_p": 1.5})",
                 "varscope.sampling.top_p: must be a number in [0, 1], got 1.5");
    expect_error(R"({"top_k": -3})",
                 "varscope.sampling.top_k: must be a whole number >= 0, got -3");
    expect_error(R"({"top_k": 2.5})", "varscope.sampling.top_k");
    expect_error(R"({"cfg": "high"})", "varscope.sampling.cfg");
    expect_error(R"({"temperature": 1})", "varscope.sampling.temperature: unknown key");
    expect_error("[1, 2]", "must be a JSON object");
    expect_error("{not json", "varscope.sampling is not valid JSON");  // core/io/json_read.h
}

TEST(SamplingRecommendation, ReadsFilesWithAndWithoutTheEntry) {
    testing::TempDir dir;
    StateDict tensors{{"w", at::zeros({2})}};
    const std::string plain = dir.file("plain.safetensors");
    save_safetensors(tensors, plain);
    EXPECT_TRUE(read_sampling_recommendation(plain).empty());

    const std::string good = dir.file("good.safetensors");
    save_safetensors(tensors, good, {{kSamplingMetadataKey, R"({"top_k": 7})"}});
    EXPECT_EQ(read_sampling_recommendation(good).top_k.value_or(-1), 7);

    const std::string bad = dir.file("bad.safetensors");
    save_safetensors(tensors, bad, {{kSamplingMetadataKey, R"({"top_p": 2})"}});
    try {
        read_sampling_recommendation(bad);
        ADD_FAILURE() << "malformed entry accepted";
    } catch (const std::runtime_error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(bad), std::string::npos) << msg;
        EXPECT_NE(msg.find("varscope.sampling.top_p"), std::string::npos) << msg;
    }
    // torch.save archives carry no metadata.
    EXPECT_TRUE(
        read_sampling_recommendation(testing::source_dir() + "/tests/fixtures/state_dict.pth")
            .empty());
}

TEST(SamplingRecommendation, TheShippedEmojiModelRecommendsATightTopK) {
    if (!embedded_model_available()) GTEST_SKIP() << "embedded model missing";
    const auto r = read_sampling_recommendation(embedded_model_files().var_path);
    ASSERT_TRUE(r.top_k.has_value());
    EXPECT_LT(*r.top_k, 900);  // the official default leaves too many wrong codes in play
}

TEST(MarSamplingRecommendation, ParsesAndNamesTheBadField) {
    const auto r = parse_mar_sampling_recommendation(
        R"({"num_iter": 16, "cfg": 3, "cfg_schedule": "linear", "temperature": 1, "num_sampling_steps": "250"})");
    ASSERT_TRUE(r.num_iter && r.cfg && r.cfg_schedule && r.temperature && r.num_sampling_steps);
    EXPECT_EQ(*r.num_iter, 16);
    EXPECT_EQ(*r.num_sampling_steps, "250");
    EXPECT_EQ(r.describe(),
              "16 decoding steps, cfg 3, linear cfg schedule, temperature 1, 250 diffusion steps");
    EXPECT_TRUE(parse_mar_sampling_recommendation("{}").empty());
    const std::pair<const char*, const char*> bad[] = {
        {R"({"num_iter": 0})",
         "varscope.mar_sampling.num_iter: must be a whole number in [1, 4096], got 0"},
        {R"({"cfg_schedule": "cosine"})",
         "varscope.mar_sampling.cfg_schedule: must be \"linear\" or \"constant\""},
        {R"({"num_sampling_steps": 250})",
         "varscope.mar_sampling.num_sampling_steps: must be a non-empty"},
        {R"({"temperature": -1})",
         "varscope.mar_sampling.temperature: must be a number in [0, 10]"},
        {R"({"top_k": 40})", "varscope.mar_sampling.top_k: unknown key"},
    };
    for (const auto& [text, message] : bad) {
        try {
            parse_mar_sampling_recommendation(text);
            ADD_FAILURE() << text << " was accepted";
        } catch (const std::invalid_argument& e) {
            EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
        }
    }
}

TEST(MarSamplingRecommendation, TheShippedEmojiMarAndItsFiles) {
    if (!embedded_mar_available()) GTEST_SKIP() << "embedded MAR missing";
    const MarModelFiles f = embedded_mar_files();
    const auto r = read_mar_sampling_recommendation(f.mar_path);
    ASSERT_TRUE(r.num_sampling_steps && r.num_iter);
    // The files carry the recommended respacing, so the app and the CLI sample alike.
    EXPECT_EQ(f.num_sampling_steps, *r.num_sampling_steps);
    EXPECT_NE(f.vae_path.find("emoji-klvae"), std::string::npos);
    // The VAR entry and the MAR entry do not mix.
    EXPECT_TRUE(read_sampling_recommendation(f.mar_path).empty());
}

}  // namespace
}  // namespace varscope
