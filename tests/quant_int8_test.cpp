// Weight-only int8 checkpoints: quantisation error bound, transparent dequantisation when a file
// is read, and clear errors for damaged files.
#include "core/io/quant_int8.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/io/checkpoint.h"
#include "core/io/module_binding.h"
#include "core/training/train_common.h"
#include "tests/test_util.h"
#include "tests/tiny_models.h"

using namespace varscope;

namespace {

at::Tensor random_weight(int64_t rows, int64_t cols, uint64_t seed) {
    auto gen = at::detail::createCPUGenerator(seed);
    // Rows of very different ranges, so one scale per row matters.
    auto w = at::randn({rows, cols}, gen) * at::logspace(-3, 1, rows).unsqueeze(1);
    w[1].zero_();
    return w;
}

StateDict quantised_file_tensors(std::string& meta) {
    StateDict sd{{"blocks.0.ffn.fc1.weight", random_weight(64, 32, 1)},
                 {"blocks.0.ffn.fc1.bias", at::randn({64})},
                 {"pos_1LC", at::randn({1, 5, 32})}};
    return quantize_state_dict_int8(
        sd, [](const std::string& n, const at::Tensor& t) { return is_large_2d_weight(n, t, 1); },
        at::kHalf, meta);
}

// Saves `sd` with `meta` as the quantisation metadata and returns the error message of loading it.
std::string load_error(const varscope::testing::TempDir& dir, const StateDict& sd,
                       const std::string& meta) {
    const auto path = dir.file("bad.safetensors");
    save_safetensors(sd, path, {{kQuantMetadataKey, meta}});
    try {
        load_checkpoint(path);
    } catch (const CheckpointError& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST(QuantInt8, RowwiseRoundTripStaysWithinHalfAStep) {
    for (uint64_t seed : {1, 2, 3}) {
        auto w = random_weight(40, 77, seed);
        auto [q, s] = quantize_int8_rowwise(w);
        ASSERT_EQ(q.scalar_type(), at::kChar);
        ASSERT_EQ(s.sizes(), (at::IntArrayRef{40}));
        EXPECT_LE(q.abs().max().item<int>(), 127);
        auto back = dequantize_int8_rowwise(q, s, at::kFloat);
        auto err = (back - w).abs().amax(1);
        auto bound = w.abs().amax(1) / 254.0 + 1e-7;
        EXPECT_TRUE(err.le(bound).all().item<bool>()) << (err - bound).max().item<float>();
        // Every row uses its full range: the largest entry maps to +-127.
        EXPECT_EQ(q[0].abs().max().item<int>(), 127);
        EXPECT_TRUE(back[1].eq(0).all().item<bool>());  // the zero row survives exactly
        EXPECT_GT(s[1].item<float>(), 0.f);
    }
    EXPECT_THROW(quantize_int8_rowwise(at::randn({3, 4, 5})), std::invalid_argument);
}

TEST(QuantInt8, FileLoadsAsFloatUnderTheOriginalNames) {
    varscope::testing::TempDir dir;
    std::string meta;
    StateDict sd{{"blocks.0.ffn.fc1.weight", random_weight(64, 32, 4)},
                 {"blocks.0.ffn.fc1.bias", at::randn({64})},
                 {"head.weight", random_weight(8, 8, 5)}};  // 64 elements: below the default size
    auto file = quantize_state_dict_int8(
        sd,
        [](const std::string& n, const at::Tensor& t) { return is_large_2d_weight(n, t, 1000); },
        at::kHalf, meta);
    EXPECT_EQ(file.at("blocks.0.ffn.fc1.weight").scalar_type(), at::kChar);
    EXPECT_EQ(file.count("blocks.0.ffn.fc1.weight.qscale"), 1u);
    EXPECT_EQ(file.at("head.weight").scalar_type(), at::kFloat);
    save_safetensors(file, dir.file("q.safetensors"), {{kQuantMetadataKey, meta}});
    auto back = load_checkpoint(dir.file("q.safetensors"));
    ASSERT_EQ(back.size(), sd.size());  // the scales are gone
    for (auto& [name, t] : sd) ASSERT_EQ(back.count(name), 1u) << name;
    const auto& w = back.at("blocks.0.ffn.fc1.weight");
    EXPECT_EQ(w.scalar_type(), at::kHalf);  // the recorded restore type
    const auto& ref = sd.at("blocks.0.ffn.fc1.weight");
    EXPECT_TRUE((w.to(at::kFloat) - ref)
                    .abs()
                    .amax(1)
                    .le(ref.abs().amax(1) / 254.0 * 1.01 + 1e-3)
                    .all()
                    .item<bool>());
    EXPECT_TRUE(back.at("blocks.0.ffn.fc1.bias").equal(sd.at("blocks.0.ffn.fc1.bias")));
    EXPECT_TRUE(back.at("head.weight").equal(sd.at("head.weight")));
    auto j = nlohmann::json::parse(
        read_safetensors_metadata(dir.file("q.safetensors")).at(kQuantMetadataKey));
    EXPECT_EQ(j["scheme"], kQuantScheme);
    EXPECT_EQ(j["dtype"], "float16");
    EXPECT_EQ(j["tensors"], nlohmann::json::array({"blocks.0.ffn.fc1.weight"}));
}

TEST(QuantInt8, DamagedFilesGiveErrorsNamingTheTensor) {
    varscope::testing::TempDir dir;
    std::string meta;
    const StateDict good = quantised_file_tensors(meta);
    const std::string w = "blocks.0.ffn.fc1.weight", sname = w + ".qscale";
    ASSERT_EQ(load_error(dir, good, meta), "");

    auto with = [&](const std::string& name, const at::Tensor& t) {
        StateDict d = good;
        d[name] = t;
        return d;
    };
    const at::Tensor scale = good.at(sname);
    auto zero_scale = scale.clone();
    zero_scale[3] = 0;
    std::string e = load_error(dir, with(sname, zero_scale), meta);
    EXPECT_NE(e.find("non-finite or non-positive"), std::string::npos) << e;
    EXPECT_NE(e.find(sname), std::string::npos) << e;
    EXPECT_NE(e.find("bad.safetensors"), std::string::npos) << e;  // names the file
    auto nan_scale = scale.clone();
    nan_scale[0] = NAN;
    EXPECT_NE(load_error(dir, with(sname, nan_scale), meta).find("non-finite"), std::string::npos);
    EXPECT_NE(load_error(dir, with(sname, -scale), meta).find("non-positive"), std::string::npos);
    e = load_error(dir, with(sname, scale.narrow(0, 0, 10)), meta);
    EXPECT_NE(e.find("one per row"), std::string::npos) << e;
    e = load_error(dir, with(w, good.at(w).to(at::kFloat)), meta);
    EXPECT_NE(e.find("2-D int8"), std::string::npos) << e;

    StateDict missing_scale = good;
    missing_scale.erase(sname);
    e = load_error(dir, missing_scale, meta);
    EXPECT_NE(e.find("has no scale tensor"), std::string::npos) << e;
    StateDict orphan = with("head.weight.qscale", at::ones({4}));
    e = load_error(dir, orphan, meta);
    EXPECT_NE(e.find("belongs to no listed tensor"), std::string::npos) << e;
    auto j = nlohmann::json::parse(meta);
    j["tensors"].push_back("blocks.9.attn.proj.weight");
    e = load_error(dir, good, j.dump());
    EXPECT_NE(e.find("'blocks.9.attn.proj.weight' is not in the file"), std::string::npos) << e;
    j = nlohmann::json::parse(meta);
    j["scheme"] = "int4-groupwise";
    EXPECT_NE(load_error(dir, good, j.dump()).find("unsupported scheme 'int4-groupwise'"),
              std::string::npos);
    EXPECT_NE(load_error(dir, good, "{not json").find("not a JSON object"), std::string::npos);
}

TEST(QuantInt8, Int8ExportOfAVarPredictsLikeTheFp16Export) {
    varscope::testing::TempDir dir;
    auto pipe = varscope::testing::tiny_pipeline(3, /*shared_aln=*/true);
    auto& var = *pipe.sampler().transformer();
    const auto cfg = pipe.var_config();
    export_half(var, dir.file("half.safetensors"), cfg.to_json(), {"attn_bias_for_masking"});
    export_half(var, dir.file("int8.safetensors"), cfg.to_json(), {"attn_bias_for_masking"}, {},
                /*int8=*/true);
    auto meta = nlohmann::json::parse(
        read_safetensors_metadata(dir.file("int8.safetensors")).at(kQuantMetadataKey));
    // Width 64, MLP ratio 4: fc1 and fc2 have 16,384 elements, the default threshold.
    EXPECT_NE(meta["tensors"].dump().find("blocks.0.ffn.fc1.weight"), std::string::npos)
        << meta.dump();
    EXPECT_LT(std::filesystem::file_size(dir.file("int8.safetensors")),
              std::filesystem::file_size(dir.file("half.safetensors")));

    auto load = [&](const std::string& f) {
        VarTransformer m(cfg);
        m->load(load_checkpoint(dir.file(f)), f);
        m->eval();
        return m;
    };
    auto a = load("half.safetensors"), b = load("int8.safetensors");
    auto gen = at::detail::createCPUGenerator(9);
    auto labels = at::arange(4, at::kLong);
    auto x = at::randn({4, cfg.total_tokens() - cfg.first_l(), cfg.cvae}, gen);
    at::NoGradGuard g;
    auto la = a->forward_teacher(labels, x), lb = b->forward_teacher(labels, x);
    EXPECT_FALSE(la.equal(lb));  // the int8 weights are really in use
    const double rel = ((la - lb).norm() / la.norm()).item<double>();
    EXPECT_LT(rel, 0.02) << rel;
}
