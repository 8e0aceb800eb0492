// T5 encoder: config.json fields, the weights of a Hugging Face folder, and Infinity's compact
// text condition.
#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <stdexcept>

#include "core/io/atomic_file.h"
#include "core/io/checkpoint.h"
#include "core/io/json_read.h"
#include "core/models/t5_encoder.h"

namespace varscope {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A field of HF's config.json: a positive integer no larger than `max`.
int64_t int_field(const json& j, const char* key, const std::string& what, int64_t max,
                  std::optional<int64_t> fallback = std::nullopt) {
    const auto it = j.find(key);
    if (it == j.end()) {
        if (fallback) return *fallback;
        throw std::invalid_argument(what + ": missing field '" + key + "'");
    }
    if (!it->is_number_integer())
        throw std::invalid_argument(what + ": field '" + key + "' must be an integer, got " +
                                    it->dump());
    const int64_t v = it->get<int64_t>();
    if (v < 1 || v > max)
        throw std::invalid_argument(what + ": field '" + key + "' = " + std::to_string(v) +
                                    " is outside [1, " + std::to_string(max) + "]");
    return v;
}

std::string string_field(const json& j, const char* key, const std::string& what,
                         const std::string& fallback) {
    const auto it = j.find(key);
    if (it == j.end()) return fallback;
    if (!it->is_string())
        throw std::invalid_argument(what + ": field '" + key + "' must be a string, got " +
                                    it->dump());
    return it->get<std::string>();
}

bool is_encoder_name(const std::string& name) {
    return name.rfind("encoder.", 0) == 0 || name == "shared.weight";
}

// Keeps the encoder's tensors of `all`, renamed for T5Encoder::load.
void take_encoder_tensors(StateDict& all, StateDict& out) {
    for (auto& [name, t] : all) {
        if (name == "shared.weight") {
            out.emplace("embed_tokens.weight", t);  // encoder.embed_tokens wins if present
        } else if (name.rfind("encoder.", 0) == 0) {
            out[name.substr(8)] = t;
        }
    }
    all.clear();
}

}  // namespace

T5EncoderConfig T5EncoderConfig::from_json(const json& j, const std::string& what) {
    if (!j.is_object()) throw std::invalid_argument(what + ": expected a JSON object");
    // mt5 is T5 v1.1 with another vocabulary; umt5 has a position bias per layer (not this code).
    const std::string type = string_field(j, "model_type", what, "t5");
    if (type != "t5" && type != "mt5")
        throw std::invalid_argument(what + ": field 'model_type' = '" + type +
                                    "' is not a T5 encoder (expected \"t5\")");
    T5EncoderConfig c;
    constexpr int64_t kDim = 1 << 20;
    c.vocab_size = int_field(j, "vocab_size", what, 1 << 24);
    c.d_model = int_field(j, "d_model", what, kDim);
    c.d_kv = int_field(j, "d_kv", what, kDim);
    c.d_ff = int_field(j, "d_ff", what, kDim);
    c.num_layers = int_field(j, "num_layers", what, 1024);
    c.num_heads = int_field(j, "num_heads", what, 4096);
    // HF's defaults for the two bias fields (older configs omit them).
    c.relative_attention_num_buckets =
        int_field(j, "relative_attention_num_buckets", what, 1 << 16, 32);
    c.relative_attention_max_distance =
        int_field(j, "relative_attention_max_distance", what, 1 << 24, 128);
    if (c.num_heads * c.d_kv > kDim)
        throw std::invalid_argument(what + ": fields 'num_heads' x 'd_kv' = " +
                                    std::to_string(c.num_heads * c.d_kv) + " is too large");
    // Bidirectional buckets: half per direction, half of those exact, so at least 4, and the
    // log-spaced ones need max_distance beyond the exact range.
    const int64_t max_exact = c.relative_attention_num_buckets / 4;
    if (max_exact < 1)
        throw std::invalid_argument(what + ": field 'relative_attention_num_buckets' = " +
                                    std::to_string(c.relative_attention_num_buckets) +
                                    " must be at least 4");
    if (c.relative_attention_max_distance <= max_exact)
        throw std::invalid_argument(what + ": field 'relative_attention_max_distance' = " +
                                    std::to_string(c.relative_attention_max_distance) +
                                    " must exceed relative_attention_num_buckets / 4");
    if (const auto it = j.find("layer_norm_epsilon"); it != j.end()) {
        if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() <= 0)
            throw std::invalid_argument(what +
                                        ": field 'layer_norm_epsilon' must be a positive "
                                        "number, got " +
                                        it->dump());
        c.layer_norm_epsilon = it->get<double>();
    }

    // As T5Config: "gated-<act>" or "<act>"; "gated-gelu" means gelu_new. Explicit
    // dense_act_fn / is_gated_act (save_pretrained writes both) override, as in HF.
    const std::string proj = string_field(j, "feed_forward_proj", what, "relu");
    const auto dash = proj.find('-');
    if (dash == std::string::npos) {
        c.gated = false;
        c.activation = proj;
    } else if (proj.substr(0, dash) == "gated" && proj.find('-', dash + 1) == std::string::npos) {
        c.gated = true;
        c.activation = proj == "gated-gelu" ? "gelu_new" : proj.substr(dash + 1);
    } else {
        throw std::invalid_argument(what + ": field 'feed_forward_proj' = '" + proj +
                                    "' is not 'gated-<activation>' or '<activation>'");
    }
    c.activation = string_field(j, "dense_act_fn", what, c.activation);
    if (const auto it = j.find("is_gated_act"); it != j.end()) {
        if (!it->is_boolean())
            throw std::invalid_argument(what + ": field 'is_gated_act' must be true or false");
        c.gated = it->get<bool>();
    }
    static const std::set<std::string> kActs = {"gelu_new", "gelu", "gelu_pytorch_tanh",
                                                "relu",     "silu", "swish"};
    if (!kActs.count(c.activation))
        throw std::invalid_argument(what + ": activation '" + c.activation +
                                    "' (fields 'feed_forward_proj' / 'dense_act_fn') is not one "
                                    "of gelu_new, gelu, gelu_pytorch_tanh, relu, silu, swish");
    return c;
}

json T5EncoderConfig::to_json() const {
    // Both the T5Config spelling (feed_forward_proj) and the explicit fields save_pretrained
    // writes, so HF and from_json agree on the activation.
    const std::string proj = (gated ? "gated-" : "") + activation;
    return {{"architectures", {"T5EncoderModel"}},
            {"model_type", "t5"},
            {"vocab_size", vocab_size},
            {"d_model", d_model},
            {"d_kv", d_kv},
            {"d_ff", d_ff},
            {"num_layers", num_layers},
            {"num_heads", num_heads},
            {"relative_attention_num_buckets", relative_attention_num_buckets},
            {"relative_attention_max_distance", relative_attention_max_distance},
            {"layer_norm_epsilon", layer_norm_epsilon},
            {"feed_forward_proj", proj == "gated-gelu_new" ? "gated-gelu" : proj},
            {"dense_act_fn", activation},
            {"is_gated_act", gated},
            {"dropout_rate", 0.0},
            {"initializer_factor", 1.0},
            {"pad_token_id", 0},
            {"eos_token_id", 1},
            {"decoder_start_token_id", 0},
            {"is_encoder_decoder", false},
            {"use_cache", false}};
}

void save_t5_encoder_folder(const T5Encoder& encoder, const std::string& folder,
                            at::ScalarType dtype, const std::string& spiece_model_path) {
    std::error_code ec;
    fs::create_directories(folder, ec);
    if (ec || !fs::is_directory(folder))
        throw std::invalid_argument("cannot create the T5 folder '" + folder +
                                    "': " + ec.message());
    StateDict out;
    for (const auto& [name, t] : encoder.state_dict()) {
        const at::Tensor v = t.detach().to(at::kCPU, dtype).contiguous();
        // HF's T5EncoderModel keeps the tied embedding as "shared.weight".
        out[name == "embed_tokens.weight" ? "shared.weight" : "encoder." + name] = v;
    }
    const fs::path dir(folder);
    save_safetensors(out, (dir / "model.safetensors").string(), {{"format", "pt"}});
    {
        json cfg = encoder.config().to_json();
        cfg["torch_dtype"] = dtype == at::kHalf       ? "float16"
                             : dtype == at::kBFloat16 ? "bfloat16"
                                                      : "float32";
        write_file_atomic((dir / "config.json").string(), cfg.dump(2) + "\n");
    }
    if (!spiece_model_path.empty()) {
        // Copied through AtomicFileWriter too (fs::copy_file truncates the target first).
        const fs::path dst = dir / "spiece.model";
        if (fs::absolute(spiece_model_path) != fs::absolute(dst))
            write_file_atomic(
                dst.string(),
                read_regular_file(spiece_model_path, "the tokenizer '" + spiece_model_path + "'"));
    }
}

T5EncoderConfig load_t5_encoder_config(const std::string& path) {
    const std::string what = "T5 config '" + path + "'";
    return T5EncoderConfig::from_json(read_json_file(path, what), what);
}

StateDict load_t5_encoder_tensors(const std::string& folder, std::string* what) {
    const fs::path dir(folder);
    if (!fs::is_directory(dir))
        throw CheckpointError(folder + ": not a folder (expected a Hugging Face T5 folder)");
    StateDict out;
    const fs::path index = dir / "model.safetensors.index.json";
    if (fs::exists(index)) {
        const std::string index_path = index.string();
        // Shards holding only decoder tensors are not opened.
        StateDict all = load_safetensors_index(index_path, is_encoder_name);
        take_encoder_tensors(all, out);
        if (out.empty()) throw CheckpointError(index_path + ": lists no encoder tensors");
        if (what) *what = index_path;
        return out;
    }
    for (const char* name : {"model.safetensors", "pytorch_model.bin"}) {
        const fs::path file = dir / name;
        if (!fs::exists(file)) continue;
        const bool safetensors = std::string(name) == "model.safetensors";
        StateDict all = safetensors ? load_safetensors_selected(file.string(), is_encoder_name)
                                    : load_checkpoint(file.string());
        take_encoder_tensors(all, out);
        if (out.empty()) throw CheckpointError(file.string() + ": holds no encoder tensors");
        if (what) *what = file.string();
        return out;
    }
    throw CheckpointError(folder +
                          ": no weights (expected model.safetensors, "
                          "model.safetensors.index.json or pytorch_model.bin)");
}

TextCondition compact_text_features(const at::Tensor& hidden, const at::Tensor& attention_mask) {
    if (hidden.dim() != 3)
        throw std::invalid_argument("compact_text_features: hidden must be (batch, length, dim)");
    const int64_t B = hidden.size(0), L = hidden.size(1);
    std::vector<int64_t> lens(static_cast<size_t>(B), L);
    if (attention_mask.defined()) {
        if (attention_mask.dim() != 2 || attention_mask.size(0) != B || attention_mask.size(1) != L)
            throw std::invalid_argument("compact_text_features: mask must be (batch, length)");
        const at::Tensor sums = attention_mask.to(at::kCPU).to(at::kLong).sum(-1).contiguous();
        for (int64_t b = 0; b < B; ++b) lens[size_t(b)] = sums.data_ptr<int64_t>()[b];
    }
    TextCondition out;
    std::vector<at::Tensor> rows;
    std::vector<int32_t> cu{0};
    for (int64_t b = 0; b < B; ++b) {
        const int64_t n = lens[size_t(b)];
        if (n < 0 || n > L)
            throw std::invalid_argument("compact_text_features: mask sum out of range");
        rows.push_back(hidden[b].narrow(0, 0, n));
        cu.push_back(cu.back() + static_cast<int32_t>(n));
        out.max_len = std::max(out.max_len, n);
    }
    out.kv_compact = at::cat(rows, 0).to(at::kFloat);
    out.lens = lens;
    out.cu_seqlens = at::tensor(cu, at::TensorOptions().dtype(at::kInt)).to(hidden.device());
    return out;
}

}  // namespace varscope
