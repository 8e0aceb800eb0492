#include "core/models/t5_text_encoder.h"

#include <ATen/ATen.h>

#include <filesystem>

#include "kernels/memory_stats.h"

namespace varscope {
namespace {

T5Encoder load_encoder(const std::string& folder, const T5EncoderOptions& options) {
    const T5EncoderConfig config =
        load_t5_encoder_config((std::filesystem::path(folder) / "config.json").string());
    std::string what;
    const StateDict tensors = load_t5_encoder_tensors(folder, &what);
    // Bound on the CPU in the target dtype (no fp32 copy of a bf16 model), then moved.
    T5EncoderOptions cpu = options;
    cpu.device = c10::kCPU;
    T5Encoder encoder(config, cpu);
    encoder.load(tensors, what);
    if (options.device != c10::Device(c10::kCPU)) encoder.to(options.device);
    return encoder;
}

std::string spiece_path(const std::string& folder, const T5TextEncoderOptions& o) {
    return o.tokenizer_path.empty() ? (std::filesystem::path(folder) / "spiece.model").string()
                                    : o.tokenizer_path;
}

std::optional<PromptVocabulary> load_vocabulary(const std::string& folder,
                                                const T5TextEncoderOptions& o) {
    if (!o.vocabulary_path.empty()) return PromptVocabulary::load(o.vocabulary_path);
    const auto path = std::filesystem::path(folder) / "prompt_vocabulary.json";
    if (!std::filesystem::exists(path)) return std::nullopt;
    return PromptVocabulary::load(path.string());
}

}  // namespace

T5TextEncoder::T5TextEncoder(const std::string& folder, T5TextEncoderOptions options)
    : options_(options),
      tokenizer_(spiece_path(folder, options), options.tokenizer),
      encoder_(load_encoder(folder, options.encoder)),
      vocabulary_(load_vocabulary(folder, options)) {
    // A tokenizer with more pieces than the embedding has rows would index past it.
    if (tokenizer_.piece_size() > encoder_.config().vocab_size)
        throw std::invalid_argument(spiece_path(folder, options) + ": " +
                                    std::to_string(tokenizer_.piece_size()) +
                                    " pieces, but the encoder's vocab_size is " +
                                    std::to_string(encoder_.config().vocab_size));
}

TextCondition T5TextEncoder::encode(const std::vector<std::string>& prompts,
                                    bool keep_unknown_words) {
    if (prompts.empty()) throw std::invalid_argument("T5 text encoder: no prompts");
    std::vector<std::string> texts = prompts;
    std::vector<FilteredPrompt> filtered;
    if (vocabulary_ && !keep_unknown_words)
        for (size_t i = 0; i < prompts.size(); ++i) {
            filtered.push_back(vocabulary_->filter(prompts[i]));
            texts[i] = filtered.back().text;
        }
    const TokenBatch batch = tokenizer_.encode_batch(texts, options_.padding);
    const auto opts = at::TensorOptions().dtype(at::kLong);
    const at::Tensor ids = at::tensor(batch.input_ids, opts).view({batch.rows, batch.length});
    const at::Tensor mask = at::tensor(batch.attention_mask, opts).view({batch.rows, batch.length});
    if (encoder_.device() != options_.encoder.device) encoder_.to(options_.encoder.device);
    TextCondition out = compact_text_features(encoder_.forward(ids, mask), mask);
    out.truncated = batch.truncated;
    out.filtered = std::move(filtered);
    if (options_.offload_after_encode) offload();
    return out;
}

void T5TextEncoder::offload() {
    encoder_.to(c10::kCPU);
    // The caching allocator would keep the encoder's blocks reserved (flan-t5-xl: 4.9 GB in
    // fp32), so the card would not see them free for the transformer's KV cache.
    kernels::empty_cuda_cache();
}
bool T5TextEncoder::offloaded() const {
    return options_.encoder.device != c10::Device(c10::kCPU) && encoder_.device().is_cpu();
}

}  // namespace varscope
