// Infinity's sampling loop against the official autoregressive_infer_cfg on the tiny fixture
// (tools/parity/infinity_parity.py): the same bits at every scale for the same seed, with
// guidance on the logits and at a layer's output, tau, top-k and top-p; and the hook points.
#include "core/sampling/infinity_sampler.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/accel/accel_config.h"
#include "core/io/checkpoint.h"
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

nlohmann::json meta() {
    std::ifstream f(fixture("schedules.json"));
    return nlohmann::json::parse(f);
}

InfinityTransformer load_tiny() {
    const auto path = fixture("infinity_tiny.pth");
    const auto dict = load_checkpoint(path);
    InfinityTransformer m(InfinityConfig::infer_from(dict, path));
    m->load(dict, path);
    return m;
}

InfinityText fixture_text() {
    const auto t = load_safetensors(fixture("teacher.safetensors"));
    InfinityText text{t.at("kv_compact"), {}};
    for (int64_t i = 0; i < t.at("lens").numel(); ++i)
        text.lens.push_back(t.at("lens")[i].item<int64_t>());
    return text;
}

// A fixture run's sampling settings (schedules.json: "runs", "patchify_run").
InfinitySampleOptions options_of(const nlohmann::json& run) {
    InfinitySampleOptions o;
    o.seed = run["seed"].get<uint64_t>();
    o.cfg_list = run["cfg"].get<std::vector<double>>();
    o.tau_list = run["tau"].get<std::vector<double>>();
    o.top_k = run["top_k"].get<int64_t>();
    o.top_p = run["top_p"].get<double>();
    o.cfg_insertion_layer = run["cfg_insertion_layer"].get<std::vector<int64_t>>();
    return o;
}

bsq::BsqQuantConfig quant(int64_t d) {
    bsq::BsqQuantConfig q;
    q.codebook_dim = d;
    return q;
}

// Counts the hook calls and changes nothing.
struct CountingHooks : SamplingHooks {
    int scale_begin = 0, select = 0, kv_append = 0, attends = 0, block_output = 0, logits = 0,
        scale_end = 0;
    int64_t run = 1000;
    int64_t scales_to_run(const VarConfig& c) override { return std::min(run, c.num_scales()); }
    void on_scale_begin(ScaleContext&) override { ++scale_begin; }
    at::Tensor select_tokens(const BlockContext&, const at::Tensor&) override {
        ++select;
        return {};
    }
    void on_kv_append(const BlockContext&) override { ++kv_append; }
    at::Tensor attend(const BlockContext&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                      double) override {
        ++attends;
        return {};
    }
    void on_block_output(const BlockContext&, const at::Tensor&) override { ++block_output; }
    void on_logits(const ScaleContext&, at::Tensor&) override { ++logits; }
    void on_scale_end(const ScaleContext&, const ScaleSegment&, const at::Tensor&,
                      const at::Tensor&) override {
        ++scale_end;
    }
};

}  // namespace

TEST(InfinitySampler, SameBitsAsTheOfficialSamplerAtEveryScale) {
    const auto j = meta();
    const auto s = infinity_schedule(j["h_div_w"].get<double>(), j["pn"].get<std::string>());
    InfinitySampler sampler(load_tiny(), quant(j["config"]["codebook_dim"].get<int64_t>()));
    const auto text = fixture_text();
    for (const auto& [name, run] : j["runs"].items()) {
        InfinitySampleOptions o = options_of(run);
        const auto r = sampler.sample(text, s, o);
        const auto expected = load_safetensors(fixture("sample_" + name + ".safetensors"));
        ASSERT_EQ(static_cast<int64_t>(r.bits.size()), s.num_scales());
        int64_t first_bad = -1;
        for (int64_t si = 0; si < s.num_scales(); ++si) {
            const auto& e = expected.at("bits." + std::to_string(si));
            ASSERT_EQ(r.bits[si].sizes(), e.sizes()) << name << " scale " << si;
            if (first_bad < 0 && !at::equal(r.bits[si], e)) first_bad = si;
        }
        EXPECT_EQ(first_bad, -1) << name << ": bits differ from scale " << first_bad << " on";
        const auto& sc = expected.at("summed_codes");
        const double err = ((r.summed_codes - sc).norm() / sc.norm()).item<double>();
        std::printf(
            "[infinity] run %s: bits identical at %s scales, summed codes rel. error %.3g\n",
            name.c_str(), first_bad < 0 ? "all" : "not all", err);
        EXPECT_LE(err, 1e-6) << name;
        // The settings matter: guidance at the other insertion point draws other bits.
        if (name == "layer_cfg") {
            o.cfg_insertion_layer = {0};
            EXPECT_FALSE(at::equal(sampler.sample(text, s, o).bits.back(), r.bits.back()));
        }
    }
}

// The official bf16 mode (bf16 blocks under CUDA autocast, emulated op by op on the CPU by
// tools/parity/autocast_emulation.py): the same bits as the official loop, which differ from the
// fp32 run's at the later scales (so the test sees the precision). Known gap: in the logits-CFG
// run the official summed codes' trilinear interpolations (channels-last) come out a few ulp
// apart from ours from scale 2 on (seen in their sums: 45.254837036 vs 45.254836991); under bf16
// rounding of the next word embedding that flips bits from scale 4 or 5 on (the CPU's kernels
// decide which: 5 on the 2-core dev machine, 4 on the GPU machine's). Until found, that run is
// held to its first four scales; the layer-CFG run to all of them.
TEST(InfinitySampler, Bf16ModeGivesTheOfficialBf16Bits) {
    const auto j = meta();
    const auto s = infinity_schedule(j["h_div_w"].get<double>(), j["pn"].get<std::string>());
    auto model = load_tiny();
    model->use_autocast_bf16();
    EXPECT_TRUE(model->autocast_bf16());
    EXPECT_EQ(model->compute_dtype(), at::kBFloat16);
    InfinitySampler sampler(model, quant(j["config"]["codebook_dim"].get<int64_t>()));
    ASSERT_FALSE(j["bf16_runs"].empty());
    for (const auto& [name, base] : j["bf16_runs"].items()) {
        const auto& run = j["runs"][base.get<std::string>()];
        InfinitySampleOptions o = options_of(run);
        const auto r = sampler.sample(fixture_text(), s, o);
        const auto expected = load_safetensors(fixture("sample_" + name + ".safetensors"));
        const auto fp32 =
            load_safetensors(fixture("sample_" + base.get<std::string>() + ".safetensors"));
        int64_t first_bad = -1, differs_from_fp32 = 0;
        for (int64_t si = 0; si < s.num_scales(); ++si) {
            const auto key = "bits." + std::to_string(si);
            ASSERT_EQ(r.bits[si].sizes(), expected.at(key).sizes()) << name << " scale " << si;
            if (first_bad < 0 && !at::equal(r.bits[si], expected.at(key))) first_bad = si;
            differs_from_fp32 += !at::equal(expected.at(key), fp32.at(key));
        }
        const int64_t held_to = name == "bf16_logits_cfg" ? 4 : s.num_scales();
        std::printf(
            "[infinity] %s: bits identical to the official bf16 run up to scale %lld of %lld\n",
            name.c_str(), static_cast<long long>(first_bad < 0 ? s.num_scales() : first_bad),
            static_cast<long long>(s.num_scales()));
        EXPECT_TRUE(first_bad == -1 || first_bad >= held_to)
            << name << ": bits differ from scale " << first_bad << " on";
        EXPECT_GT(differs_from_fp32, 0) << name << ": the fixture does not tell bf16 from fp32";
    }
}

TEST(InfinitySampler, ASeedGivesTheSameBitsAndAnotherSeedOthers) {
    const auto j = meta();
    const auto s =
        infinity_schedule(j["h_div_w"].get<double>(), j["pn"].get<std::string>()).first(4);
    InfinitySampler sampler(load_tiny(), quant(8));
    InfinitySampleOptions o;
    o.seed = 5;
    const auto a = sampler.sample(fixture_text(), s, o), b = sampler.sample(fixture_text(), s, o);
    o.seed = 6;
    const auto c = sampler.sample(fixture_text(), s, o);
    EXPECT_TRUE(at::equal(a.bits.back(), b.bits.back()));
    EXPECT_FALSE(at::equal(a.bits.back(), c.bits.back()));
}

TEST(InfinitySampler, PassThroughHooksAreCalledAndChangeNothing) {
    auto cfg = InfinityConfig::infinity_2b();
    cfg.depth = 3, cfg.embed_dim = 64, cfg.num_heads = 4, cfg.mlp_hidden = 128,
    cfg.text_channels = 128;
    cfg.text_maxlen = 8, cfg.pool_heads = 1, cfg.codebook_dim = 4;
    InfinitySampler sampler(random_infinity(cfg, 1), quant(4));
    const auto s = infinity_schedule(1.0, "0.06M").first(4);  // square: hooks allowed
    InfinityText text{at::randn({7, 128}, seeded(1)), {3, 4}};
    InfinitySampleOptions o;
    o.cfg_insertion_layer = {0, -2};
    const auto base = sampler.sample(text, s, o);
    CountingHooks hooks;
    const auto hooked = sampler.sample(text, s, o, &hooks);
    for (size_t si = 0; si < base.bits.size(); ++si)
        EXPECT_TRUE(at::equal(base.bits[si], hooked.bits[si]));
    EXPECT_EQ(hooks.scale_begin, 4);
    EXPECT_EQ(hooks.select, 4 * 3);
    EXPECT_EQ(hooks.kv_append, 4 * 3);
    EXPECT_EQ(hooks.attends, 4 * 3);
    EXPECT_EQ(hooks.block_output, 4 * 3);
    EXPECT_EQ(hooks.logits, 4);
    EXPECT_EQ(hooks.scale_end, 4);
    // scales_to_run cuts the loop; the scales run are the baseline's.
    hooks.run = 2;
    const auto cut = sampler.sample(text, s, o, &hooks);
    ASSERT_EQ(cut.bits.size(), 2u);
    EXPECT_TRUE(at::equal(cut.bits[1], base.bits[1]));
    // Non-square schedules have no VarConfig view for the hooks.
    EXPECT_FALSE(infinity_hook_view(cfg, infinity_schedule(1.333, "0.06M")).has_value());
    EXPECT_THROW(sampler.sample(text, infinity_schedule(1.333, "0.06M").first(3), o, &hooks),
                 std::invalid_argument);
}

TEST(InfinitySampler, ValidatesTheSettings) {
    const auto c = InfinityConfig::infinity_2b();
    const auto s = infinity_schedule(1.0);
    InfinitySampleOptions o;
    EXPECT_NO_THROW(o.validate(c, s));
    o.cfg_list = {1.0, 2.0};
    EXPECT_THROW(o.validate(c, s), std::invalid_argument);
    o = {};
    o.cfg_insertion_layer = {-32};
    EXPECT_THROW(o.validate(c, s), std::invalid_argument);
    o.cfg_insertion_layer = {-5};
    EXPECT_NO_THROW(o.validate(c, s));
    o.tau = 0;
    EXPECT_THROW(o.validate(c, s), std::invalid_argument);
}

// The VAR accelerators through the same hooks on a square Infinity schedule: every preset runs
// (or is refused with a message), and a run leaves finite codes.
TEST(InfinitySampler, VarAcceleratorPresetsRunThroughTheHooks) {
    auto cfg = InfinityConfig::infinity_2b();
    cfg.depth = 2, cfg.embed_dim = 64, cfg.num_heads = 4, cfg.mlp_hidden = 128,
    cfg.text_channels = 128;
    cfg.text_maxlen = 8, cfg.pool_heads = 1, cfg.codebook_dim = 4;
    InfinitySampler sampler(random_infinity(cfg, 2), quant(4));
    const auto s = infinity_schedule(1.0, "0.25M");  // 10 scales up to 32 x 32
    const auto view = infinity_hook_view(cfg, s);
    ASSERT_TRUE(view.has_value());
    InfinityText text{at::randn({7, 128}, seeded(1)), {3, 4}};
    InfinitySampleOptions o;
    const auto base = sampler.sample(text, s, o);
    int ran = 0;
    for (const auto& [name, json] : accel_presets()) {
        std::string outcome;
        try {
            auto hooks = build_accelerators(AccelConfig::from_json(json), *view);
            const auto r = sampler.sample(text, s, o, hooks.get());
            EXPECT_TRUE(at::isfinite(r.summed_codes).all().item<bool>()) << name;
            int64_t same = 0;
            for (size_t si = 0; si < r.bits.size(); ++si)
                same += at::equal(r.bits[si], base.bits[si]);
            outcome = "ran " + std::to_string(r.bits.size()) + " scales, " + std::to_string(same) +
                      " identical to the baseline, attention FLOPs x" +
                      std::to_string(r.attention_flops / base.attention_flops);
            ++ran;
        } catch (const std::exception& e) {
            outcome = std::string("refused: ") + e.what();
        }
        std::printf("[infinity] preset %-24s %s\n", name.c_str(), outcome.c_str());
    }
    EXPECT_GT(ran, 0);
}

// Infinity-8B's layout: a token holds 2 x 2 latent positions' bits (apply_spatial_patchify).
// The official run recorded the bits where it turns them into codes, i.e. unpatchified.
TEST(InfinitySampler, SpatialPatchifyGivesTheOfficialBits) {
    const auto j = meta();
    const auto& run = j["patchify_run"];
    const auto s = infinity_schedule(j["h_div_w"].get<double>(), j["pn"].get<std::string>());
    auto q = quant(run["vae_codebook_dim"].get<int64_t>());
    q.spatial_patchify = true;
    InfinitySampler sampler(load_tiny(), q);
    InfinitySampleOptions o = options_of(run);
    const auto r = sampler.sample(fixture_text(), s, o);
    const auto expected = load_safetensors(fixture("sample_patchify.safetensors"));
    int64_t first_bad = -1;
    for (int64_t si = 0; si < s.num_scales(); ++si) {
        const auto ours = bsq::unpatchify_bits(r.bits[si]);
        const auto& e = expected.at("bits." + std::to_string(si));
        ASSERT_EQ(ours.sizes(), e.sizes()) << si;
        if (first_bad < 0 && !at::equal(ours, e)) first_bad = si;
    }
    EXPECT_EQ(first_bad, -1) << "bits differ from scale " << first_bad << " on";
    EXPECT_EQ(r.summed_codes.size(1), 2);
    EXPECT_EQ(r.summed_codes.size(2), 2 * s.scales.back()[0]);
}

// Probes: attention maps of the asked (scale, layer), per-scale records with the summed codes.
TEST(InfinitySampler, ProbesGetAttentionMapsAndScaleRecords) {
    struct Probe : ProbeSink {
        bool wants_attention(int64_t scale, int64_t layer) const override {
            return scale == 2 && layer == 1;
        }
        bool wants_fhat() const override { return true; }
        void on_attention(AttentionRecord r) override { maps.push_back(std::move(r)); }
        void on_scale(ScaleRecord r) override { scales.push_back(std::move(r)); }
        std::vector<AttentionRecord> maps;
        std::vector<ScaleRecord> scales;
    } probe;
    const auto s = infinity_schedule(1.333, "0.06M").first(4);
    InfinitySampler sampler(load_tiny(), quant(8));
    InfinitySampleOptions o;
    const auto base = sampler.sample(fixture_text(), s, o);
    const auto r = sampler.sample(fixture_text(), s, o, nullptr, &probe);
    ASSERT_EQ(probe.maps.size(), 1u);
    const int64_t q = s.tokens(2), kv = s.scale_begin(3);  // scale 2's queries, keys up to it
    EXPECT_EQ(probe.maps[0].probs.sizes(), (std::vector<int64_t>{2, q, kv}));
    EXPECT_NEAR(probe.maps[0].probs.sum(-1).mean().item<double>(), 1.0, 1e-5);
    ASSERT_EQ(probe.scales.size(), 4u);
    EXPECT_TRUE(at::equal(probe.scales.back().f_hat, r.summed_codes));
    // (No bit-equality with `base` here: the probed layer attends eagerly, and the official
    // bf16 rounding of cross-attention can turn that summation order into a flipped bit.)
    EXPECT_EQ(r.bits.size(), base.bits.size());
}
