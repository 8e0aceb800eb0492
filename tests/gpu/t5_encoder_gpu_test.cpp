// The T5 encoder on CUDA: the tiny fixture against HF (fp32, bf16, fp16 with fp32 `wo`), moving
// the weights off the GPU and back (Infinity's low-memory mode), and flan-t5-xl's shape from
// `tools/parity/t5_parity.py --check DIR` (VARSCOPE_T5_PARITY_DIR=DIR). Skips without CUDA.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>

#include "core/io/checkpoint.h"
#include "core/models/t5_encoder.h"
#include "tests/t5_check_weights.h"
#include "tests/test_util.h"
#include "tests/tiny_models.h"

using namespace varscope;

#define REQUIRE_CUDA() \
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device"

namespace {

double rel_error(const at::Tensor& a, const at::Tensor& b) {
    const at::Tensor x = a.to(at::kCPU).to(at::kDouble), y = b.to(at::kCPU).to(at::kDouble);
    return (x - y).abs().max().item<double>() / y.abs().max().item<double>();
}

T5Encoder load_on_cuda(const std::string& folder, at::ScalarType dt) {
    std::string what;
    const StateDict t = load_t5_encoder_tensors(folder, &what);
    T5EncoderOptions o;
    o.dtype = dt;
    T5Encoder enc(load_t5_encoder_config(folder + "/config.json"), o);
    enc.load(t, what);
    enc.to(c10::Device(c10::kCUDA, 0));
    return enc;
}

}  // namespace

// Half precision on CUDA rounds elsewhere than HF on the CPU: ours may be off HF's fp32 output
// by at most twice as much as HF's own half-precision run is (plus 1e-3).
TEST(T5EncoderGpu, TinyFixtureMatchesHuggingFace) {
    REQUIRE_CUDA();
    const std::string dir = varscope::testing::source_dir() + "/tests/fixtures/t5_tiny";
    const StateDict e = load_safetensors(dir + "/expected.safetensors");
    for (auto [dt, name] : {std::pair{at::kFloat, "fp32"}, std::pair{at::kBFloat16, "bf16"},
                            std::pair{at::kHalf, "fp16"}}) {
        T5Encoder enc = load_on_cuda(dir + "/model", dt);
        const at::Tensor out =
            enc.forward(e.at("longest.input_ids"), e.at("longest.attention_mask"));
        EXPECT_TRUE(out.is_cuda());
        const at::Tensor& fp32 = e.at("longest.hidden.fp32");
        const double err = rel_error(out, fp32);
        const double hf_err = rel_error(e.at(std::string("longest.hidden.") + name), fp32);
        std::cout << "[t5 gpu] " << name << " rel. error vs HF fp32 " << err << " (HF's " << name
                  << ": " << hf_err << ")\n";
        EXPECT_LE(err, dt == at::kFloat ? 1e-5 : 2 * hf_err + 1e-3) << name;
        enc.to(c10::kCPU);  // low-memory mode: off the GPU and back gives the same output
        EXPECT_TRUE(enc.device().is_cpu());
        enc.to(c10::Device(c10::kCUDA, 0));
        EXPECT_TRUE(
            at::equal(out, enc.forward(e.at("longest.input_ids"), e.at("longest.attention_mask"))));
    }
}

TEST(T5EncoderGpu, FlanT5XlShape) {
    REQUIRE_CUDA();
    const char* env = std::getenv("VARSCOPE_T5_PARITY_DIR");
    if (!env) GTEST_SKIP() << "VARSCOPE_T5_PARITY_DIR not set (tools/parity/t5_parity.py --check)";
    const std::string dir = env;
    const std::string expected = dir + "/expected.safetensors";
    const StateDict e = load_safetensors(expected);
    const uint64_t seed = std::stoull(read_safetensors_metadata(expected).at("seed"));
    const T5EncoderConfig config = load_t5_encoder_config(dir + "/config.json");
    const StateDict w = varscope::testing::t5_check_weights(config, seed);
    for (auto [dt, name] : {std::pair{at::kFloat, "fp32"}, std::pair{at::kHalf, "fp16"}}) {
        const std::string key = std::string("hidden.") + name;
        if (!e.count(key)) continue;
        T5EncoderOptions o;
        o.dtype = dt;
        T5Encoder enc(config, o);
        enc.load(w, "check weights");
        enc.to(c10::Device(c10::kCUDA, 0));
        const at::Tensor out = enc.forward(e.at("input_ids"), e.at("attention_mask"));
        const double err = rel_error(out, e.at("hidden.fp32"));
        const double hf_err = rel_error(e.at(key), e.at("hidden.fp32"));
        std::cout << "[t5 gpu] flan-t5-xl shape " << name << " rel. error vs HF fp32 " << err
                  << " (HF's " << name << ": " << hf_err << "), vs HF " << name << " "
                  << rel_error(out, e.at(key)) << "\n";
        // fp32: CUDA vs CPU sums over 24 layers; fp16: no worse than twice HF's own fp16.
        EXPECT_LE(err, dt == at::kFloat ? 1e-4 : 2 * hf_err + 1e-3) << name;
    }
}
