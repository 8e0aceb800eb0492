// The T5 encoder against Hugging Face's T5EncoderModel (outputs written by
// tools/parity/t5_parity.py --make-fixture tests/fixtures/t5_tiny), its folder loader and its
// errors, and the flan-t5-xl-shaped check of `t5_parity.py --check DIR`.
#include "core/models/t5_encoder.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/io/checkpoint.h"
#include "core/io/json_read.h"
#include "core/io/quant_int8.h"
#include "core/models/t5_text_encoder.h"
#include "tests/error_of.h"
#include "tests/t5_check_weights.h"
#include "tests/test_util.h"

namespace {

namespace fs = std::filesystem;
using namespace varscope;
using varscope::testing::error_of;
using varscope::testing::TempDir;

std::string fixture(const std::string& name) {
    return varscope::testing::source_dir() + "/tests/fixtures/t5_tiny/" + name;
}

const StateDict& expected() {
    static const StateDict e = load_safetensors(fixture("expected.safetensors"));
    return e;
}
const at::Tensor& want(const std::string& name) {
    return expected().at(name);
}

// max |a - b| / max |b| over the whole tensor.
double rel_error(const at::Tensor& a, const at::Tensor& b) {
    const at::Tensor x = a.to(at::kCPU).to(at::kDouble), y = b.to(at::kCPU).to(at::kDouble);
    EXPECT_EQ(x.sizes(), y.sizes());
    return (x - y).abs().max().item<double>() / y.abs().max().item<double>();
}

T5Encoder load_encoder(const std::string& folder, T5EncoderOptions o = {}) {
    std::string what;
    const StateDict t = load_t5_encoder_tensors(folder, &what);
    T5Encoder enc(load_t5_encoder_config(folder + "/config.json"), o);
    enc.load(t, what);
    return enc;
}

T5EncoderOptions with_dtype(at::ScalarType dt) {
    T5EncoderOptions o;
    o.dtype = dt;
    return o;
}

TEST(T5Encoder, ConfigFromHuggingFaceJson) {
    const T5EncoderConfig c = load_t5_encoder_config(fixture("model/config.json"));
    EXPECT_EQ(c.vocab_size, 412);
    EXPECT_EQ(c.d_model, 32);
    EXPECT_EQ(c.d_kv, 8);
    EXPECT_EQ(c.d_ff, 64);
    EXPECT_EQ(c.num_layers, 2);
    EXPECT_EQ(c.num_heads, 4);
    EXPECT_EQ(c.relative_attention_num_buckets, 8);
    EXPECT_EQ(c.relative_attention_max_distance, 20);
    EXPECT_TRUE(c.gated);
    EXPECT_EQ(c.activation, "gelu_new");
    const T5EncoderConfig r = load_t5_encoder_config(fixture("model_relu/config.json"));
    EXPECT_FALSE(r.gated);
    EXPECT_EQ(r.activation, "relu");
    EXPECT_EQ(r.num_layers, 1);
}

TEST(T5Encoder, RelativePositionBucketsMatchHuggingFace) {
    const at::Tensor rel = want("bucket.relative_position");
    for (auto [nb, md] : {std::pair<int64_t, int64_t>{32, 128}, {8, 20}}) {
        const at::Tensor got = T5Encoder::relative_position_bucket(rel, nb, md);
        const std::string key = "bucket." + std::to_string(nb) + "_" + std::to_string(md);
        EXPECT_TRUE(at::equal(got, want(key))) << key;
    }
}

// fp32: padded to the longest prompt, padded to a fixed 24 (Infinity pads to 512), no mask.
TEST(T5Encoder, Fp32MatchesHuggingFace) {
    const T5Encoder enc = load_encoder(fixture("model"));
    for (const std::string tag : {"longest", "max24"}) {
        const at::Tensor out = enc.forward(want(tag + ".input_ids"), want(tag + ".attention_mask"));
        EXPECT_EQ(out.scalar_type(), at::kFloat);
        const double e = rel_error(out, want(tag + ".hidden.fp32"));
        EXPECT_LE(e, 1e-5) << tag;
        std::cout << "[t5] fp32 " << tag << " rel. error " << e << "\n";
        // Infinity's compact form, from our output.
        const TextCondition c = compact_text_features(out, want(tag + ".attention_mask"));
        EXPECT_LE(rel_error(c.kv_compact, want(tag + ".kv_compact")), 1e-5);
        EXPECT_EQ(c.lens, std::vector<int64_t>(want(tag + ".lens").data_ptr<int64_t>(),
                                               want(tag + ".lens").data_ptr<int64_t>() + 3));
        EXPECT_TRUE(at::equal(c.cu_seqlens, want(tag + ".cu_seqlens"))) << c.cu_seqlens;
        EXPECT_EQ(c.cu_seqlens.scalar_type(), at::kInt);
        EXPECT_EQ(c.max_len, want(tag + ".lens").max().item<int64_t>());
    }
    EXPECT_LE(rel_error(enc.forward(want("nomask.input_ids")), want("nomask.hidden.fp32")), 1e-5);
    // The fixture's batches differ in length, so masking is exercised.
    EXPECT_LT(want("longest.attention_mask").sum().item<int64_t>(),
              want("longest.attention_mask").numel());
}

// T5 v1.0-style ReLU FFN, from a bf16 pytorch_model.bin (the pickle reader; converted to fp32).
TEST(T5Encoder, ReluFeedForwardFromBf16PytorchModelBin) {
    std::string what;
    (void)load_t5_encoder_tensors(fixture("model_relu"), &what);
    EXPECT_NE(what.find("pytorch_model.bin"), std::string::npos) << what;
    const T5Encoder enc = load_encoder(fixture("model_relu"));
    EXPECT_LE(rel_error(enc.forward(want("relu.input_ids"), want("relu.attention_mask")),
                        want("relu.hidden.fp32")),
              1e-5);
}

// Half precision: HF's own bf16 / fp16 runs are the reference; the bounds are relative to the
// output's largest magnitude (bf16 keeps 8 bits of mantissa: 2^-8 = 3.9e-3 per rounding).
TEST(T5Encoder, HalfPrecisionMatchesHuggingFace) {
    for (auto [dt, name, bound] :
         {std::tuple{at::kBFloat16, "bf16", 2e-2}, std::tuple{at::kHalf, "fp16", 5e-3}}) {
        const T5Encoder enc = load_encoder(fixture("model"), with_dtype(dt));
        for (const std::string tag : {"longest", "max24"}) {
            const at::Tensor out =
                enc.forward(want(tag + ".input_ids"), want(tag + ".attention_mask"));
            EXPECT_EQ(out.scalar_type(), dt);
            const double vs_hf = rel_error(out, want(tag + ".hidden." + name));
            const double vs_fp32 = rel_error(out, want(tag + ".hidden.fp32"));
            std::cout << "[t5] " << name << " " << tag << " rel. error vs HF " << name << " "
                      << vs_hf << ", vs HF fp32 " << vs_fp32 << "\n";
            EXPECT_LE(vs_hf, bound) << name << " " << tag;
            EXPECT_LE(vs_fp32, 10 * bound) << name << " " << tag;
        }
    }
    // HF's fp16 load keeps `wo` in fp32; so do we.
    const T5Encoder half = load_encoder(fixture("model"), with_dtype(at::kHalf));
    const StateDict sd = half.state_dict();
    EXPECT_EQ(sd.at("block.0.layer.1.DenseReluDense.wo.weight").scalar_type(), at::kFloat);
    EXPECT_EQ(sd.at("block.0.layer.1.DenseReluDense.wi_0.weight").scalar_type(), at::kHalf);
}

// The full T5's decoder is skipped when reading, and an int8 file still dequantises.
TEST(T5Encoder, SelectedSafetensorsReadsOnlyWhatIsKept) {
    auto enc_only = [](const std::string& n) { return n.rfind("encoder.", 0) == 0; };
    const StateDict all = load_safetensors(fixture("model/model.safetensors"));
    const StateDict some = load_safetensors_selected(fixture("model/model.safetensors"), enc_only);
    size_t encoder = 0;
    for (const auto& [name, t] : all)
        if (enc_only(name)) {
            ++encoder;
            ASSERT_TRUE(some.count(name)) << name;
            EXPECT_TRUE(at::equal(t, some.at(name))) << name;
        }
    EXPECT_EQ(some.size(), encoder);
    EXPECT_LT(encoder, all.size());  // the fixture has decoder tensors to skip

    TempDir dir;
    const std::string q = dir.file("q.safetensors");
    std::string meta;
    StateDict small = {{"encoder.w", at::randn({4, 8})}, {"decoder.w", at::randn({4, 8})}};
    const StateDict file = quantize_state_dict_int8(
        small, [](const std::string&, const at::Tensor&) { return true; }, at::kFloat, meta);
    save_safetensors(file, q, {{kQuantMetadataKey, meta}});  // after `meta` is filled
    const StateDict dq = load_safetensors_selected(q, enc_only);
    ASSERT_EQ(dq.size(), 1u);
    EXPECT_TRUE(at::allclose(dq.at("encoder.w"), load_safetensors(q).at("encoder.w")));
}

TEST(T5Encoder, ShardedFolderLoadsTheSame) {
    std::string what_single, what_sharded;
    const StateDict a = load_t5_encoder_tensors(fixture("model"), &what_single);
    const StateDict b = load_t5_encoder_tensors(fixture("model_sharded"), &what_sharded);
    EXPECT_NE(what_sharded.find("model.safetensors.index.json"), std::string::npos);
    ASSERT_EQ(a.size(), b.size());
    for (const auto& [name, t] : a) {
        ASSERT_TRUE(b.count(name)) << name;
        EXPECT_TRUE(at::equal(t, b.at(name))) << name;
        EXPECT_EQ(name.find("decoder"), std::string::npos) << name;
    }
    EXPECT_TRUE(a.count("embed_tokens.weight"));
    const T5Encoder enc = load_encoder(fixture("model_sharded"));
    EXPECT_LE(rel_error(enc.forward(want("longest.input_ids"), want("longest.attention_mask")),
                        want("longest.hidden.fp32")),
              1e-5);
}

// Prompts in, Infinity's compact condition out; padding to 512 gives the same rows.
TEST(T5Encoder, TextEncoderFromPrompts) {
    if (!SentencePieceTokenizer::available()) GTEST_SKIP() << "built without SentencePiece";
    const auto texts = nlohmann::json::parse(
                           read_safetensors_metadata(fixture("expected.safetensors")).at("texts"))
                           .get<std::vector<std::string>>();
    for (Padding pad : {Padding::kLongest, Padding::kMaxLength}) {
        T5TextEncoderOptions o;
        o.tokenizer_path = fixture("spiece.model");
        o.padding = pad;
        o.offload_after_encode = true;  // a no-op on the CPU, but must not break anything
        T5TextEncoder te(fixture("model"), o);
        const TextCondition c = te.encode(texts);
        EXPECT_LE(rel_error(c.kv_compact, want("longest.kv_compact")), 1e-5);
        EXPECT_TRUE(at::equal(c.cu_seqlens, want("longest.cu_seqlens")));
        EXPECT_EQ(c.truncated, std::vector<bool>(3, false));
        EXPECT_FALSE(te.offloaded());
    }
    T5TextEncoderOptions o;
    o.tokenizer_path = fixture("spiece.model");
    o.tokenizer.max_length = 4;  // cuts the second and third prompts (18 and 4 pieces)
    T5TextEncoder te(fixture("model"), o);
    const TextCondition c = te.encode(texts);
    EXPECT_EQ(c.lens, (std::vector<int64_t>{3, 4, 4}));
    EXPECT_EQ(c.truncated, (std::vector<bool>{false, true, true}));
}

TEST(T5Encoder, RejectsBadInputs) {
    const T5Encoder enc = load_encoder(fixture("model"));
    auto ids = want("longest.input_ids").clone();
    ids[0][0] = 412;
    std::string e = error_of<std::invalid_argument>([&] { enc.forward(ids); });
    EXPECT_NE(e.find("412"), std::string::npos) << e;
    e = error_of<std::invalid_argument>([&] { enc.forward(ids.to(at::kInt)); });
    EXPECT_NE(e.find("int64"), std::string::npos) << e;
}

// A copy of a fixture folder to break.
fs::path copy_folder(const TempDir& dir, const std::string& name) {
    const fs::path to = dir.path() / name;
    fs::copy(fixture(name), to, fs::copy_options::recursive);
    fs::copy_file(fixture("spiece.model"), to / "spiece.model");
    return to;
}

// The whole folder through T5TextEncoder; without SentencePiece (its loads throw) the encoder's
// files alone.
std::string load_error(const fs::path& folder) {
    if (!SentencePieceTokenizer::available())
        return error_of([&] { load_encoder(folder.string()); }, "(no error)");
    return error_of([&] { T5TextEncoder te(folder.string()); }, "(no error)");
}

void edit_config(const fs::path& folder, const std::string& key, const nlohmann::json& value) {
    auto j = read_json_file((folder / "config.json").string(), "config");
    if (value.is_null())
        j.erase(key);
    else
        j[key] = value;
    std::ofstream((folder / "config.json").string()) << j.dump(2);
}

TEST(T5Encoder, BadFoldersNameTheFile) {
    TempDir dir;
    {  // the folder as it is loads (so the failures below are the edits')
        const fs::path f = copy_folder(dir, "model");
        EXPECT_EQ(load_error(f), "(no error)");
    }
    {
        const fs::path f = copy_folder(dir, "model_sharded");
        fs::remove(f / "config.json");
        const std::string e = load_error(f);
        EXPECT_NE(e.find((f / "config.json").string()), std::string::npos) << e;
    }
    {
        const fs::path f = dir.path() / "missing_shard";
        fs::copy(fixture("model_sharded"), f);
        fs::copy_file(fixture("spiece.model"), f / "spiece.model");
        fs::remove(f / "model-00003-of-00004.safetensors");
        const std::string e = load_error(f);
        EXPECT_NE(e.find("model-00003-of-00004.safetensors"), std::string::npos) << e;
    }
    {  // a mis-shaped tensor: the config says d_ff 48, the file has 64
        const fs::path f = dir.path() / "wrong_shape";
        fs::copy(fixture("model"), f);
        fs::copy_file(fixture("spiece.model"), f / "spiece.model");
        edit_config(f, "d_ff", 48);
        const std::string e = load_error(f);
        EXPECT_NE(e.find((f / "model.safetensors").string()), std::string::npos) << e;
        EXPECT_NE(e.find("block.0.layer.1.DenseReluDense.wi_0.weight"), std::string::npos) << e;
    }
    {  // a missing tensor
        const fs::path f = dir.path() / "missing_tensor";
        fs::create_directories(f);
        fs::copy_file(fixture("model/config.json"), f / "config.json");
        fs::copy_file(fixture("spiece.model"), f / "spiece.model");
        StateDict all = load_safetensors(fixture("model/model.safetensors"));
        all.erase("encoder.block.1.layer.0.SelfAttention.k.weight");
        save_safetensors(all, (f / "model.safetensors").string());
        const std::string e = load_error(f);
        EXPECT_NE(e.find((f / "model.safetensors").string()), std::string::npos) << e;
        EXPECT_NE(e.find("missing tensor 'block.1.layer.0.SelfAttention.k.weight'"),
                  std::string::npos)
            << e;
    }
    {  // no weights at all
        const fs::path f = dir.path() / "no_weights";
        fs::create_directories(f);
        fs::copy_file(fixture("model/config.json"), f / "config.json");
        fs::copy_file(fixture("spiece.model"), f / "spiece.model");
        const std::string e = load_error(f);
        EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
        EXPECT_NE(e.find(f.string()), std::string::npos) << e;
    }
    if (SentencePieceTokenizer::available()) {  // corrupt spiece.model
        const fs::path f = dir.path() / "bad_spiece";
        fs::copy(fixture("model"), f);
        std::ofstream((f / "spiece.model").string()) << "corrupt";
        const std::string e = load_error(f);
        EXPECT_NE(e.find((f / "spiece.model").string()), std::string::npos) << e;
    }
    // Bad config fields name the field and the file.
    const std::vector<std::tuple<std::string, nlohmann::json, std::string>> bad = {
        {"num_heads", "four", "num_heads"},
        {"d_model", -3, "d_model"},
        {"num_layers", nullptr, "num_layers"},
        {"feed_forward_proj", "gated-gelu-x", "feed_forward_proj"},
        {"dense_act_fn", "mish", "mish"},
        {"relative_attention_num_buckets", 2, "relative_attention_num_buckets"},
        {"relative_attention_max_distance", 1, "relative_attention_max_distance"},
        {"model_type", "umt5", "model_type"},
        {"layer_norm_epsilon", -1.0, "layer_norm_epsilon"},
    };
    int i = 0;
    for (const auto& [key, value, needle] : bad) {
        const fs::path f = dir.path() / ("bad_config_" + std::to_string(i++));
        fs::copy(fixture("model"), f);
        edit_config(f, key, value);
        const std::string e = error_of<std::invalid_argument>(
            [&] { load_t5_encoder_config((f / "config.json").string()); });
        EXPECT_NE(e.find(needle), std::string::npos) << key << ": " << e;
        EXPECT_NE(e.find((f / "config.json").string()), std::string::npos) << key << ": " << e;
    }
}

// flan-t5-xl's shape: `t5_parity.py --check DIR` writes DIR (config, ids, HF's output; the
// weights are regenerated from its seed), then VARSCOPE_T5_PARITY_DIR=DIR runs this, fp32 on the
// CPU (the GPU suite's T5EncoderGpu.FlanT5XlShape runs CUDA). With --save-model, DIR/model (HF's
// own folder) must load to the same weights.
TEST(T5EncoderParity, FlanT5XlShape) {
    const char* env = std::getenv("VARSCOPE_T5_PARITY_DIR");
    if (!env) GTEST_SKIP() << "VARSCOPE_T5_PARITY_DIR not set (tools/parity/t5_parity.py --check)";
    const std::string dir = env;
    const StateDict e = load_safetensors(dir + "/expected.safetensors");
    const uint64_t seed =
        std::stoull(read_safetensors_metadata(dir + "/expected.safetensors").at("seed"));
    const T5EncoderConfig config = load_t5_encoder_config(dir + "/config.json");
    EXPECT_EQ(config.d_model, 2048);
    T5Encoder enc(config);
    {
        const StateDict w = varscope::testing::t5_check_weights(config, seed);
        enc.load(w, "check weights");
        if (fs::exists(dir + "/model")) {
            const StateDict hf = load_t5_encoder_tensors(dir + "/model");
            ASSERT_EQ(hf.size(), w.size());
            for (const auto& [name, t] : w) EXPECT_TRUE(at::equal(t, hf.at(name))) << name;
        }
    }
    const at::Tensor out = enc.forward(e.at("input_ids"), e.at("attention_mask"));
    const double err = rel_error(out, e.at("hidden.fp32"));
    std::cout << "[t5] flan-t5-xl shape (" << config.num_layers << " layers) fp32 rel. error "
              << err << "\n";
    EXPECT_LE(err, 1e-4);  // 24 layers of 2048-wide sums: looser than the tiny model's 1e-5
}

}  // namespace
