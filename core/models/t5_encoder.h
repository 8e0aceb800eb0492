// The T5 v1.1 / flan-t5 text encoder that Infinity conditions on (the encoder stack only), in
// Hugging Face's layout and arithmetic: token embedding, pre-norm blocks of self-attention with
// a bucketed relative position bias (owned by block 0, shared by all) and no 1/sqrt(d) scaling,
// a gated-GELU (or ReLU) FFN, RMS layer norms (statistics in fp32), a final norm.
//
// Weights come from a Hugging Face folder: config.json and model.safetensors, a sharded
// model.safetensors.index.json, or pytorch_model.bin; decoder tensors of a full T5 are skipped.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/io/state_dict.h"
#include "core/text/prompt_vocabulary.h"  // FilteredPrompt

namespace torch::nn {
class Module;
}

namespace varscope {

struct T5EncoderConfig {
    int64_t vocab_size = 32128;
    int64_t d_model = 2048;
    int64_t d_kv = 64;
    int64_t d_ff = 5120;
    int64_t num_layers = 24;
    int64_t num_heads = 32;
    int64_t relative_attention_num_buckets = 32;
    int64_t relative_attention_max_distance = 128;
    double layer_norm_epsilon = 1e-6;
    bool gated = true;                    // wi_0, wi_1 (gated) or wi
    std::string activation = "gelu_new";  // gelu_new (tanh), gelu (erf), relu, silu

    // HF's config.json fields (unknown keys are HF's business and ignored). A missing, mistyped
    // or out-of-range field throws std::invalid_argument naming the field and `what`.
    static T5EncoderConfig from_json(const nlohmann::json& j, const std::string& what);
    // The config.json that from_json (and HF's T5Config) reads back.
    nlohmann::json to_json() const;
};

T5EncoderConfig load_t5_encoder_config(const std::string& config_json_path);

struct T5EncoderOptions {
    // kFloat, kBFloat16, or kHalf. kHalf follows from_pretrained(torch_dtype=float16), the way
    // Infinity runs flan-t5: HF keeps the FFN output projections (`wo`) in fp32, so the residual
    // stream turns fp32 after the first FFN; `keep_wo_fp32 = false` makes everything fp16.
    at::ScalarType dtype = at::kFloat;
    bool keep_wo_fp32 = true;
    c10::Device device = c10::kCPU;
};

class T5Encoder {
  public:
    T5Encoder(const T5EncoderConfig& config, const T5EncoderOptions& options = {});
    ~T5Encoder();
    T5Encoder(T5Encoder&&) noexcept;
    T5Encoder& operator=(T5Encoder&&) noexcept;

    // Binds a state dict in HF's names relative to the encoder ("embed_tokens.weight",
    // "block.0.layer.0.SelfAttention.q.weight", ..., "final_layer_norm.weight"); throws
    // CheckpointError naming `what` and each missing / unexpected / mis-shaped tensor.
    void load(const StateDict& encoder_tensors, const std::string& what);

    // last_hidden_state (B, L, d_model) for input_ids (B, L) int64 and an optional attention
    // mask (B, L) (1 = token, 0 = padding; undefined = all tokens). The output dtype is the
    // final norm's (options.dtype). Ids outside [0, vocab_size) throw std::invalid_argument.
    at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& attention_mask = {}) const;

    // Training (Infinity's jointly trained tiny T5, core/training/infinity_trainer.*).
    // The same computation as forward() with autograd recorded (forward() runs without it).
    at::Tensor forward_train(const at::Tensor& input_ids,
                             const at::Tensor& attention_mask = {}) const;
    // Random weights as HF's T5PreTrainedModel._init_weights (initializer_factor 1), seeded.
    void init_weights(uint64_t seed);
    // The weights as one module (HF's encoder names) for optimizers, checkpoints and EMA; they
    // are created with requires_grad off (inference), set_trainable turns it on.
    torch::nn::Module& module();
    const torch::nn::Module& module() const;
    std::shared_ptr<torch::nn::Module> module_ptr() const;
    void set_trainable(bool trainable);

    // Moves the weights (e.g. to the CPU after encoding, Infinity's low-memory mode).
    void to(c10::Device device);
    c10::Device device() const;
    const T5EncoderConfig& config() const { return config_; }
    const T5EncoderOptions& options() const { return options_; }
    StateDict state_dict() const;  // HF's names, as load() takes them

    // HF's bidirectional bucket of each relative position (memory - query), exposed for tests.
    static at::Tensor relative_position_bucket(const at::Tensor& relative_position,
                                               int64_t num_buckets, int64_t max_distance);

  private:
    struct Impl;
    T5EncoderConfig config_;
    T5EncoderOptions options_;
    std::unique_ptr<Impl> impl_;
};

// The encoder's tensors of a Hugging Face folder, renamed for T5Encoder::load: "encoder."
// stripped, the shared embedding ("shared.weight", or "encoder.embed_tokens.weight") as
// "embed_tokens.weight"; decoder.* and lm_head.* are not read from safetensors files (nor are
// shards that hold only those; a pytorch_model.bin is read whole). `what` receives the file(s)
// read, for messages. Throws CheckpointError naming the file.
StateDict load_t5_encoder_tensors(const std::string& folder, std::string* what = nullptr);

// Writes `encoder` as a Hugging Face T5 encoder folder that load_t5_encoder_tensors and
// T5EncoderConfig::from_json read back (config.json, model.safetensors with "shared.weight" and
// "encoder.*" in `dtype`), plus spiece_model_path copied as spiece.model when given.
// std::invalid_argument naming the folder or file when it cannot be written.
void save_t5_encoder_folder(const T5Encoder& encoder, const std::string& folder,
                            at::ScalarType dtype = at::kFloat,
                            const std::string& spiece_model_path = "");

// Infinity's text condition (tools/run_infinity.py encode_prompt): the valid rows of every
// prompt back to back in fp32, their lengths (the mask's row sums), cumulative offsets with a
// leading 0 (int32, on the features' device) and the longest length.
struct TextCondition {
    at::Tensor kv_compact;  // (sum(lens), d_model) float32
    std::vector<int64_t> lens;
    at::Tensor cu_seqlens;  // (B + 1) int32
    int64_t max_len = 0;
    std::vector<bool> truncated;  // per prompt, when made from text (T5TextEncoder)
    // Per prompt, when made from text with a prompt vocabulary (else empty): what the filter
    // did (the text encoded, the words left out, whether it had no known word at all).
    std::vector<FilteredPrompt> filtered;
};

// Rows [0, lens[b]) of each hidden[b], lens = attention_mask.sum(-1), as Infinity slices them.
TextCondition compact_text_features(const at::Tensor& hidden, const at::Tensor& attention_mask);

}  // namespace varscope
