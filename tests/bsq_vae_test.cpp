// Infinity's BSQ VAE: official names and config inference, parity with the official code on the
// tiny fixture (tests/fixtures/bsq_tiny, tools/parity/bsq_vae_parity.py --make-fixture: encode ->
// identical bit labels, decode within 1e-4), loading in both namings, and bad checkpoints.
// Tensor counts of the real architectures were read from the official AutoEncoder built with
// tools/run_infinity.py's arguments.
#include "core/models/bsq_vae.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "core/io/checkpoint.h"
#include "core/io/module_binding.h"
#include "tests/test_util.h"
#include "tests/tiny_bsq_vae.h"

using namespace varscope;

namespace {

std::string fixture(const std::string& name) {
    return varscope::testing::source_dir() + "/tests/fixtures/bsq_tiny/" + name;
}

const at::Tensor& get(const StateDict& d, const std::string& name) {
    auto it = d.find(name);
    if (it == d.end()) throw std::runtime_error("expected file has no tensor " + name);
    return it->second;
}

std::vector<bsq::Size3> schedule_of(const StateDict& e) {
    const at::Tensor s = get(e, "schedule");
    std::vector<bsq::Size3> out;
    for (int64_t i = 0; i < s.size(0); ++i)
        out.push_back({s[i][0].item<int64_t>(), s[i][1].item<int64_t>(), s[i][2].item<int64_t>()});
    return out;
}

double rel(const at::Tensor& ours, const at::Tensor& theirs) {
    return (ours.to(at::kCPU) - theirs).abs().max().item<double>() /
           std::max(theirs.abs().max().item<double>(), 1e-30);
}

BsqVaeConfig tiny_config() {
    return varscope::testing::tiny_bsq_vae_config(6);
}

int64_t total_numel(const StateDict& d) {
    int64_t n = 0;
    for (const auto& kv : d) n += kv.second.numel();
    return n;
}

struct Measured {
    double h = 0, f_hat = 0, var_input = 0, decode = 0, decode_raw = 0, decode_bits = 0;
    int64_t bits_total = 0, bits_differing = 0;
};

// Runs encode and decode on the expected file's inputs and compares with the official outputs.
Measured compare(BsqVae& vae, const StateDict& e) {
    c10::InferenceMode guard;
    Measured m;
    const auto schedule = schedule_of(e);
    const BsqEncodeOutput enc = vae->encode(get(e, "image"), schedule);
    m.h = rel(enc.h, get(e, "enc_h"));
    m.f_hat = rel(enc.codes.f_hat, get(e, "enc_z"));
    for (size_t si = 0; si < schedule.size(); ++si) {
        const at::Tensor ref = get(e, "enc_bits." + std::to_string(si));
        // Official bit_indices are (B,t,h,w,d); ours too.
        EXPECT_EQ(enc.codes.bits[si].sizes(), ref.sizes()) << "scale " << si;
        m.bits_total += ref.numel();
        m.bits_differing += enc.codes.bits[si].to(at::kCPU).ne(ref).sum().item<int64_t>();
        if (si + 1 < schedule.size())
            m.var_input = std::max(m.var_input, rel(enc.codes.var_inputs[si],
                                                    get(e, "enc_var_input." + std::to_string(si))));
    }
    // Decode the official f_hat, so that the decoder is measured on its own.
    m.decode = rel(vae->decode(get(e, "enc_z")), get(e, "decode_z"));
    m.decode_raw = rel(vae->decode_unclamped(get(e, "enc_z")), get(e, "decoder_raw_z"));
    std::vector<at::Tensor> bits;
    for (size_t si = 0; si < schedule.size(); ++si)
        bits.push_back(get(e, "enc_bits." + std::to_string(si)));
    m.decode_bits = rel(vae->decode_bits(bits, schedule), get(e, "decode_bits"));
    return m;
}

void print(const char* what, const Measured& m) {
    std::cout << what << ": rel err h " << m.h << ", f_hat " << m.f_hat << ", var_input "
              << m.var_input << ", decode " << m.decode << " (unclamped " << m.decode_raw
              << "), decode from bits " << m.decode_bits << "; bits differing " << m.bits_differing
              << " of " << m.bits_total << "\n";
}

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST(BsqVaeNames, TinyModelHasTheOfficialTensors) {
    BsqVae vae(tiny_config());
    const StateDict ours = module_state_dict(*vae);
    StateDict official = select_prefix(load_checkpoint(fixture("vae.pth")), "vae");
    ASSERT_FALSE(official.empty());
    // The quantizer's index buffer (registered twice: quantizer / quantize) is all the official
    // state dict has beyond ours; inference does not use it.
    EXPECT_EQ(official.erase("quantizer.lfq.mask") + official.erase("quantize.lfq.mask"), 2u);
    ASSERT_EQ(ours.size(), official.size());
    for (const auto& kv : official) {
        auto it = ours.find(kv.first);
        ASSERT_NE(it, ours.end()) << kv.first;
        EXPECT_EQ(it->second.sizes(), kv.second.sizes()) << kv.first;
    }
}

TEST(BsqVaeNames, RealArchitecturesMatchOfficialCounts) {
    // Official AutoEncoder(args of vae_model(...)) state dicts without the two lfq.mask buffers.
    const StateDict d32 = module_state_dict(*BsqVae(BsqVaeConfig::d32reg()));
    EXPECT_EQ(d32.size(), 268u);
    EXPECT_EQ(total_numel(d32), 110118051);
    const StateDict d14 = module_state_dict(*BsqVae(BsqVaeConfig::d56_f8_14_patchify()));
    EXPECT_EQ(d14.size(), 224u);
    EXPECT_EQ(total_numel(d14), 81624209);
    EXPECT_EQ(d32.at("encoder.down.0.downsample.conv.conv.weight").sizes(),
              (at::IntArrayRef{128, 128, 3, 3}));
    EXPECT_EQ(d32.count("encoder.down.4.downsample.conv.conv.weight"), 0u);  // 4 downs: /16
    EXPECT_EQ(d32.count("decoder.up.0.upsample.conv.conv.weight"), 0u);
    EXPECT_EQ(d32.count("decoder.up.4.upsample.conv.conv.weight"), 1u);
}

TEST(BsqVaeConfig, InferredFromCheckpointShapes) {
    const StateDict sd = bsq_vae_state_dict(load_checkpoint(fixture("vae.pth")), "vae.pth");
    const BsqVaeConfig c = BsqVaeConfig::infer_from(sd, "vae.pth");
    EXPECT_EQ(c, tiny_config());
    EXPECT_NE(c.describe().find("d6"), std::string::npos) << c.describe();
    const BsqVaeConfig d32 =
        BsqVaeConfig::infer_from(module_state_dict(*BsqVae(BsqVaeConfig::d32reg())));
    EXPECT_EQ(d32, BsqVaeConfig::d32reg());
    EXPECT_NE(d32.describe().find("d32 (Infinity-2B infinity_vae_d32reg)"), std::string::npos)
        << d32.describe();
    const BsqVaeConfig d14 =
        BsqVaeConfig::infer_from(module_state_dict(*BsqVae(BsqVaeConfig::d56_f8_14_patchify())));
    EXPECT_EQ(d14, BsqVaeConfig::d56_f8_14_patchify());
    EXPECT_NE(d14.describe().find("d14 (Infinity-8B"), std::string::npos) << d14.describe();
}

TEST(BsqVaeConfig, GroupNormRuleAndValidation) {
    EXPECT_EQ(bsq_norm_groups(128), 32);
    EXPECT_EQ(bsq_norm_groups(48), 24);
    EXPECT_THROW(bsq_norm_groups(40), std::invalid_argument);
    BsqVaeConfig c = tiny_config();
    c.patch_size = 8;  // would need 4 levels
    EXPECT_THROW(c.validate(), std::invalid_argument);
    c = tiny_config();
    c.base_ch = 20;
    EXPECT_THROW(c.validate(), std::invalid_argument);
}

TEST(BsqVaeParity, TinyFixtureMatchesOfficial) {
    BsqVae vae = load_bsq_vae(fixture("vae.pth"));
    const StateDict e = load_checkpoint(fixture("expected.pth"));
    const Measured m = compare(vae, e);
    print("bsq_tiny (CPU fp32)", m);
    EXPECT_EQ(m.bits_differing, 0);
    EXPECT_GT(m.bits_total, 0);
    EXPECT_LE(m.h, 1e-5);
    EXPECT_LE(m.f_hat, 1e-5);
    EXPECT_LE(m.var_input, 1e-5);
    EXPECT_LE(m.decode, 1e-4);
    EXPECT_LE(m.decode_raw, 1e-4);
    EXPECT_LE(m.decode_bits, 1e-4);
}

TEST(BsqVaeParity, SummedCodesOfBitsAreTheSamplersOnes) {
    BsqVae vae = load_bsq_vae(fixture("vae.pth"));
    const StateDict e = load_checkpoint(fixture("expected.pth"));
    const auto schedule = schedule_of(e);
    std::vector<at::Tensor> bits;
    for (size_t si = 0; si < schedule.size(); ++si)
        bits.push_back(get(e, "enc_bits." + std::to_string(si)));
    EXPECT_LE(
        (vae->summed_codes(bits, schedule) - get(e, "sampler_summed")).abs().max().item<double>(),
        1e-6);
}

// The official load_cnn also accepts flux-style names without the Conv/Normalize wrapper level.
TEST(BsqVaeLoad, FluxStyleNamesAndSafetensorsGiveTheSameModel) {
    const StateDict official = bsq_vae_state_dict(load_checkpoint(fixture("vae.pth")), "vae.pth");
    StateDict flux;
    for (const auto& kv : official) flux[bsq_flux_name(kv.first)] = kv.second;
    EXPECT_EQ(flux.count("encoder.conv_in.weight"), 1u);
    EXPECT_EQ(flux.count("encoder.down.0.downsample.conv.weight"), 1u);
    EXPECT_EQ(flux.count("decoder.norm_out.bias"), 1u);
    varscope::testing::TempDir dir;
    save_safetensors(flux, dir.file("flux.safetensors"));
    BsqVae a = load_bsq_vae(fixture("vae.pth"));
    BsqVae b = load_bsq_vae(dir.file("flux.safetensors"));
    const StateDict sa = module_state_dict(*a), sb = module_state_dict(*b);
    ASSERT_EQ(sa.size(), sb.size());
    for (const auto& kv : sa) EXPECT_TRUE(at::equal(kv.second, sb.at(kv.first))) << kv.first;
}

TEST(BsqVaeLoad, BadCheckpointsNameFileAndTensor) {
    const StateDict good = bsq_vae_state_dict(load_checkpoint(fixture("vae.pth")), "vae.pth");
    varscope::testing::TempDir dir;

    StateDict missing = good;
    missing.erase("decoder.up.1.block.1.conv2.conv.weight");
    save_safetensors(missing, dir.file("missing.safetensors"));
    std::string err = error_of([&] { load_bsq_vae(dir.file("missing.safetensors")); });
    EXPECT_NE(err.find("missing.safetensors"), std::string::npos) << err;
    EXPECT_NE(err.find("missing tensor 'decoder.up.1.block.1.conv2.conv.weight'"),
              std::string::npos)
        << err;

    StateDict shape = good;
    shape["encoder.mid.block_1.norm2.norm.bias"] = at::zeros({7});
    save_safetensors(shape, dir.file("shape.safetensors"));
    err = error_of([&] { load_bsq_vae(dir.file("shape.safetensors")); });
    EXPECT_NE(err.find("shape.safetensors"), std::string::npos) << err;
    EXPECT_NE(err.find("'encoder.mid.block_1.norm2.norm.bias' has shape [7]"), std::string::npos)
        << err;

    StateDict extra = good;
    extra["decoder.up.0.block.9.conv1.conv.weight"] = at::zeros({1});
    save_safetensors(extra, dir.file("extra.safetensors"));
    err = error_of([&] { load_bsq_vae(dir.file("extra.safetensors")); });
    EXPECT_NE(err.find("unexpected tensor 'decoder.up.0.block.9.conv1.conv.weight'"),
              std::string::npos)
        << err;

    StateDict no_conf = good;  // needed for inference of the architecture
    no_conf.erase("encoder.conv_out.conv.weight");
    save_safetensors(no_conf, dir.file("noconf.safetensors"));
    err = error_of([&] { load_bsq_vae(dir.file("noconf.safetensors")); });
    EXPECT_NE(err.find("noconf.safetensors"), std::string::npos) << err;
    EXPECT_NE(err.find("encoder.conv_out.conv.weight"), std::string::npos) << err;

    // A truncated torch.save file.
    {
        std::ifstream in(fixture("vae.pth"), std::ios::binary);
        std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        std::ofstream(dir.file("cut.pth"), std::ios::binary) << bytes.substr(0, bytes.size() / 2);
    }
    err = error_of([&] { load_bsq_vae(dir.file("cut.pth")); });
    std::cout << "truncated: " << err << "\n";
    EXPECT_NE(err.find("cut.pth"), std::string::npos) << err;

    StateDict other;
    other["model.weight"] = at::zeros({2});
    save_safetensors(other, dir.file("other.safetensors"));
    err = error_of([&] { load_bsq_vae(dir.file("other.safetensors")); });
    EXPECT_NE(err.find("not a BSQ VAE checkpoint"), std::string::npos) << err;
}

TEST(BsqVaeRandom, SeededAndDecodesPerImage) {
    BsqVae a = BsqVae(BsqVaeImpl::random(tiny_config(), 7));
    BsqVae b = BsqVae(BsqVaeImpl::random(tiny_config(), 7));
    BsqVae c = BsqVae(BsqVaeImpl::random(tiny_config(), 8));
    const auto w = "decoder.up.1.block.0.conv1.conv.weight";
    EXPECT_TRUE(at::equal(module_state_dict(*a).at(w), module_state_dict(*b).at(w)));
    EXPECT_FALSE(at::equal(module_state_dict(*a).at(w), module_state_dict(*c).at(w)));
    c10::InferenceMode g;
    at::manual_seed(3);  // fixed latents: the tolerance below is for these, not any draw
    const at::Tensor z = at::randn({3, 6, 2, 3});
    const at::Tensor img = a->decode_01(z);
    EXPECT_EQ(img.sizes(), (at::IntArrayRef{3, 3, 8, 12}));
    EXPECT_GE(img.min().item<double>(), 0.0);
    EXPECT_LE(img.max().item<double>(), 1.0);
    // Batch chunking: the second image alone decodes to the same pixels, up to float rounding
    // (the CPU convolutions may split a batch of 1 and of 3 differently across threads: under a
    // loaded ctest -j2 a difference above 1e-6 was seen once).
    EXPECT_TRUE(at::allclose(a->decode_01(z.narrow(0, 1, 1)), img.narrow(0, 1, 1), 1e-5, 1e-5));
}

// The real d32reg shape with random weights: tools/parity/bsq_vae_parity.py --check DIR writes
// the official outputs (run on the GPU machine); this test compares on the CPU. Skipped unless
// VARSCOPE_BSQ_PARITY_DIR names that directory.
TEST(BsqVaeParity, CheckDirectoryMatchesOfficial) {
    const char* env = std::getenv("VARSCOPE_BSQ_PARITY_DIR");
    if (!env)
        GTEST_SKIP() << "VARSCOPE_BSQ_PARITY_DIR not set (tools/parity/bsq_vae_parity.py --check)";
    const std::string dir = env;
    BsqVae vae = load_bsq_vae(dir + "/vae.pth");
    std::cout << vae->describe() << "\n";
    const StateDict e = load_checkpoint(dir + "/expected.pth");
    const Measured m = compare(vae, e);
    print("--check (CPU fp32 vs official)", m);
    // Teacher forcing as the official trainer (bsq::teacher_forcing), with patchify for d14.
    const std::string tag = vae->config().patch_size == 8 ? "tfp" : "tf";
    if (e.count(tag + "_x")) {
        bsq::BsqQuantConfig q = vae->quant_config();
        q.spatial_patchify = tag == "tfp";
        const at::Tensor s = get(e, tag + "_schedule");
        std::vector<bsq::Size3> sched;
        for (int64_t i = 0; i < s.size(0); ++i)
            sched.push_back(
                {s[i][0].item<int64_t>(), s[i][1].item<int64_t>(), s[i][2].item<int64_t>()});
        const bsq::TeacherForcing tf = bsq::teacher_forcing(get(e, "enc_h"), sched, q);
        int64_t differing = 0, total = 0;
        for (size_t si = 0; si < sched.size(); ++si) {
            const at::Tensor ref = get(e, tag + "_gt." + std::to_string(si));
            total += ref.numel();
            differing += bsq::token_labels(tf.bits[si], q).ne(ref).sum().item<int64_t>();
        }
        std::vector<at::Tensor> tokens;
        for (const at::Tensor& x : tf.next_inputs) tokens.push_back(bsq::token_inputs(x, q));
        const double x_err = rel(at::cat(tokens, 1), get(e, tag + "_x"));
        std::cout << "teacher forcing (" << tag << "): labels differing " << differing << " of "
                  << total << ", inputs rel err " << x_err << "\n";
        EXPECT_LE(differing * 10000, total);
        EXPECT_LE(x_err, 1e-4);
    }
    // Other device / conv algorithms than the reference: a label may flip where a residual is
    // within rounding of zero, so allow one in 10^4.
    EXPECT_LE(m.bits_differing * 10000, m.bits_total);
    EXPECT_LE(m.decode, 1e-4);
    EXPECT_LE(m.decode_raw, 1e-4);
    EXPECT_LE(m.h, 1e-4);
}
