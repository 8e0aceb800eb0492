// The encoder's modules (named as HF's T5EncoderModel.encoder, so checkpoints bind by name) and
// its forward pass, op for op as transformers' modeling_t5.py computes it, casts included.
#include "core/models/t5_encoder.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "core/io/module_binding.h"

namespace varscope {
namespace {

// A leaf holding one parameter called "weight" (HF's nn.Linear without bias, nn.Embedding,
// T5LayerNorm all store just that).
struct Weight : torch::nn::Module {
    at::Tensor weight;
    Weight(at::IntArrayRef shape, at::ScalarType dtype) {
        weight = register_parameter("weight", at::empty(shape, at::TensorOptions().dtype(dtype)),
                                    /*requires_grad=*/false);
    }
};

struct Node : torch::nn::Module {
    using torch::nn::Module::register_module;
};

at::Tensor add_weight(Node& parent, const std::string& name, at::IntArrayRef shape,
                      at::ScalarType dtype) {
    return parent.register_module(name, std::make_shared<Weight>(shape, dtype))->weight;
}

std::shared_ptr<Node> add_node(Node& parent, const std::string& name) {
    return parent.register_module(name, std::make_shared<Node>());
}

struct Layer {
    at::Tensor ln_attn, q, k, v, o, ln_ff, wi_0, wi_1, wo;  // wi_1 undefined when not gated
};

// T5LayerNorm: RMS over the last dim with fp32 statistics; the product with the fp32 factor
// promotes half inputs to fp32, and only a half weight casts the result back (as HF does).
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
    const at::Tensor variance = x.to(at::kFloat).pow(2).mean(-1, /*keepdim=*/true);
    at::Tensor y = x * at::rsqrt(variance + eps);
    if (weight.scalar_type() == at::kHalf || weight.scalar_type() == at::kBFloat16)
        y = y.to(weight.scalar_type());
    return weight * y;
}

at::Tensor activation(const at::Tensor& x, const std::string& name) {
    if (name == "gelu_new") {
        // HF's NewGELUActivation, op for op (its roundings show in bf16), not at::gelu(tanh).
        const double c = std::sqrt(2.0 / M_PI);
        return 0.5 * x * (1.0 + at::tanh(c * (x + 0.044715 * at::pow(x, 3.0))));
    }
    if (name == "gelu_pytorch_tanh") return at::gelu(x, "tanh");
    if (name == "gelu") return at::gelu(x);
    if (name == "relu") return at::relu(x);
    return at::silu(x);  // "silu" / "swish" (the config reader allows no other)
}

// HF's inf guard for fp16 activations (T5Block): clamp to the largest finite value, 1000 lower
// when an inf is present.
at::Tensor clamp_fp16(const at::Tensor& h) {
    if (h.scalar_type() != at::kHalf) return h;
    const double max = 65504.0;
    const at::Tensor limit =
        at::where(at::isinf(h).any(), at::scalar_tensor(max - 1000, h.options()),
                  at::scalar_tensor(max, h.options()));
    return at::clamp(h, -limit, limit);
}

}  // namespace

struct T5Encoder::Impl {
    std::shared_ptr<Node> root;
    at::Tensor embed, rel_bias, final_ln;
    std::vector<Layer> layers;
};

T5Encoder::T5Encoder(const T5EncoderConfig& c, const T5EncoderOptions& options)
    : config_(c), options_(options), impl_(std::make_unique<Impl>()) {
    const at::ScalarType dt = options.dtype;
    if (dt != at::kFloat && dt != at::kBFloat16 && dt != at::kHalf)
        throw std::invalid_argument("T5 encoder: dtype must be float32, bfloat16 or float16, got " +
                                    std::string(c10::toString(dt)));
    const at::ScalarType wo_dt = dt == at::kHalf && options.keep_wo_fp32 ? at::kFloat : dt;
    Impl& m = *impl_;
    m.root = std::make_shared<Node>();
    const int64_t inner = c.num_heads * c.d_kv;
    m.embed = add_weight(*m.root, "embed_tokens", {c.vocab_size, c.d_model}, dt);
    auto blocks = add_node(*m.root, "block");
    for (int64_t i = 0; i < c.num_layers; ++i) {
        auto block = add_node(*blocks, std::to_string(i));
        auto layer = add_node(*block, "layer");
        auto attn_layer = add_node(*layer, "0");
        auto attn = add_node(*attn_layer, "SelfAttention");
        Layer l;
        l.q = add_weight(*attn, "q", {inner, c.d_model}, dt);
        l.k = add_weight(*attn, "k", {inner, c.d_model}, dt);
        l.v = add_weight(*attn, "v", {inner, c.d_model}, dt);
        l.o = add_weight(*attn, "o", {c.d_model, inner}, dt);
        if (i == 0)
            m.rel_bias = add_weight(*attn, "relative_attention_bias",
                                    {c.relative_attention_num_buckets, c.num_heads}, dt);
        l.ln_attn = add_weight(*attn_layer, "layer_norm", {c.d_model}, dt);
        auto ff_layer = add_node(*layer, "1");
        auto ff = add_node(*ff_layer, "DenseReluDense");
        if (c.gated) {
            l.wi_0 = add_weight(*ff, "wi_0", {c.d_ff, c.d_model}, dt);
            l.wi_1 = add_weight(*ff, "wi_1", {c.d_ff, c.d_model}, dt);
        } else {
            l.wi_0 = add_weight(*ff, "wi", {c.d_ff, c.d_model}, dt);
        }
        l.wo = add_weight(*ff, "wo", {c.d_model, c.d_ff}, wo_dt);
        l.ln_ff = add_weight(*ff_layer, "layer_norm", {c.d_model}, dt);
        m.layers.push_back(l);
    }
    m.final_ln = add_weight(*m.root, "final_layer_norm", {c.d_model}, dt);
    if (options.device != c10::Device(c10::kCPU)) to(options.device);
}

T5Encoder::~T5Encoder() = default;
T5Encoder::T5Encoder(T5Encoder&&) noexcept = default;
T5Encoder& T5Encoder::operator=(T5Encoder&&) noexcept = default;

void T5Encoder::load(const StateDict& tensors, const std::string& what) {
    BindOptions o;
    o.what = what;
    bind_state_dict(*impl_->root, tensors, o);
}

StateDict T5Encoder::state_dict() const {
    return module_state_dict(*impl_->root);
}

void T5Encoder::to(c10::Device device) {
    // Module::to replaces each parameter's data in place, so the handles in Impl stay valid;
    // each keeps its dtype (fp32 `wo` beside fp16 weights).
    impl_->root->to(device);
}

c10::Device T5Encoder::device() const {
    return impl_->embed.device();
}

at::Tensor T5Encoder::relative_position_bucket(const at::Tensor& relative_position,
                                               int64_t num_buckets, int64_t max_distance) {
    // Bidirectional: half the buckets for positive offsets; within a half, exact buckets for
    // offsets below max_exact, then log-spaced ones up to max_distance (fp32 log, truncation).
    const int64_t half = num_buckets / 2;
    at::Tensor buckets = (relative_position > 0).to(at::kLong) * half;
    const at::Tensor n = at::abs(relative_position);
    const int64_t max_exact = half / 2;
    const at::Tensor is_small = n < max_exact;
    at::Tensor large =
        max_exact + (at::log(n.to(at::kFloat) / max_exact) /
                     std::log(double(max_distance) / double(max_exact)) * double(half - max_exact))
                        .to(at::kLong);
    large = at::minimum(large, at::full_like(large, half - 1));
    return buckets + at::where(is_small, n, large);
}

at::Tensor T5Encoder::forward(const at::Tensor& input_ids, const at::Tensor& attention_mask) const {
    at::NoGradGuard no_grad;
    return forward_train(input_ids, attention_mask);
}

at::Tensor T5Encoder::forward_train(const at::Tensor& input_ids,
                                    const at::Tensor& attention_mask) const {
    const T5EncoderConfig& c = config_;
    const Impl& m = *impl_;
    if (input_ids.dim() != 2 || input_ids.scalar_type() != at::kLong)
        throw std::invalid_argument("T5 encoder: input_ids must be a (batch, length) int64 tensor");
    if (input_ids.size(1) == 0) throw std::invalid_argument("T5 encoder: empty input_ids");
    if (attention_mask.defined() && attention_mask.sizes() != input_ids.sizes())
        throw std::invalid_argument("T5 encoder: attention_mask must have input_ids' shape");
    if (input_ids.numel() > 0) {
        const auto [lo, hi] = at::aminmax(input_ids);
        const int64_t min_id = lo.item<int64_t>(), max_id = hi.item<int64_t>();
        if (min_id < 0 || max_id >= c.vocab_size)
            throw std::invalid_argument(
                "T5 encoder: token id " + std::to_string(min_id < 0 ? min_id : max_id) +
                " outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
    }
    const c10::Device dev = m.embed.device();
    const int64_t B = input_ids.size(0), L = input_ids.size(1), H = c.num_heads, D = c.d_kv;

    at::Tensor h = at::embedding(m.embed, input_ids.to(dev));
    // Block 0 computes the position bias (embedding dtype) plus the additive key mask,
    // (1 - mask) * finfo(dtype).min, and every block reuses it.
    const at::Tensor pos = at::arange(L, at::TensorOptions().dtype(at::kLong).device(dev));
    const at::Tensor buckets = relative_position_bucket(pos.unsqueeze(0) - pos.unsqueeze(1),
                                                        c.relative_attention_num_buckets,
                                                        c.relative_attention_max_distance);
    at::Tensor bias = at::embedding(m.rel_bias, buckets).permute({2, 0, 1}).unsqueeze(0);
    if (attention_mask.defined()) {
        const at::ScalarType dt = h.scalar_type();
        const double lowest = dt == at::kHalf       ? -65504.0
                              : dt == at::kBFloat16 ? -3.3895313892515355e38
                                                    : double(std::numeric_limits<float>::lowest());
        const at::Tensor keep = attention_mask.to(dev).to(dt).view({B, 1, 1, L});
        bias = bias + (1.0 - keep) * lowest;
    }

    for (const Layer& l : m.layers) {
        const at::Tensor x = rms_norm(h, l.ln_attn, c.layer_norm_epsilon);
        auto heads = [&](const at::Tensor& w) {
            return at::linear(x, w).view({B, L, H, D}).transpose(1, 2);
        };
        const at::Tensor q = heads(l.q), k = heads(l.k), v = heads(l.v);
        at::Tensor scores = at::matmul(q, k.transpose(3, 2));  // no 1/sqrt(d): folded into init
        scores = scores + bias;
        const at::Tensor probs = at::softmax(scores.to(at::kFloat), -1).to(scores.scalar_type());
        const at::Tensor ctx = at::matmul(probs, v).transpose(1, 2).reshape({B, L, H * D});
        h = clamp_fp16(h + at::linear(ctx, l.o));

        const at::Tensor y = rms_norm(h, l.ln_ff, c.layer_norm_epsilon);
        at::Tensor f = activation(at::linear(y, l.wi_0), c.activation);
        if (l.wi_1.defined()) f = f * at::linear(y, l.wi_1);
        if (f.scalar_type() != l.wo.scalar_type()) f = f.to(l.wo.scalar_type());
        h = clamp_fp16(h + at::linear(f, l.wo));
    }
    return rms_norm(h, m.final_ln, c.layer_norm_epsilon);
}

void T5Encoder::init_weights(uint64_t seed) {
    // HF T5PreTrainedModel._init_weights with initializer_factor 1: embeddings N(0, 1), q
    // N(0, (d_model d_kv)^-1/2) (the attention's missing 1/sqrt(d)), k, v, wi and the position
    // bias N(0, d_model^-1/2), o N(0, (heads d_kv)^-1/2), wo N(0, d_ff^-1/2), norms 1.
    at::NoGradGuard g;
    const T5EncoderConfig& c = config_;
    Impl& m = *impl_;
    auto gen = at::detail::createCPUGenerator(seed);
    auto normal = [&](at::Tensor& t, double std) {
        t.copy_(at::empty(t.sizes(), at::kFloat).normal_(0.0, std, gen));
    };
    const double dm = std::pow(double(c.d_model), -0.5);
    normal(m.embed, 1.0);
    normal(m.rel_bias, dm);
    m.final_ln.fill_(1.0);
    for (Layer& l : m.layers) {
        normal(l.q, std::pow(double(c.d_model * c.d_kv), -0.5));
        normal(l.k, dm);
        normal(l.v, dm);
        normal(l.o, std::pow(double(c.num_heads * c.d_kv), -0.5));
        normal(l.wi_0, dm);
        if (l.wi_1.defined()) normal(l.wi_1, dm);
        normal(l.wo, std::pow(double(c.d_ff), -0.5));
        l.ln_attn.fill_(1.0);
        l.ln_ff.fill_(1.0);
    }
}

torch::nn::Module& T5Encoder::module() {
    return *impl_->root;
}
const torch::nn::Module& T5Encoder::module() const {
    return *impl_->root;
}
std::shared_ptr<torch::nn::Module> T5Encoder::module_ptr() const {
    return impl_->root;
}

void T5Encoder::set_trainable(bool trainable) {
    for (auto& p : impl_->root->parameters()) p.set_requires_grad(trainable);
}

}  // namespace varscope
