// The Infinity transformer against the official code: a tiny random model with the 2B/8B
// switches, made by tools/parity/infinity_parity.py (official modules, official save layout with
// block_chunks names), teacher-forced on random bit labels of a non-square official schedule
// with two text rows of different lengths.
#include "core/models/infinity.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/io/checkpoint.h"
#include "core/io/module_binding.h"
#include "core/models/infinity_schedule.h"
#include "tests/test_util.h"

using namespace varscope;

namespace {

// Test inputs independent of what ran before in the process (the global generator).
at::Generator seeded(uint64_t seed) {
    return at::make_generator<at::CPUGeneratorImpl>(seed);
}

std::string fixture(const std::string& name) {
    return varscope::testing::source_dir() + "/tests/fixtures/infinity_tiny/" + name;
}

double rel_err(const at::Tensor& a, const at::Tensor& b) {
    auto ad = a.to(at::kDouble), bd = b.to(at::kDouble);
    return ((ad - bd).norm() / bd.norm().clamp_min(1e-30)).item<double>();
}

nlohmann::json meta() {
    std::ifstream f(fixture("schedules.json"));
    return nlohmann::json::parse(f);
}

InfinityText fixture_text(const StateDict& t) {
    InfinityText text;
    text.kv_compact = t.at("kv_compact");
    auto lens = t.at("lens").to(at::kLong);
    for (int64_t i = 0; i < lens.numel(); ++i) text.lens.push_back(lens[i].item<int64_t>());
    return text;
}

InfinityTransformer load_tiny() {
    const auto path = fixture("infinity_tiny.pth");
    const auto dict = load_checkpoint(path);
    InfinityTransformer m(InfinityConfig::infer_from(dict, path));
    m->load(dict, path);
    m->eval();
    return m;
}

}  // namespace

TEST(Infinity, InfersTheTinyConfig) {
    const auto path = fixture("infinity_tiny.pth");
    const auto c = InfinityConfig::infer_from(load_checkpoint(path), path);
    const auto j = meta()["config"];
    EXPECT_EQ(c.depth, j["depth"].get<int64_t>());
    EXPECT_EQ(c.embed_dim, j["embed_dim"].get<int64_t>());
    EXPECT_EQ(c.num_heads, j["num_heads"].get<int64_t>());
    EXPECT_EQ(c.text_channels, j["text_channels"].get<int64_t>());
    EXPECT_EQ(c.text_maxlen, j["text_maxlen"].get<int64_t>());
    EXPECT_EQ(c.codebook_dim, j["codebook_dim"].get<int64_t>());
    EXPECT_EQ(c.vocab(), 2 * c.codebook_dim);
    EXPECT_EQ(c.pool_heads, j["text_channels"].get<int64_t>() / 128);  // the official pool width
}

TEST(Infinity, TeacherForcedLogitsMatchTheOfficialModel) {
    c10::InferenceMode guard;
    auto m = load_tiny();
    const auto t = load_safetensors(fixture("teacher.safetensors"));
    const auto j = meta();
    const auto s = infinity_schedule(j["h_div_w"].get<double>(), j["pn"].get<std::string>());
    ASSERT_EQ(s.num_scales(), t.at("scales").size(0));
    for (int64_t si = 0; si < s.num_scales(); ++si) {
        EXPECT_EQ(s.scales[si][0], t.at("scales")[si][0].item<int64_t>());
        EXPECT_EQ(s.scales[si][1], t.at("scales")[si][1].item<int64_t>());
    }
    const auto text = fixture_text(t);
    const auto c = m->condition(text);
    const double sos_err = rel_err(c.cond_BD, t.at("sos"));
    const auto logits = m->forward_teacher(text, t.at("x_BLC_wo_prefix"), s);
    ASSERT_EQ(logits.sizes(), t.at("logits").sizes());
    const double err = rel_err(logits, t.at("logits"));
    const double err_eager =
        rel_err(m->forward_teacher(text, t.at("x_BLC_wo_prefix"), s, true), t.at("logits"));
    // The text projection for cross-attention, packed back as the official kv_compact.
    std::vector<at::Tensor> rows;
    for (int64_t b = 0; b < text.batch(); ++b) rows.push_back(c.text[b].narrow(0, 0, text.lens[b]));
    const double ca_err = rel_err(at::cat(rows), t.at("ca_kv"));
    EXPECT_LE(ca_err, 1e-6);
    std::printf(
        "[infinity] teacher-forced logits rel. error %.3g (eager attention %.3g), pooled text "
        "%.3g, "
        "text for cross-attention %.3g\n",
        err, err_eager, sos_err, ca_err);
    EXPECT_LE(sos_err, 1e-5);
    // The official fp32 path rounds the cross-attention's operands and output to bf16, which
    // turns float-ulp differences into bf16-ulp ones: the official model itself moves by
    // 6e-5 to 1e-4 when its input moves by 1e-7 (relative; tools/parity/infinity_parity.py prints
    // this noise floor). The SDPA path stays within 1e-4; eager attention sums in another order.
    EXPECT_LE(err, 1e-4);
    EXPECT_LE(err_eager, 2e-4);
}

// The comparison can fail: one perturbed weight of the last block moves the logits past the bound.
TEST(Infinity, TeacherForcedParityDetectsAPerturbedWeight) {
    c10::InferenceMode guard;
    auto m = load_tiny();
    const auto t = load_safetensors(fixture("teacher.safetensors"));
    const auto j = meta();
    const auto s = infinity_schedule(j["h_div_w"].get<double>(), j["pn"].get<std::string>());
    m->block(m->config().depth - 1).ffn->fc2->weight.mul_(1.01);
    EXPECT_GT(
        rel_err(m->forward_teacher(fixture_text(t), t.at("x_BLC_wo_prefix"), s), t.at("logits")),
        1e-4);
}

TEST(Infinity, ReleasedLayoutNamesAreRenamed) {
    StateDict d;
    for (int c = 0; c < 2; ++c)
        for (int j = 0; j < 3; ++j)
            d["block_chunks." + std::to_string(c) + ".module." + std::to_string(j) + ".sa.q_bias"] =
                at::zeros({1});
    d["head.weight"] = at::zeros({1});
    const auto r = infinity_canonical_names(d, "x.pth");
    EXPECT_TRUE(r.count("blocks.5.sa.q_bias"));
    EXPECT_TRUE(r.count("blocks.3.sa.q_bias"));
    EXPECT_TRUE(r.count("head.weight"));
    EXPECT_EQ(r.size(), d.size());
    d.erase("block_chunks.1.module.2.sa.q_bias");
    try {
        infinity_canonical_names(d, "x.pth");
        FAIL() << "uneven chunks accepted";
    } catch (const CheckpointError& e) {
        EXPECT_NE(std::string(e.what()).find("x.pth"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("block_chunks.1"), std::string::npos) << e.what();
    }
}

TEST(Infinity, ErrorsNameTheFileAndTheTensor) {
    const auto path = fixture("infinity_tiny.pth");
    auto dict = load_checkpoint(path);
    dict.erase("block_chunks.1.module.0.ca.mat_kv.weight");
    InfinityTransformer m(InfinityConfig::infer_from(dict, path));
    try {
        m->load(dict, path);
        FAIL() << "missing tensor accepted";
    } catch (const CheckpointError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("infinity_tiny.pth"), std::string::npos) << msg;
        EXPECT_NE(msg.find("blocks.3.ca.mat_kv.weight"), std::string::npos) << msg;
    }
    dict = load_checkpoint(path);
    dict.erase("cfg_uncond");
    try {
        InfinityConfig::infer_from(dict, path);
        FAIL() << "missing cfg_uncond accepted";
    } catch (const CheckpointError& e) {
        EXPECT_NE(std::string(e.what()).find("cfg_uncond"), std::string::npos) << e.what();
    }
}

TEST(Infinity, RandomModelRunsTheReleasedShapesScaledDown) {
    c10::InferenceMode guard;
    auto c = InfinityConfig::infinity_2b();
    EXPECT_EQ(c.depth, 32);
    EXPECT_EQ(c.head_dim(), 128);
    EXPECT_EQ(InfinityConfig::infinity_8b().head_dim(), 128);
    c.depth = 2, c.embed_dim = 64, c.num_heads = 4, c.mlp_hidden = 128, c.text_channels = 128;
    c.text_maxlen = 8, c.pool_heads = 1, c.codebook_dim = 4;
    auto m = random_infinity(c, 3);
    auto m2 = random_infinity(c, 3);
    const auto s = infinity_schedule(1.0, "0.06M").first(4);
    InfinityText text{at::randn({7, 128}, seeded(1)), {3, 4}};
    const auto x = at::randn({2, s.total_tokens() - 1, 4}, seeded(1));
    const auto a = m->forward_teacher(text, x, s), b = m2->forward_teacher(text, x, s);
    EXPECT_EQ(a.sizes(), (std::vector<int64_t>{2, s.total_tokens(), 8}));
    EXPECT_TRUE(at::equal(a, b));  // same seed, same weights
    EXPECT_TRUE(at::isfinite(a).all().item<bool>());
    // CFG rows: the unconditional copy has the same lengths.
    const auto u = m->with_unconditional(text);
    EXPECT_EQ(u.lens, (std::vector<int64_t>{3, 4, 3, 4}));
    EXPECT_EQ(u.kv_compact.size(0), 14);
}

// The CFG batch: cfg_uncond rows of each row's length, or the given negative texts.
TEST(Infinity, UnconditionalRowsAreCfgUncondOrTheNegativeText) {
    auto m = load_tiny();
    const auto t = load_safetensors(fixture("teacher.safetensors"));
    const auto text = fixture_text(t);
    const auto u = m->with_unconditional(text);
    const int64_t n = text.kv_compact.size(0);
    EXPECT_EQ(u.lens, (std::vector<int64_t>{5, 11, 5, 11}));
    EXPECT_TRUE(at::equal(u.kv_compact.narrow(0, 0, n), text.kv_compact));
    EXPECT_TRUE(at::equal(u.kv_compact.narrow(0, n, 5), m->cfg_uncond.narrow(0, 0, 5)));
    EXPECT_TRUE(at::equal(u.kv_compact.narrow(0, n + 5, 11), m->cfg_uncond.narrow(0, 0, 11)));
    InfinityText neg{at::ones({7, 128}), {3, 4}};
    const auto v = m->with_unconditional(text, &neg);
    EXPECT_EQ(v.lens, (std::vector<int64_t>{5, 11, 3, 4}));
    EXPECT_TRUE(at::equal(v.kv_compact.narrow(0, n, 7), neg.kv_compact));
    InfinityText one{at::ones({3, 128}), {3}};
    EXPECT_THROW(m->with_unconditional(text, &one), std::invalid_argument);
    InfinityText too_long{at::ones({17, 128}), {17}};
    EXPECT_THROW(m->with_unconditional(too_long), std::invalid_argument);
}

// The released 2B / 8B layouts at full size (names and shapes of the official modules built on
// the meta device by tools/parity/infinity_parity.py): the config read off them is the
// builder's, and every name binds to this module's (depth as released, tiny widths).
TEST(Infinity, ReleasedTwoAndEightBLayoutsAreUnderstood) {
    std::ifstream f(fixture("release_shapes.json"));
    const auto j = nlohmann::json::parse(f);
    for (const auto& [name, expected] :
         {std::pair{std::string("2b"), InfinityConfig::infinity_2b()},
          {"8b", InfinityConfig::infinity_8b()}}) {
        StateDict d;
        for (const auto& [k, shape] : j.at(name).items())
            d[k] =
                at::empty(shape.get<std::vector<int64_t>>(), at::TensorOptions().device(at::kMeta));
        EXPECT_TRUE(d.count("block_chunks.7.module.3.sa.mat_qkv.weight")) << name;
        const auto c = InfinityConfig::infer_from(d, name);
        EXPECT_EQ(c.to_json(), expected.to_json()) << name;
        auto tiny = c;
        tiny.embed_dim = 32, tiny.num_heads = 2, tiny.mlp_hidden = 8, tiny.text_channels = 8;
        tiny.text_maxlen = 2, tiny.pool_heads = 1, tiny.codebook_dim = 2;
        std::set<std::string> ours, theirs;
        for (const auto& kv : module_state_dict(*InfinityTransformer(tiny))) ours.insert(kv.first);
        for (const auto& kv : infinity_canonical_names(d, name)) theirs.insert(kv.first);
        EXPECT_EQ(ours, theirs) << name;
    }
}
