#include "core/models/mar.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/io/json_fields.h"
#include "core/io/module_binding.h"

namespace varscope {
namespace {

at::Tensor linear(const torch::nn::Linear& l, const at::Tensor& x) {
    return at::linear(x, l->weight, l->bias);
}

const at::Tensor& require(const StateDict& d, const std::string& name) {
    auto it = d.find(name);
    if (it == d.end()) throw CheckpointError("MAR checkpoint: missing tensor '" + name + "'");
    return it->second;
}

int64_t count_blocks(const StateDict& d, const std::string& prefix, const std::string& leaf) {
    int64_t n = 0;
    while (d.count(prefix + std::to_string(n) + leaf)) ++n;
    return n;
}

// The official presets' head counts (64 channels per head up to 1024, 16 heads for huge).
int64_t heads_for_width(int64_t width) {
    if (width == 1280) return 16;
    return width % 64 == 0 ? width / 64 : 1;
}

torch::nn::LayerNorm layer_norm(int64_t dim, double eps) {
    return torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim}).eps(eps));
}

// (R, n, C) rows of `x` (R, L, C) at `index` (R, n).
at::Tensor gather_rows(const at::Tensor& x, const at::Tensor& index) {
    return x.gather(1, index.unsqueeze(-1).expand({-1, -1, x.size(2)}));
}

}  // namespace

// ----------------------------------------------------------------------------- MarConfig

namespace {
// The released sizes: encoder and decoder of one width, depth and head count.
MarConfig released_size(int64_t width, int64_t depth, int64_t heads, int64_t diffloss_d,
                        int64_t diffloss_w) {
    MarConfig c;
    c.encoder_embed_dim = c.decoder_embed_dim = width;
    c.encoder_depth = c.decoder_depth = depth;
    c.encoder_num_heads = c.decoder_num_heads = heads;
    c.diffloss_d = diffloss_d;
    c.diffloss_w = diffloss_w;
    return c;
}
}  // namespace

MarConfig MarConfig::base() {
    return released_size(768, 12, 12, 6, 1024);
}

MarConfig MarConfig::large() {
    return released_size(1024, 16, 16, 8, 1280);
}

MarConfig MarConfig::huge() {
    return released_size(1280, 20, 16, 12, 1536);
}

MarConfig MarConfig::named(const std::string& name) {
    if (name == "mar_base" || name == "base") return base();
    if (name == "mar_large" || name == "large") return large();
    if (name == "mar_huge" || name == "huge") return huge();
    throw std::invalid_argument("MAR config: unknown preset '" + name +
                                "' (mar_base, mar_large or mar_huge)");
}

void MarConfig::validate() const {
    auto fail = [](const std::string& m) { throw std::invalid_argument("MAR config: " + m); };
    // Upper bounds far above any MAR (MAR-H: width 1280, 20 + 20 blocks, 256 px) that stop a
    // typo from allocating hundreds of GB (class_num 2e9).
    auto in_range = [&](const char* n, int64_t v, int64_t hi) {
        if (v < 1 || v > hi)
            fail(std::string(n) + " must be in [1, " + std::to_string(hi) + "], got " +
                 std::to_string(v));
    };
    in_range("img_size", img_size, 4096);
    in_range("vae_stride", vae_stride, 64);
    in_range("patch_size", patch_size, 64);
    in_range("encoder_embed_dim", encoder_embed_dim, 16384);
    in_range("decoder_embed_dim", decoder_embed_dim, 16384);
    in_range("encoder_depth", encoder_depth, 256);
    in_range("decoder_depth", decoder_depth, 256);
    in_range("vae_embed_dim", vae_embed_dim, 1024);
    in_range("class_num", class_num, 1000000);
    in_range("buffer_size", buffer_size, 4096);
    in_range("diffloss_d", diffloss_d, 256);
    in_range("diffloss_w", diffloss_w, 16384);
    if (!(norm_eps > 0) || !(norm_eps < 1)) fail("norm_eps must be in (0, 1)");
    if (img_size % (vae_stride * patch_size) != 0)
        fail("img_size (" + std::to_string(img_size) + ") must be a multiple of vae_stride * " +
             "patch_size (" + std::to_string(vae_stride * patch_size) + ")");
    if (encoder_num_heads < 1 || encoder_embed_dim % encoder_num_heads != 0)
        fail("encoder_embed_dim (" + std::to_string(encoder_embed_dim) +
             ") must be a multiple of encoder_num_heads (" + std::to_string(encoder_num_heads) +
             ")");
    if (decoder_num_heads < 1 || decoder_embed_dim % decoder_num_heads != 0)
        fail("decoder_embed_dim (" + std::to_string(decoder_embed_dim) +
             ") must be a multiple of decoder_num_heads (" + std::to_string(decoder_num_heads) +
             ")");
    if (!(mlp_ratio > 0)) fail("mlp_ratio must be > 0");
    if (num_sampling_steps.empty()) fail("num_sampling_steps must not be empty");
}

MarConfig MarConfig::infer_from(const StateDict& d) {
    MarConfig c;
    const at::Tensor zp = require(d, "z_proj.weight");  // (Ce, token_dim)
    c.encoder_embed_dim = zp.size(0);
    c.vae_embed_dim = zp.size(1);
    c.patch_size = 1;
    c.decoder_embed_dim = require(d, "decoder_embed.weight").size(0);
    c.encoder_depth = count_blocks(d, "encoder_blocks.", ".attn.qkv.weight");
    c.decoder_depth = count_blocks(d, "decoder_blocks.", ".attn.qkv.weight");
    if (c.encoder_depth == 0 || c.decoder_depth == 0)
        throw CheckpointError(
            "MAR checkpoint: no 'encoder_blocks.0.attn.qkv.weight' or "
            "'decoder_blocks.0.attn.qkv.weight'");
    c.encoder_num_heads = heads_for_width(c.encoder_embed_dim);
    c.decoder_num_heads = heads_for_width(c.decoder_embed_dim);
    c.mlp_ratio = static_cast<double>(require(d, "encoder_blocks.0.mlp.fc1.weight").size(0)) /
                  static_cast<double>(c.encoder_embed_dim);
    c.class_num = require(d, "class_emb.weight").size(0);
    const int64_t seq_len = require(d, "diffusion_pos_embed_learned").size(1);
    const int64_t side = static_cast<int64_t>(std::llround(std::sqrt(double(seq_len))));
    if (side * side != seq_len)
        throw CheckpointError("MAR checkpoint: diffusion_pos_embed_learned has " +
                              std::to_string(seq_len) + " positions, not a square token map");
    c.img_size = side * c.vae_stride * c.patch_size;
    c.buffer_size = require(d, "encoder_pos_embed_learned").size(1) - seq_len;
    if (c.buffer_size < 1)
        throw CheckpointError("MAR checkpoint: encoder_pos_embed_learned has no buffer positions");
    c.diffloss_w = require(d, "diffloss.net.input_proj.weight").size(0);
    c.diffloss_d = count_blocks(d, "diffloss.net.res_blocks.", ".in_ln.weight");
    c.validate();
    return c;
}

nlohmann::json MarConfig::to_json() const {
    return {{"img_size", img_size},
            {"vae_stride", vae_stride},
            {"patch_size", patch_size},
            {"encoder_embed_dim", encoder_embed_dim},
            {"encoder_depth", encoder_depth},
            {"encoder_num_heads", encoder_num_heads},
            {"decoder_embed_dim", decoder_embed_dim},
            {"decoder_depth", decoder_depth},
            {"decoder_num_heads", decoder_num_heads},
            {"mlp_ratio", mlp_ratio},
            {"norm_eps", norm_eps},
            {"vae_embed_dim", vae_embed_dim},
            {"class_num", class_num},
            {"buffer_size", buffer_size},
            {"diffloss_d", diffloss_d},
            {"diffloss_w", diffloss_w},
            {"num_sampling_steps", num_sampling_steps}};
}

MarConfig MarConfig::from_json(const nlohmann::json& j) {
    if (!j.is_object()) throw std::invalid_argument("MAR config: expected a JSON object");
    require_known_fields(j, MarConfig{}.to_json(), "MAR config", {"preset"});  // "depthh" ran MAR-B
    MarConfig c;
    if (j.contains("preset")) {
        if (!j.at("preset").is_string())
            throw std::invalid_argument("MAR config: field 'preset' must be a name");
        c = named(j.at("preset").get<std::string>());
    }
    auto get = [&](const char* key, auto& field) {
        read_json_field(j, key, field, "MAR config: field ");
    };
    get("img_size", c.img_size);
    get("vae_stride", c.vae_stride);
    get("patch_size", c.patch_size);
    get("encoder_embed_dim", c.encoder_embed_dim);
    get("encoder_depth", c.encoder_depth);
    get("encoder_num_heads", c.encoder_num_heads);
    get("decoder_embed_dim", c.decoder_embed_dim);
    get("decoder_depth", c.decoder_depth);
    get("decoder_num_heads", c.decoder_num_heads);
    get("mlp_ratio", c.mlp_ratio);
    get("norm_eps", c.norm_eps);
    get("vae_embed_dim", c.vae_embed_dim);
    get("class_num", c.class_num);
    get("buffer_size", c.buffer_size);
    get("diffloss_d", c.diffloss_d);
    get("diffloss_w", c.diffloss_w);
    get("num_sampling_steps", c.num_sampling_steps);
    c.validate();
    return c;
}

// ----------------------------------------------------------------------------- blocks

MarAttentionImpl::MarAttentionImpl(int64_t dim, int64_t num_heads)
    : num_heads_(num_heads), head_dim_(dim / num_heads) {
    qkv = register_module("qkv", torch::nn::Linear(dim, 3 * dim));
    proj = register_module("proj", torch::nn::Linear(dim, dim));
    scale_ = 1.0 / std::sqrt(static_cast<double>(head_dim_));
}

Qkv MarAttentionImpl::project_qkv(const at::Tensor& x) const {
    const int64_t B = x.size(0), L = x.size(1);
    auto parts =
        linear(qkv, x).view({B, L, 3, num_heads_, head_dim_}).permute({2, 0, 3, 1, 4}).unbind(0);
    return {parts[0], parts[1], parts[2]};
}

at::Tensor MarAttentionImpl::project_out(const at::Tensor& o) const {
    const int64_t B = o.size(0), L = o.size(2);
    return linear(proj, o.transpose(1, 2).reshape({B, L, num_heads_ * head_dim_}));
}

MarMlpImpl::MarMlpImpl(int64_t dim, int64_t hidden) {
    fc1 = register_module("fc1", torch::nn::Linear(dim, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, dim));
}

at::Tensor MarMlpImpl::forward(const at::Tensor& x) const {
    return linear(fc2, at::gelu(linear(fc1, x)));
}

MarBlockImpl::MarBlockImpl(int64_t dim, int64_t num_heads, double mlp_ratio, double eps) {
    norm1 = register_module("norm1", layer_norm(dim, eps));
    attn = register_module("attn", MarAttention(dim, num_heads));
    norm2 = register_module("norm2", layer_norm(dim, eps));
    mlp = register_module("mlp", MarMlp(dim, static_cast<int64_t>(dim * mlp_ratio)));
}

at::Tensor MarBlockImpl::mlp_residual(const at::Tensor& x) const {
    return x + mlp->forward(apply_layer_norm(norm2, x));
}

at::Tensor MarBlockImpl::forward(const at::Tensor& x) const {
    auto qkv = attn->project_qkv(attn_input(x));
    auto o = attention_sdpa(qkv.q, qkv.k, qkv.v, attn->softmax_scale());
    return mlp_residual(x + attn->project_out(o));
}

// ----------------------------------------------------------------------------- transformer

MarTransformerImpl::MarTransformerImpl(MarConfig cfg) : cfg_(std::move(cfg)) {
    cfg_.validate();
    const int64_t Ce = cfg_.encoder_embed_dim, Cd = cfg_.decoder_embed_dim;
    const int64_t total = cfg_.total_len();
    class_emb = register_module("class_emb", torch::nn::Embedding(cfg_.class_num, Ce));
    fake_latent = register_parameter("fake_latent", at::zeros({1, Ce}));
    z_proj = register_module("z_proj", torch::nn::Linear(cfg_.token_embed_dim(), Ce));
    z_proj_ln = register_module("z_proj_ln", layer_norm(Ce, 1e-6));
    encoder_pos_embed_learned =
        register_parameter("encoder_pos_embed_learned", at::zeros({1, total, Ce}));
    encoder_blocks = register_module("encoder_blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < cfg_.encoder_depth; ++i) {
        encoder_handles_.emplace_back(Ce, cfg_.encoder_num_heads, cfg_.mlp_ratio, cfg_.norm_eps);
        encoder_blocks->push_back(encoder_handles_.back());
    }
    encoder_norm = register_module("encoder_norm", layer_norm(Ce, cfg_.norm_eps));
    decoder_embed = register_module("decoder_embed", torch::nn::Linear(Ce, Cd));
    mask_token = register_parameter("mask_token", at::zeros({1, 1, Cd}));
    decoder_pos_embed_learned =
        register_parameter("decoder_pos_embed_learned", at::zeros({1, total, Cd}));
    decoder_blocks = register_module("decoder_blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < cfg_.decoder_depth; ++i) {
        decoder_handles_.emplace_back(Cd, cfg_.decoder_num_heads, cfg_.mlp_ratio, cfg_.norm_eps);
        decoder_blocks->push_back(decoder_handles_.back());
    }
    decoder_norm = register_module("decoder_norm", layer_norm(Cd, cfg_.norm_eps));
    diffusion_pos_embed_learned =
        register_parameter("diffusion_pos_embed_learned", at::zeros({1, cfg_.seq_len(), Cd}));
    diffloss = register_module(
        "diffloss", DiffLoss(cfg_.token_embed_dim(), Cd, cfg_.diffloss_d, cfg_.diffloss_w));
}

void MarTransformerImpl::load(const StateDict& dict, const std::string& what) {
    BindOptions opt;
    opt.what = what;
    bind_state_dict(*this, dict, opt);
}

void MarTransformerImpl::init_weights(uint64_t seed, bool nonzero_head) {
    at::NoGradGuard g;
    auto gen = at::detail::createCPUGenerator(seed);
    auto fill = [&](at::Tensor t, auto&& draw) {
        auto tmp = at::empty(t.sizes(), at::TensorOptions(at::kFloat));
        draw(tmp);
        t.copy_(tmp);
    };
    auto normal = [&](at::Tensor t, double std) {
        fill(t, [&](at::Tensor& u) { u.normal_(0.0, std, gen); });
    };
    auto xavier = [&](torch::nn::LinearImpl& l) {
        const double bound = std::sqrt(6.0 / double(l.weight.size(0) + l.weight.size(1)));
        fill(l.weight, [&](at::Tensor& u) { u.uniform_(-bound, bound, gen); });
        if (l.bias.defined()) l.bias.zero_();
    };
    normal(class_emb->weight, 0.02);
    normal(fake_latent, 0.02);
    normal(mask_token, 0.02);
    normal(encoder_pos_embed_learned, 0.02);
    normal(decoder_pos_embed_learned, 0.02);
    normal(diffusion_pos_embed_learned, 0.02);
    for (auto& m : modules(/*include_self=*/false)) {
        if (auto* l = m->as<torch::nn::LinearImpl>()) {
            xavier(*l);
        } else if (auto* n = m->as<torch::nn::LayerNormImpl>()) {
            if (n->weight.defined()) n->weight.fill_(1.0);
            if (n->bias.defined()) n->bias.zero_();
        }
    }
    // DiffLoss: timestep MLP normal(0.02); modulation and output layers zero (official), or
    // small random values for a head that is not identically zero.
    auto& net = *diffloss->net;
    normal(net.time_embed->mlp[0]->as<torch::nn::Linear>()->weight, 0.02);
    normal(net.time_embed->mlp[2]->as<torch::nn::Linear>()->weight, 0.02);
    auto head_layer = [&](torch::nn::LinearImpl& l) {
        if (nonzero_head) {
            normal(l.weight, 0.02);
            normal(l.bias, 0.02);
        } else {
            l.weight.zero_();
            l.bias.zero_();
        }
    };
    for (const auto& b : *net.res_blocks)
        head_layer(*b->as<DiffResBlockImpl>()->adaLN_modulation[1]->as<torch::nn::Linear>());
    head_layer(*net.final_layer->adaLN_modulation[1]->as<torch::nn::Linear>());
    head_layer(*net.final_layer->linear);
}

at::Tensor MarTransformerImpl::class_embedding(const at::Tensor& labels) const {
    auto idx = labels.clamp_min(0);
    auto emb = at::embedding(class_emb->weight, idx);
    auto fake = fake_latent.expand({labels.size(0), -1});
    return at::where(labels.lt(0).unsqueeze(1), fake, emb);
}

at::Tensor MarTransformerImpl::encoder_input(const at::Tensor& tokens, const at::Tensor& known,
                                             const at::Tensor& cls) const {
    const int64_t R = tokens.size(0), buf = cfg_.buffer_size, Ce = cfg_.encoder_embed_dim;
    const auto pos = encoder_pos_embed_learned.squeeze(0);
    auto buffer_part = cls.unsqueeze(1).expand({R, buf, Ce}) + pos.narrow(0, 0, buf).unsqueeze(0);
    auto known_tokens = gather_rows(tokens.to(z_proj->weight.scalar_type()), known);
    auto token_part = linear(z_proj, known_tokens) + at::embedding(pos, known + buf);
    return apply_layer_norm(z_proj_ln, at::cat({buffer_part, token_part}, 1));
}

at::Tensor MarTransformerImpl::decoder_input(const at::Tensor& encoded,
                                             const at::Tensor& known) const {
    const int64_t R = encoded.size(0), buf = cfg_.buffer_size, Cd = cfg_.decoder_embed_dim;
    auto x = linear(decoder_embed, encoded);
    auto index =
        at::cat({at::arange(buf, known.options()).unsqueeze(0).expand({R, buf}), known + buf}, 1);
    auto padded = mask_token.expand({R, cfg_.total_len(), Cd})
                      .scatter(1, index.unsqueeze(-1).expand({-1, -1, Cd}), x);
    return padded + decoder_pos_embed_learned;
}

at::Tensor MarTransformerImpl::decoder_output(const at::Tensor& x) const {
    auto normed = apply_layer_norm(decoder_norm, x);
    return normed.narrow(1, cfg_.buffer_size, cfg_.seq_len()) + diffusion_pos_embed_learned;
}

at::Tensor MarTransformerImpl::forward_encoder(const at::Tensor& tokens, const at::Tensor& mask,
                                               const at::Tensor& cls) const {
    auto x = encoder_input(tokens, known_positions_from_mask(mask), cls);
    for (const auto& b : encoder_handles_) x = b->forward(x);
    return apply_layer_norm(encoder_norm, x);
}

at::Tensor MarTransformerImpl::forward_decoder(const at::Tensor& encoded,
                                               const at::Tensor& mask) const {
    auto x = decoder_input(encoded, known_positions_from_mask(mask));
    for (const auto& b : decoder_handles_) x = b->forward(x);
    return decoder_output(x);
}

at::Tensor known_positions_from_mask(const at::Tensor& mask) {
    const int64_t R = mask.size(0);
    auto known = mask.eq(0);
    auto counts = known.sum(1);
    const int64_t K = counts[0].item<int64_t>();
    TORCH_CHECK(counts.eq(K).all().item<bool>(),
                "MAR: every row of the mask must leave the same number of tokens known");
    // nonzero() lists positions row-major, i.e. ascending within each row.
    return at::nonzero(known).select(1, 1).view({R, K});
}

}  // namespace varscope
