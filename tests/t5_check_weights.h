// The weights of `tools/parity/t5_parity.py --check` (check_weights there), regenerated here so
// that the flan-t5-xl-shaped check needs no 5 GB folder: over the encoder's tensor names in
// sorted order, tensor k is randn(shape) from a CPU generator seeded with seed + k, then layer
// norms 0.1 r + 1, linear weights r / sqrt(fan_in), embedding and position bias r as drawn.
#pragma once

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/models/t5_encoder.h"

namespace varscope::testing {

inline StateDict t5_check_weights(const T5EncoderConfig& c, uint64_t seed) {
    const int64_t D = c.d_model, inner = c.num_heads * c.d_kv, F = c.d_ff;
    std::map<std::string, std::vector<int64_t>> shapes = {
        {"embed_tokens.weight", {c.vocab_size, D}}, {"final_layer_norm.weight", {D}}};
    for (int64_t i = 0; i < c.num_layers; ++i) {
        const std::string b = "block." + std::to_string(i) + ".layer.";
        for (const char* n : {"q", "k", "v"})
            shapes[b + "0.SelfAttention." + n + ".weight"] = {inner, D};
        shapes[b + "0.SelfAttention.o.weight"] = {D, inner};
        if (i == 0)
            shapes[b + "0.SelfAttention.relative_attention_bias.weight"] = {
                c.relative_attention_num_buckets, c.num_heads};
        shapes[b + "0.layer_norm.weight"] = {D};
        shapes[b + "1.DenseReluDense.wi_0.weight"] = {F, D};
        shapes[b + "1.DenseReluDense.wi_1.weight"] = {F, D};
        shapes[b + "1.DenseReluDense.wo.weight"] = {D, F};
        shapes[b + "1.layer_norm.weight"] = {D};
    }
    auto ends_with = [](const std::string& s, const std::string& t) {
        return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
    };
    StateDict out;
    uint64_t k = 0;
    for (const auto& [name, shape] : shapes) {
        at::Tensor r = at::randn(shape, at::detail::createCPUGenerator(seed + k++));
        if (ends_with(name, "layer_norm.weight")) {
            r = 0.1 * r + 1.0;
        } else if (name.find("relative_attention_bias") == std::string::npos &&
                   name != "embed_tokens.weight") {
            r = r / std::sqrt(double(shape[1]));
        }
        out.emplace(name, r);
    }
    return out;
}

}  // namespace varscope::testing
