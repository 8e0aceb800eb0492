#include "core/models/diffloss.h"

#include <ATen/ATen.h>
#include <torch/nn/modules/activation.h>

#include <cmath>

namespace varscope {
namespace {

at::Tensor linear(const torch::nn::Linear& l, const at::Tensor& x) {
    return at::linear(x, l->weight, l->bias);
}

// x * (1 + scale) + shift, in the official operation order.
at::Tensor modulate(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale) {
    return x * (1 + scale) + shift;
}

}  // namespace

at::Tensor apply_layer_norm(const torch::nn::LayerNorm& ln, const at::Tensor& x) {
    const auto& o = ln->options;
    return at::layer_norm(x, o.normalized_shape(), ln->weight, ln->bias, o.eps());
}

at::Tensor timestep_features(const at::Tensor& t, int64_t dim, double max_period) {
    const int64_t half = dim / 2;
    // exp(-log(max_period) * i / half) computed in float32 on the CPU, then moved (as upstream).
    auto freqs =
        at::exp(-std::log(max_period) * at::arange(0, half, at::kFloat) / half).to(t.device());
    auto args = t.unsqueeze(1).to(at::kFloat) * freqs.unsqueeze(0);
    auto emb = at::cat({at::cos(args), at::sin(args)}, -1);
    if (dim % 2) emb = at::cat({emb, at::zeros_like(emb.narrow(1, 0, 1))}, -1);
    return emb;
}

TimestepEmbedderImpl::TimestepEmbedderImpl(int64_t hidden, int64_t frequency_dim)
    : frequency_dim_(frequency_dim) {
    fc1_ = torch::nn::Linear(frequency_dim, hidden);
    fc2_ = torch::nn::Linear(hidden, hidden);
    mlp = register_module("mlp", torch::nn::Sequential(fc1_, torch::nn::SiLU(), fc2_));
}

at::Tensor TimestepEmbedderImpl::forward(const at::Tensor& t) const {
    auto f = timestep_features(t, frequency_dim_).to(fc1_->weight.scalar_type());
    return linear(fc2_, at::silu(linear(fc1_, f)));
}

DiffResBlockImpl::DiffResBlockImpl(int64_t channels) : channels_(channels) {
    in_ln = register_module(
        "in_ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({channels}).eps(1e-6)));
    fc1_ = torch::nn::Linear(channels, channels);
    fc2_ = torch::nn::Linear(channels, channels);
    mlp = register_module("mlp", torch::nn::Sequential(fc1_, torch::nn::SiLU(), fc2_));
    ada_ = torch::nn::Linear(channels, 3 * channels);
    adaLN_modulation =
        register_module("adaLN_modulation", torch::nn::Sequential(torch::nn::SiLU(), ada_));
}

at::Tensor DiffResBlockImpl::forward(const at::Tensor& x, const at::Tensor& y) const {
    auto mod = linear(ada_, at::silu(y)).chunk(3, -1);  // shift, scale, gate
    auto h = modulate(apply_layer_norm(in_ln, x), mod[0], mod[1]);
    h = linear(fc2_, at::silu(linear(fc1_, h)));
    return x + mod[2] * h;
}

std::vector<at::Tensor> DiffResBlockImpl::modulation(const at::Tensor& y) const {
    return modulation_from_silu(at::silu(y), ModulationNeed::All);
}

std::vector<at::Tensor> DiffResBlockImpl::modulation_from_silu(const at::Tensor& silu_y,
                                                               ModulationNeed need) const {
    if (need == ModulationNeed::None) return {at::Tensor(), at::Tensor(), at::Tensor()};
    if (need == ModulationNeed::Gate) {
        const int64_t C = channels_;
        return {
            at::Tensor(), at::Tensor(),
            at::linear(silu_y, ada_->weight.narrow(0, 2 * C, C), ada_->bias.narrow(0, 2 * C, C))};
    }
    auto mod = linear(ada_, silu_y).chunk(3, -1);
    return {mod[0], 1 + mod[1], mod[2]};
}

at::Tensor DiffResBlockImpl::forward_modulated(const at::Tensor& x, const at::Tensor& shift,
                                               const at::Tensor& scale1,
                                               const at::Tensor& gate) const {
    return x + gate * mlp_modulated(x, shift, scale1);
}

at::Tensor DiffResBlockImpl::mlp_modulated(const at::Tensor& x, const at::Tensor& shift,
                                           const at::Tensor& scale1) const {
    // modulate()'s operation order with (1 + scale) given: the same values.
    const auto h = apply_layer_norm(in_ln, x) * scale1 + shift;
    return linear(fc2_, at::silu(linear(fc1_, h)));
}

DiffFinalLayerImpl::DiffFinalLayerImpl(int64_t channels, int64_t out_channels)
    : channels_(channels) {
    linear = register_module("linear", torch::nn::Linear(channels, out_channels));
    ada_ = torch::nn::Linear(channels, 2 * channels);
    adaLN_modulation =
        register_module("adaLN_modulation", torch::nn::Sequential(torch::nn::SiLU(), ada_));
}

std::vector<at::Tensor> DiffFinalLayerImpl::modulation(const at::Tensor& y) const {
    return modulation_from_silu(at::silu(y));
}

std::vector<at::Tensor> DiffFinalLayerImpl::modulation_from_silu(const at::Tensor& silu_y) const {
    auto mod = at::linear(silu_y, ada_->weight, ada_->bias).chunk(2, -1);
    return {mod[0], 1 + mod[1]};
}

at::Tensor DiffFinalLayerImpl::forward_modulated(const at::Tensor& x, const at::Tensor& shift,
                                                 const at::Tensor& scale1) const {
    auto h = at::layer_norm(x, {channels_}, {}, {}, 1e-6) * scale1 + shift;
    return at::linear(h, linear->weight, linear->bias);
}

at::Tensor DiffFinalLayerImpl::forward(const at::Tensor& x, const at::Tensor& y) const {
    auto mod = at::linear(at::silu(y), ada_->weight, ada_->bias).chunk(2, -1);  // shift, scale
    auto h = modulate(at::layer_norm(x, {channels_}, {}, {}, 1e-6), mod[0], mod[1]);
    return at::linear(h, linear->weight, linear->bias);
}

SimpleMlpAdaLNImpl::SimpleMlpAdaLNImpl(int64_t in_channels, int64_t width, int64_t out_channels,
                                       int64_t z_channels, int64_t depth)
    : in_channels_(in_channels) {
    time_embed = register_module("time_embed", TimestepEmbedder(width));
    cond_embed = register_module("cond_embed", torch::nn::Linear(z_channels, width));
    input_proj = register_module("input_proj", torch::nn::Linear(in_channels, width));
    res_blocks = register_module("res_blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < depth; ++i) {
        blocks_.emplace_back(width);
        res_blocks->push_back(blocks_.back());
    }
    final_layer = register_module("final_layer", DiffFinalLayer(width, out_channels));
}

at::Tensor SimpleMlpAdaLNImpl::embed_condition(const at::Tensor& c) const {
    return linear(cond_embed, c);
}

at::Tensor SimpleMlpAdaLNImpl::forward_embedded(const at::Tensor& x, const at::Tensor& t_emb,
                                                const at::Tensor& c_emb) const {
    auto h = linear(input_proj, x);
    auto y = t_emb + c_emb;
    for (const auto& b : blocks_) h = b->forward(h, y);
    return final_layer->forward(h, y);
}

int64_t SimpleMlpAdaLNImpl::width() const {
    return input_proj->weight.size(0);
}

DiffModulation SimpleMlpAdaLNImpl::modulations(const at::Tensor& y) const {
    return modulations(y, std::vector<ModulationNeed>(blocks_.size(), ModulationNeed::All));
}

DiffModulation SimpleMlpAdaLNImpl::modulations(const at::Tensor& y,
                                               const std::vector<ModulationNeed>& needs) const {
    TORCH_CHECK(needs.size() == blocks_.size(), "modulations: ", needs.size(), " needs for ",
                blocks_.size(), " blocks");
    const auto silu_y = at::silu(y);  // once for every layer (elementwise: the same values)
    DiffModulation m;
    for (size_t b = 0; b < blocks_.size(); ++b) {
        auto mod = blocks_[b]->modulation_from_silu(silu_y, needs[b]);
        m.shift.push_back(mod[0]);
        m.scale1.push_back(mod[1]);
        m.gate.push_back(mod[2]);
    }
    auto fin = final_layer->modulation_from_silu(silu_y);
    m.final_shift = fin[0];
    m.final_scale1 = fin[1];
    return m;
}

DiffModulation DiffModulation::rows(int64_t start, int64_t count) const {
    DiffModulation m;
    auto cut = [&](const at::Tensor& t) {
        return t.defined() ? t.narrow(0, start, count) : at::Tensor();
    };
    for (size_t i = 0; i < shift.size(); ++i) {
        m.shift.push_back(cut(shift[i]));
        m.scale1.push_back(cut(scale1[i]));
        m.gate.push_back(cut(gate[i]));
    }
    m.final_shift = cut(final_shift);
    m.final_scale1 = cut(final_scale1);
    return m;
}

at::Tensor SimpleMlpAdaLNImpl::forward_modulated(const at::Tensor& x,
                                                 const DiffModulation& m) const {
    auto h = linear(input_proj, x);
    for (size_t i = 0; i < blocks_.size(); ++i)
        h = blocks_[i]->forward_modulated(h, m.shift[i], m.scale1[i], m.gate[i]);
    return final_layer->forward_modulated(h, m.final_shift, m.final_scale1);
}

at::Tensor SimpleMlpAdaLNImpl::forward(const at::Tensor& x, const at::Tensor& t,
                                       const at::Tensor& c) const {
    return forward_embedded(x, time_embed->forward(t), embed_condition(c));
}

DiffLossImpl::DiffLossImpl(int64_t target_channels, int64_t z_channels, int64_t depth,
                           int64_t width) {
    // Twice the target channels out: the noise and the variance interpolation.
    net = register_module(
        "net", SimpleMlpAdaLN(target_channels, width, 2 * target_channels, z_channels, depth));
}

}  // namespace varscope
