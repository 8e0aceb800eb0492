// VQVAE: official tensor names, config inference, quantizer identities and the training path.
// Expected counts and Phi indices below were produced by the official PyTorch code / numpy.
#include "core/models/vqvae.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/io/module_binding.h"
#include "core/models/vqvae_parity.h"
#include "tests/tiny_models.h"

using namespace varscope;

namespace {

// ch=32, ch_mult {1,2}, z=8, V=64, patch_nums {1,2,4}: f is 4x4 for an 8x8 image.
VqvaeConfig small_config(int64_t share = 4) {
    VqvaeConfig c = varscope::testing::tiny_vqvae_config();
    c.share_quant_resi = share;
    return c;
}

std::vector<at::Tensor> random_idx(const VqvaeConfig& c, int64_t B) {
    std::vector<at::Tensor> idx;
    for (int64_t pn : c.patch_nums)
        idx.push_back(at::randint(c.vocab_size, {B, pn * pn}, at::kLong));
    return idx;
}

int64_t total_numel(const StateDict& d) {
    int64_t n = 0;
    for (const auto& kv : d) n += kv.second.numel();
    return n;
}

double rel_diff(const at::Tensor& a, const at::Tensor& b) {
    return (a - b).abs().max().item<double>() / std::max(b.abs().max().item<double>(), 1e-30);
}

}  // namespace

TEST(VqvaeNames, SmallConfigMatchesOfficialStateDict) {
    Vqvae m(small_config());
    const StateDict sd = module_state_dict(*m);
    // Official VQVAE(vocab_size=64, z_channels=8, ch=32, v_patch_nums=(1,2,4)), ch_mult (1,2).
    EXPECT_EQ(sd.size(), 188u);
    EXPECT_EQ(total_numel(sd), 934107);
    const std::vector<std::pair<std::string, std::vector<int64_t>>> expected = {
        {"encoder.conv_in.weight", {32, 3, 3, 3}},
        {"encoder.down.0.block.1.conv2.weight", {32, 32, 3, 3}},
        {"encoder.down.0.downsample.conv.weight", {32, 32, 3, 3}},
        {"encoder.down.1.block.0.nin_shortcut.weight", {64, 32, 1, 1}},
        {"encoder.down.1.attn.1.qkv.weight", {192, 64, 1, 1}},
        {"encoder.mid.attn_1.proj_out.bias", {64}},
        {"encoder.mid.block_2.norm1.weight", {64}},
        {"encoder.conv_out.weight", {8, 64, 3, 3}},
        {"decoder.conv_in.weight", {64, 8, 3, 3}},
        {"decoder.up.1.attn.2.qkv.weight", {192, 64, 1, 1}},
        {"decoder.up.1.upsample.conv.weight", {64, 64, 3, 3}},
        {"decoder.up.0.block.0.nin_shortcut.weight", {32, 64, 1, 1}},
        {"decoder.up.0.block.2.conv2.weight", {32, 32, 3, 3}},
        {"decoder.norm_out.bias", {32}},
        {"decoder.conv_out.weight", {3, 32, 3, 3}},
        {"quant_conv.weight", {8, 8, 3, 3}},
        {"post_quant_conv.bias", {8}},
        {"quantize.embedding.weight", {64, 8}},
        {"quantize.ema_vocab_hit_SV", {3, 64}},
        {"quantize.quant_resi.qresi_ls.3.weight", {8, 8, 3, 3}},
    };
    for (const auto& [name, shape] : expected) {
        auto it = sd.find(name);
        ASSERT_NE(it, sd.end()) << "missing " << name;
        EXPECT_EQ(it->second.sizes(), at::IntArrayRef(shape)) << name;
    }
    for (const char* absent :
         {"encoder.down.1.downsample.conv.weight", "encoder.down.0.attn.0.qkv.weight",
          "encoder.down.0.block.1.nin_shortcut.weight", "decoder.up.0.upsample.conv.weight",
          "decoder.up.0.attn.0.qkv.weight", "decoder.up.1.block.0.nin_shortcut.weight"})
        EXPECT_EQ(sd.count(absent), 0u) << absent;
    // ema_vocab_hit_SV is a buffer, not a parameter (it must not reach an optimizer).
    EXPECT_EQ(m->named_parameters().find("quantize.ema_vocab_hit_SV"), nullptr);
    EXPECT_NE(m->named_buffers().find("quantize.ema_vocab_hit_SV"), nullptr);
}

TEST(VqvaeNames, PhiLayoutsMatchOfficial) {
    const StateDict shared = module_state_dict(*Vqvae(small_config(1)));
    EXPECT_EQ(shared.size(), 182u);
    EXPECT_EQ(total_numel(shared), 932355);
    EXPECT_EQ(shared.count("quantize.quant_resi.qresi.bias"), 1u);

    const StateDict nonshared = module_state_dict(*Vqvae(small_config(0)));
    EXPECT_EQ(nonshared.size(), 186u);
    EXPECT_EQ(total_numel(nonshared), 933523);
    EXPECT_EQ(nonshared.count("quantize.quant_resi.2.weight"), 1u);

    VqvaeConfig identity = small_config(4);
    identity.quant_resi = 0.0;
    for (const auto& kv : module_state_dict(*Vqvae(identity)))
        EXPECT_EQ(kv.first.find("quant_resi"), std::string::npos) << kv.first;
}

TEST(VqvaeNames, DefaultConfigMatchesOfficialSize) {
    // The released vae_ch160v4096z32.pth layout: 324 tensors, 108,989,315 elements.
    const StateDict sd = module_state_dict(*Vqvae(VqvaeConfig{}));
    EXPECT_EQ(sd.size(), 324u);
    EXPECT_EQ(total_numel(sd), 108989315);
    EXPECT_EQ(VqvaeConfig{}.downsample(), 16);
}

TEST(VqvaeConfig, InferFromRoundTripsAllPhiModes) {
    std::vector<VqvaeConfig> configs;
    for (int64_t share : {0, 1, 3, 4}) configs.push_back(small_config(share));
    VqvaeConfig variant = small_config(0);
    variant.qresi_counts = 5;  // non-shared with a count other than len(patch_nums)
    variant.using_sa = false;
    variant.num_res_blocks = 1;
    variant.quant_conv_ks = 1;
    configs.push_back(variant);
    VqvaeConfig no_mid = small_config(1);
    no_mid.using_mid_sa = false;
    no_mid.ch_mult = {1, 1, 2};
    no_mid.patch_nums = {1, 2};
    configs.push_back(no_mid);
    VqvaeConfig identity = small_config(4);
    identity.quant_resi = 0.0;
    configs.push_back(identity);

    for (const VqvaeConfig& c : configs) {
        const StateDict sd = module_state_dict(*Vqvae(c));
        const VqvaeConfig back = VqvaeConfig::infer_from(sd, c.patch_nums);
        EXPECT_EQ(back, c) << c.to_json().dump() << "\n vs \n" << back.to_json().dump();
    }
}

TEST(VqvaeConfig, InferFromNamesMissingTensor) {
    StateDict sd = module_state_dict(*Vqvae(small_config()));
    sd.erase("encoder.conv_in.weight");
    try {
        VqvaeConfig::infer_from(sd, {1, 2, 4});
        FAIL() << "expected CheckpointError";
    } catch (const CheckpointError& e) {
        EXPECT_NE(std::string(e.what()).find("'encoder.conv_in.weight'"), std::string::npos)
            << e.what();
    }
}

TEST(VqvaeConfig, JsonRoundTrip) {
    VqvaeConfig c = small_config(0);
    c.qresi_counts = 7;
    c.using_mid_sa = false;
    EXPECT_EQ(VqvaeConfig::from_json(nlohmann::json::parse(c.to_json().dump())), c);
    // Absent keys keep defaults.
    VqvaeConfig partial = VqvaeConfig::from_json(nlohmann::json{{"ch", 64}});
    EXPECT_EQ(partial.ch, 64);
    EXPECT_EQ(partial.vocab_size, 4096);
}

TEST(VqvaeLoad, CopiesWeightsAndToleratesForeignEma) {
    at::manual_seed(1);
    Vqvae src(small_config()), dst(small_config());
    StateDict sd = module_state_dict(*src);
    sd["quantize.ema_vocab_hit_SV"] = at::ones({10, 64});  // trained with another patch schedule
    dst->load(sd, "src.pth");
    EXPECT_TRUE(dst->quantizer()->codebook().equal(src->quantizer()->codebook()));
    const StateDict got = module_state_dict(*dst);
    EXPECT_TRUE(
        got.at("decoder.up.1.attn.2.qkv.weight").equal(sd.at("decoder.up.1.attn.2.qkv.weight")));
    EXPECT_EQ(got.at("quantize.ema_vocab_hit_SV").sum().item<double>(), 0.0);

    sd.erase("decoder.conv_out.bias");
    try {
        dst->load(sd, "broken.pth");
        FAIL() << "expected CheckpointError";
    } catch (const CheckpointError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("broken.pth"), std::string::npos) << msg;
        EXPECT_NE(msg.find("'decoder.conv_out.bias'"), std::string::npos) << msg;
    }
}

TEST(VqvaeQuant, PhiTickIndexMatchesOfficial) {
    // numpy reference. K=4, SN=10 has exact ties at si=2 and si=7 (5/36 either side) that float
    // rounding resolves to the upper tick: 0,0,1,... not 0,0,0,...
    auto picks = [](int64_t K, int64_t SN) {
        std::vector<int64_t> out;
        for (int64_t si = 0; si < SN; ++si) out.push_back(phi_tick_index(K, si, SN));
        return out;
    };
    EXPECT_EQ(picks(4, 10), (std::vector<int64_t>{0, 0, 1, 1, 1, 2, 2, 3, 3, 3}));
    EXPECT_EQ(picks(4, 13), (std::vector<int64_t>{0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3}));
    EXPECT_EQ(picks(4, 3), (std::vector<int64_t>{0, 2, 3}));
    EXPECT_EQ(picks(10, 10), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
    EXPECT_EQ(picks(10, 13), (std::vector<int64_t>{0, 0, 1, 2, 3, 4, 5, 5, 6, 7, 8, 9, 9}));
    EXPECT_EQ(picks(3, 10), (std::vector<int64_t>{0, 0, 0, 0, 1, 1, 1, 2, 2, 2}));

    Vqvae m(small_config(4));
    EXPECT_EQ(m->phi_for_scale(2, 10), 1);
    EXPECT_EQ(m->phi_for_scale(7, 10), 3);
    EXPECT_EQ(Vqvae(small_config(1))->phi_for_scale(9, 10), 0);  // shared: always the one Phi
    EXPECT_EQ(Vqvae(small_config(0))->phi_for_scale(1, 3), 1);   // 3 Phis for 3 scales
}

TEST(VqvaeQuant, FToIdxThenIdxToFhatEqualsLastFhat) {
    at::manual_seed(2);
    Vqvae m(small_config());
    at::NoGradGuard no_grad;
    const at::Tensor f = at::randn({2, 8, 4, 4});
    const auto idx = m->f_to_idx(f);
    ASSERT_EQ(idx.size(), 3u);
    for (size_t si = 0; si < idx.size(); ++si) {
        const int64_t pn = m->config().patch_nums[si];
        EXPECT_EQ(idx[si].sizes(), at::IntArrayRef({2, pn * pn}));
        EXPECT_EQ(idx[si].scalar_type(), at::kLong);
    }
    const auto fhats = m->f_to_fhats(f);
    ASSERT_EQ(fhats.size(), 3u);
    EXPECT_LT(rel_diff(m->idx_to_fhat(idx), fhats.back()), 1e-6);
    // The prefix sums agree too.
    EXPECT_LT(rel_diff(m->idx_to_fhat({idx[0], idx[1]}), fhats[1]), 1e-6);
}

TEST(VqvaeQuant, SingleScaleRequantizationRecoversIndices) {
    // One full-resolution scale and identity Phi: f_hat is the codebook lookup itself, so
    // quantizing it again must return the very same tokens.
    at::manual_seed(3);
    VqvaeConfig c = small_config();
    c.patch_nums = {4};
    c.quant_resi = 0.0;
    Vqvae m(c);
    at::NoGradGuard no_grad;
    const auto idx = random_idx(c, 3);
    const at::Tensor f = m->idx_to_fhat(idx);
    EXPECT_TRUE(m->f_to_idx(f)[0].equal(idx[0]));
}

TEST(VqvaeQuant, RequantizingCodebookLatentShrinksResidual) {
    at::manual_seed(4);
    const VqvaeConfig c = small_config();
    Vqvae m(c);
    at::NoGradGuard no_grad;
    const at::Tensor f = m->idx_to_fhat(random_idx(c, 4));
    double prev = f.norm().item<double>();
    for (const at::Tensor& fhat : m->f_to_fhats(f)) {
        const double rest = (f - fhat).norm().item<double>();
        EXPECT_LT(rest, prev);
        prev = rest;
    }
}

TEST(VqvaeQuant, NextAutoregressiveInputMatchesIdxToFhatAndVarInput) {
    at::manual_seed(5);
    const VqvaeConfig c = small_config();
    Vqvae m(c);
    at::NoGradGuard no_grad;
    const int64_t B = 2, SN = 3;
    const auto idx = random_idx(c, B);
    at::Tensor f_hat = at::zeros({B, 8, 4, 4});
    std::vector<at::Tensor> next_inputs;
    for (int64_t si = 0; si < SN; ++si) {
        const at::Tensor h = m->quantizer()->lookup(idx[si], c.patch_nums[si]);
        auto [acc, next] = m->next_autoregressive_input(si, SN, f_hat, h);
        EXPECT_TRUE(acc.is_same(f_hat));  // accumulates in place
        const int64_t pn_next = si + 1 < SN ? c.patch_nums[si + 1] : 4;
        EXPECT_EQ(next.sizes(), at::IntArrayRef({B, 8, pn_next, pn_next}));
        if (si + 1 < SN)
            next_inputs.push_back(next.reshape({B, 8, -1}).transpose(1, 2));
        else
            EXPECT_TRUE(next.is_same(f_hat));
    }
    EXPECT_LT(rel_diff(f_hat, m->idx_to_fhat(idx)), 1e-6);

    const at::Tensor var_in = m->idx_to_var_input(idx);
    EXPECT_EQ(var_in.sizes(), at::IntArrayRef({B, 1 + 4 + 16 - 1, 8}));
    EXPECT_LT(rel_diff(var_in, at::cat(next_inputs, 1)), 1e-6);
}

TEST(VqvaeModel, EncodeDecodeShapes) {
    at::manual_seed(6);
    Vqvae m(small_config());
    at::NoGradGuard no_grad;
    const at::Tensor img = at::rand({2, 3, 8, 8}) * 2 - 1;
    const at::Tensor f = m->encode(img);
    EXPECT_EQ(f.sizes(), at::IntArrayRef({2, 8, 4, 4}));
    const at::Tensor rec = m->idx_to_img(m->img_to_idx(img));
    EXPECT_EQ(rec.sizes(), img.sizes());
    EXPECT_LE(rec.abs().max().item<double>(), 1.0);
    EXPECT_THROW(m->f_to_idx(at::zeros({2, 8, 5, 5})), std::invalid_argument);
}

TEST(VqvaeModel, ForwardTrainGivesStraightThroughGradients) {
    at::manual_seed(7);
    Vqvae m(small_config());
    m->train();
    const at::Tensor img = at::rand({2, 3, 8, 8}) * 2 - 1;
    VqvaeTrainOutput out = m->forward_train(img);
    EXPECT_EQ(out.reconstruction.sizes(), img.sizes());
    ASSERT_EQ(out.vq_loss.dim(), 0);
    EXPECT_TRUE(std::isfinite(out.vq_loss.item<double>()));
    ASSERT_EQ(out.usages.size(), 3u);
    for (double u : out.usages) EXPECT_TRUE(u >= 0.0 && u <= 100.0) << u;
    (out.reconstruction.square().mean() + out.vq_loss).backward();
    const StateDict params = module_state_dict(*m);
    // Reconstruction loss reaches the encoder only through the straight-through estimator;
    // the codebook and the Phis learn from the vq loss.
    for (const char* name : {"encoder.conv_in.weight", "quantize.embedding.weight",
                             "quantize.quant_resi.qresi_ls.0.weight", "decoder.conv_out.weight"}) {
        const at::Tensor g = params.at(name).grad();
        ASSERT_TRUE(g.defined()) << name;
        EXPECT_GT(g.abs().sum().item<double>(), 0.0) << name;
    }
    // Scale 0 of the first training step copies its hit counts: one token per image.
    EXPECT_EQ(params.at("quantize.ema_vocab_hit_SV")[0].sum().item<double>(), 2.0);
}

TEST(VqvaeParity, SelfReferenceHasNoError) {
    at::manual_seed(8);
    Vqvae m(small_config());
    at::NoGradGuard no_grad;
    StateDict ref;
    ref["inp"] = at::rand({1, 3, 8, 8}) * 2 - 1;
    ref["f"] = m->encode(ref["inp"]);
    const auto idx = m->f_to_idx(ref["f"]);
    const auto fhats = m->f_to_fhats(ref["f"]);
    for (size_t si = 0; si < idx.size(); ++si) {
        ref["idx." + std::to_string(si)] = idx[si];
        ref["fhat." + std::to_string(si)] = fhats[si];
    }
    ref["rec"] = m->decode(fhats.back());
    ref["var_input"] = m->idx_to_var_input(idx);
    const VqvaeParityReport report = vqvae_parity(m, ref);
    EXPECT_EQ(report.entries.size(), 1u + 3u + 3u + 2u);
    EXPECT_EQ(report.worst_rel_err(), 0.0) << report.summary();
    EXPECT_EQ(report.index_mismatches(), 0);

    ref["idx.1"] = (idx[1] + 1) % 64;  // a wrong token map is counted, not hidden
    EXPECT_EQ(vqvae_parity(m, ref).index_mismatches(), 4);
    ref.erase("idx.2");
    EXPECT_THROW(vqvae_parity(m, ref), CheckpointError);
}
