// The MAR transformer (LTH14/mar, "Autoregressive Image Generation without Vector
// Quantization"): an MAE-style encoder over the known tokens (plus a buffer of class-embedding
// slots), a decoder over all positions with learned mask tokens, and the DiffLoss head that
// samples each token's continuous latent with a small diffusion MLP. Parameter names equal the
// official state-dict names, so official checkpoints bind unchanged.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/io/state_dict.h"
#include "core/models/diffloss.h"
#include "core/models/var.h"  // Qkv, attention_sdpa / attention_eager

namespace varscope {

struct MarConfig {
    int64_t img_size = 256;
    int64_t vae_stride = 16;
    int64_t patch_size = 1;
    int64_t encoder_embed_dim = 1024;
    int64_t encoder_depth = 16;
    int64_t encoder_num_heads = 16;
    int64_t decoder_embed_dim = 1024;
    int64_t decoder_depth = 16;
    int64_t decoder_num_heads = 16;
    double mlp_ratio = 4.0;
    double norm_eps = 1e-6;  // every LayerNorm of the official presets
    int64_t vae_embed_dim = 16;
    int64_t class_num = 1000;
    int64_t buffer_size = 64;  // class-embedding slots in front of the token sequence
    int64_t diffloss_d = 3;
    int64_t diffloss_w = 1024;
    std::string num_sampling_steps = "100";  // diffusion respacing ("100", "50,50", "ddim25")

    int64_t seq_h() const { return img_size / vae_stride / patch_size; }
    int64_t seq_len() const { return seq_h() * seq_h(); }
    int64_t token_embed_dim() const { return vae_embed_dim * patch_size * patch_size; }
    int64_t total_len() const { return buffer_size + seq_len(); }  // encoder/decoder positions

    // The official presets with the DiffLoss sizes of the released checkpoints (README):
    // base d6 w1024, large d8 w1280, huge d12 w1536.
    static MarConfig base();
    static MarConfig large();
    static MarConfig huge();
    // "mar_base" | "mar_large" | "mar_huge" (also "base", "large", "huge").
    static MarConfig named(const std::string& name);
    // Architecture from tensor names and shapes (heads: the official presets' 64 per head for
    // widths 768/1024, 16 heads for 1280; other widths get width/64).
    static MarConfig infer_from(const StateDict& dict);
    void validate() const;  // std::invalid_argument naming the bad field

    nlohmann::json to_json() const;
    static MarConfig from_json(const nlohmann::json& j);
};

// timm's ViT block (pre-norm attention + GELU MLP) with the official MAR names:
// norm1, attn.qkv, attn.proj, norm2, mlp.fc1, mlp.fc2.
class MarAttentionImpl : public torch::nn::Module {
  public:
    MarAttentionImpl(int64_t dim, int64_t num_heads);
    Qkv project_qkv(const at::Tensor& x_BLC) const;          // (B, H, L, d) each
    at::Tensor project_out(const at::Tensor& o_BHLd) const;  // merge heads + proj
    double softmax_scale() const { return scale_; }
    int64_t num_heads() const { return num_heads_; }
    torch::nn::Linear qkv{nullptr}, proj{nullptr};

  private:
    int64_t num_heads_, head_dim_;
    double scale_;
};
TORCH_MODULE(MarAttention);

class MarMlpImpl : public torch::nn::Module {
  public:
    MarMlpImpl(int64_t dim, int64_t hidden);
    at::Tensor forward(const at::Tensor& x) const;  // fc2(gelu(fc1(x))), exact GELU
    torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(MarMlp);

class MarBlockImpl : public torch::nn::Module {
  public:
    MarBlockImpl(int64_t dim, int64_t num_heads, double mlp_ratio, double eps);
    at::Tensor attn_input(const at::Tensor& x) const { return apply_layer_norm(norm1, x); }
    // x + mlp(norm2(x)) given the post-attention residual stream.
    at::Tensor mlp_residual(const at::Tensor& x) const;
    // The plain block with dense attention: x + attn(norm1(x)); then the MLP residual.
    at::Tensor forward(const at::Tensor& x) const;

    torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr};
    MarAttention attn{nullptr};
    MarMlp mlp{nullptr};
};
TORCH_MODULE(MarBlock);

class MarTransformerImpl : public torch::nn::Module {
  public:
    explicit MarTransformerImpl(MarConfig cfg);
    const MarConfig& config() const { return cfg_; }

    // Binds an official-layout state dict (errors name every bad tensor).
    void load(const StateDict& dict, const std::string& what);
    using torch::nn::Module::load;  // keeps the archive overload visible
    // The official initialisation (normal 0.02 embeddings, xavier-uniform linears, DiffLoss
    // zero-init of the modulation/output layers unless `nonzero_head`, which gives those layers
    // small random values so that tests and parity runs see a non-trivial head).
    void init_weights(uint64_t seed, bool nonzero_head = false);

    // (R, Ce): class_emb rows for labels >= 0, fake_latent for labels < 0 (unconditional).
    at::Tensor class_embedding(const at::Tensor& labels) const;

    // The encoder's input sequence before its blocks: z_proj(tokens) with the class embedding
    // in the buffer slots, plus positions, z_proj_ln, restricted to the buffer and the known
    // positions. tokens (R, seq_len, D); known (R, K) int64 ascending image positions.
    // Returns (R, buffer + K, Ce).
    at::Tensor encoder_input(const at::Tensor& tokens, const at::Tensor& known,
                             const at::Tensor& class_emb) const;
    // The decoder's input sequence: decoder_embed(encoder output) placed at the buffer and
    // known positions, mask_token elsewhere, plus positions. Returns (R, buffer + seq_len, Cd).
    at::Tensor decoder_input(const at::Tensor& encoded, const at::Tensor& known) const;
    // decoder_norm, drop the buffer, add the diffusion position embedding: z (R, seq_len, Cd).
    at::Tensor decoder_output(const at::Tensor& x) const;

    // Whole encoder / decoder with dense attention and the official mask convention
    // (mask (R, seq_len), nonzero = masked; every row must have the same number masked).
    // For tests and parity; the sampler runs the blocks itself (hooks).
    at::Tensor forward_encoder(const at::Tensor& tokens, const at::Tensor& mask,
                               const at::Tensor& class_emb) const;
    at::Tensor forward_decoder(const at::Tensor& encoded, const at::Tensor& mask) const;

    const MarBlockImpl& encoder_block(int64_t i) const { return *encoder_handles_.at(i); }
    const MarBlockImpl& decoder_block(int64_t i) const { return *decoder_handles_.at(i); }
    const DiffLossImpl& diffusion_head() const { return *diffloss; }

    torch::nn::Embedding class_emb{nullptr};
    at::Tensor fake_latent, encoder_pos_embed_learned, mask_token, decoder_pos_embed_learned,
        diffusion_pos_embed_learned;
    torch::nn::Linear z_proj{nullptr}, decoder_embed{nullptr};
    torch::nn::LayerNorm z_proj_ln{nullptr}, encoder_norm{nullptr}, decoder_norm{nullptr};
    torch::nn::ModuleList encoder_blocks{nullptr}, decoder_blocks{nullptr};
    DiffLoss diffloss{nullptr};

  private:
    MarConfig cfg_;
    std::vector<MarBlock> encoder_handles_, decoder_handles_;
};
TORCH_MODULE(MarTransformer);

// (R, K) int64: the positions where `mask` (R, seq_len) is zero, ascending per row (the order
// of the official boolean indexing). Synchronises (nonzero); the sampler derives them from the
// generation order instead.
at::Tensor known_positions_from_mask(const at::Tensor& mask);

}  // namespace varscope
