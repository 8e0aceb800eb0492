// The Infinity transformer (FoundationVision/Infinity, issue #32): text-to-image next-scale
// prediction of bits. Built for the released 2B/8B settings: shared AdaLN, cosine self-attention
// with a 2-D RoPE per scale laid out on the final grid (rope2d_normalized_by_hw = 2), the level
// embedding added before the first block only, cross-attention to T5 features, and the bitwise
// head (V = 2 x codebook_dim logits: one pair per bit). Parameter names equal the official ones
// ("blocks.<i>." here; the released files' "block_chunks.<c>.module.<j>." are renamed on load).
//
// Precision follows the official fp32 path: the residual stream, norms and self-attention in
// fp32; cross-attention (and the text pooling) gets bf16-rounded queries, keys and values and
// returns a bf16-rounded output, as the official code casts fp32 inputs for flash-attn's varlen
// kernel. use_autocast_bf16() switches to the official bf16 mode. Variable text lengths: the
// official packed (kv_compact, cu_seqlens) rows become a padded batch with an additive key mask
// (the same softmax: masked keys weigh exactly zero).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <nlohmann/json_fwd.hpp>
#include <vector>

#include "core/io/state_dict.h"
#include "core/models/infinity_schedule.h"
#include "core/models/var.h"  // SelfAttention, FeedForward, AdaLNBeforeHead, AttendFn
#include "kernels/exec_policy.h"

namespace varscope {

struct InfinityConfig {
    int64_t depth = 32;
    int64_t embed_dim = 2048;  // C (= the condition width D)
    int64_t num_heads = 16;
    int64_t mlp_hidden = 8192;     // round(C * mlp_ratio / 256) * 256 in the official builder
    int64_t text_channels = 2048;  // Ct5 (flan-t5-xl)
    int64_t text_maxlen = 512;     // rows of cfg_uncond
    int64_t pool_heads = 16;    // heads of the attentive text pool (Ct5 / 128, or / 64 if C > 4096)
    int64_t codebook_dim = 32;  // d: bits per token
    int64_t num_levels = 15;    // rows of lvl_embed
    double norm_eps = 1e-6;

    int64_t head_dim() const { return embed_dim / num_heads; }
    int64_t vocab() const { return 2 * codebook_dim; }  // logits per token: a pair per bit

    static InfinityConfig infinity_2b();  // depth 32, width 2048, 16 heads
    static InfinityConfig infinity_8b();  // depth 40, width 3584, 28 heads
    // Reads the architecture off tensor shapes (official names, either block layout);
    // CheckpointError naming `what` and the tensor.
    static InfinityConfig infer_from(const StateDict& dict, const std::string& what = "checkpoint");
    void validate() const;  // std::invalid_argument naming the field
    nlohmann::json to_json() const;
};

// Text features as the official encode_prompt packs them: the rows' T5 features concatenated
// (sum(lens), Ct5) and each row's length.
struct InfinityText {
    at::Tensor kv_compact;
    std::vector<int64_t> lens;
    int64_t batch() const { return static_cast<int64_t>(lens.size()); }
};

// Keys and values of one block's cross-attention (B, H, Lt, c), computed once per call.
struct CrossKv {
    at::Tensor k, v;
};

// What the text gives every step of a call.
struct InfinityCondition {
    at::Tensor cond_BD;    // (B, C) the pooled text: the start token and the head's condition
    at::Tensor gss;        // (B, 1, 6, C) the shared AdaLN projection
    at::Tensor text;       // (B, Lt, C) text_proj_for_ca of the padded text
    at::Tensor text_mask;  // (B, 1, 1, Lt) additive (0 / -inf) over padded text; undefined if none
    std::vector<CrossKv> cross;  // per block
};

// Cross-attention to a padded text batch. Pool mode (text_proj_for_sos): one learnt query per
// head (mat_q is then a parameter (1, H, c)).
class InfinityCrossAttentionImpl : public torch::nn::Module {
  public:
    InfinityCrossAttentionImpl(int64_t embed_dim, int64_t kv_dim, int64_t num_heads, bool pool);
    CrossKv keys_values(const at::Tensor& text_BLC) const;  // (B, Lt, kv_dim) -> BHLc each
    // q_BLC (B, Lq, C) (ignored in pool mode: pass undefined); returns (B, Lq, C) after proj.
    // forward = output(attend(queries(q_BLC, B), kv, mask)): the pieces let the sampling loop's
    // cost model time the attention kernel apart from the projections.
    at::Tensor forward(const at::Tensor& q_BLC, const CrossKv& kv, const at::Tensor& mask) const;
    at::Tensor queries(const at::Tensor& q_BLC, const CrossKv& kv) const;  // (B, H, Lq, c)
    // The attention over the text (bf16 operand values, fp32 arithmetic): (B, H, Lq, c).
    at::Tensor attend(const at::Tensor& q, const CrossKv& kv, const at::Tensor& mask) const;
    // The same with the keys and values given as those values already (bf16_values of kv).
    at::Tensor attend_values(const at::Tensor& q, const CrossKv& values,
                             const at::Tensor& mask) const;
    static CrossKv values_of(const CrossKv& kv);        // kv's bf16 values in fp32
    at::Tensor output(const at::Tensor& o_BHLc) const;  // bf16-rounded, (B, Lq, C) after proj

    torch::nn::Linear mat_q_lin{nullptr}, mat_kv{nullptr}, proj{nullptr};
    at::Tensor mat_q_pool, v_bias, zero_k_bias;

  private:
    int64_t heads_, head_dim_;
    bool pool_;
};
TORCH_MODULE(InfinityCrossAttention);

// One CrossAttnBlock: x + g1 * SA(adaLN(x)); x + CA(LN(x), text); x + g2 * FFN(adaLN(x)).
// What a block's step needs that depends only on the text and the weights: made once per
// sampling call (the CUDA-graph prologue, or eagerly) instead of in every block of every step,
// as VAR's BlockConstants are. At Infinity-2B b1 the small scales are bound by launches (~43 per
// block and step); these are about ten of them.
struct InfinityBlockConstants {
    Modulation m;
    at::Tensor scale1p, scale2p;    // 1 + scale
    at::Tensor qkv_bias, q_mul;     // the QKV bias; exp(min(scale_mul, log 100)) in fp32
    at::Tensor ca_weight, ca_bias;  // ca_norm's affine in fp32 (own copies)
    CrossKv text;                   // the text's keys and values (the product's dtype)
    CrossKv text_values;            // the same as the fp32 values the text attention reads
    // The tensors in a fixed order (the graph prologue's outputs) and back.
    std::vector<at::Tensor> tensors() const;
    static InfinityBlockConstants from_tensors(const at::Tensor* t);
    static constexpr size_t kTensors = 16;
};

class InfinityBlockImpl : public torch::nn::Module {
  public:
    explicit InfinityBlockImpl(const InfinityConfig& cfg);
    // This block's constants for its modulation `m` (modulation(gss) of the model's own block:
    // a streaming slot holds no ada_gss) and the text keys/values `text` (its own
    // ca->keys_values); computed from the weights now (a streamed block's slot changes later).
    InfinityBlockConstants constants(Modulation m, CrossKv text) const;
    Modulation modulation(
        const at::Tensor& gss) const;  // gamma1, gamma2, scale1, scale2, shift1, shift2
    at::Tensor sa_input(const at::Tensor& x, const Modulation& m) const;  // LN(x) * (1 + s1) + t1
    // Queries and keys with the 2-D RoPE applied (rope: (2, L, c/2) cos and sin), values.
    // On CUDA with fp32 q/k the rotation (and the bf16 cast under autocast) is one kernel
    // (kernels/rope.h) unless `policy` switches it off (fused_rope, reference); same bits.
    // pre_cast: x_in is sa_input already rounded to the bf16 weights (attention_inputs).
    Qkv project_qkv(const at::Tensor& x_in, const at::Tensor& rope,
                    const kernels::KernelPolicy& policy = {}, bool pre_cast = false) const;
    // project_qkv(sa_input(x, m), rope, policy), with the modulation and the bf16 cast of the
    // QKV product as one kernel where kernels/modulate.h runs (bf16 weights, CUDA, `policy`);
    // same bits. The sampling loop's path.
    Qkv attention_inputs(const at::Tensor& x, const InfinityBlockConstants& k,
                         const at::Tensor& rope, const kernels::KernelPolicy& policy = {}) const;
    at::Tensor cross_branch(const at::Tensor& x, const CrossKv& kv, const at::Tensor& mask) const;
    // cross_branch = ca->forward(cross_input(x), kv, mask) in fp32: ca_norm(x) in fp32.
    at::Tensor cross_input(const at::Tensor& x) const;
    // The same with ca_norm's fp32 affine from the constants (no casts per step).
    at::Tensor cross_input(const at::Tensor& x, const InfinityBlockConstants& k) const;
    at::Tensor ffn_branch(const at::Tensor& x, const Modulation& m) const;  // g2 * FFN(adaLN(x))
    at::Tensor sa_output(const at::Tensor& o_BHLc, const Modulation& m) const;  // g1 * proj(o)
    // x + sa_output(o, m) and x + ffn_branch(x, m): with `fuse`, adaLN and fc1's bf16 cast as
    // one kernel (kernels/modulate.h) and, for an fp32 x and bf16 products, the gate and the
    // sum as one kernel (kernels/gated_residual.h); same bits. The sampling loop's path.
    at::Tensor sa_residual(const at::Tensor& x, const at::Tensor& o_BHLc, const Modulation& m,
                           const kernels::KernelPolicy* fuse = nullptr) const;
    at::Tensor ffn_residual(const at::Tensor& x, const InfinityBlockConstants& k,
                            const kernels::KernelPolicy* fuse = nullptr) const;
    // The whole block; `attend` maps (q, k, v) of this block's tokens to the attention output
    // (the KV cache and the mask are the caller's).
    at::Tensor forward(const at::Tensor& x, const at::Tensor& gss, const CrossKv& kv,
                       const at::Tensor& text_mask, const at::Tensor& rope,
                       const AttendFn& attend) const;

    SelfAttention sa{nullptr};
    InfinityCrossAttention ca{nullptr};
    FeedForward ffn{nullptr};
    torch::nn::LayerNorm ca_norm{nullptr};
    at::Tensor ada_gss;

  private:
    // project_qkv with the QKV bias and the head scales given.
    Qkv rotated_qkv(const at::Tensor& x_in, const at::Tensor& qkv_bias, const at::Tensor& q_mul,
                    const at::Tensor& rope, const kernels::KernelPolicy& policy,
                    bool pre_cast) const;
    at::Tensor q_mul() const;  // exp(min(scale_mul, log 100)) in fp32

    int64_t dim_;
    double eps_;
};
TORCH_MODULE(InfinityBlock);

// Applies the rotary embedding to q or k (B, H, L, c) with rope (2, L, c/2), or (2, B, L, c/2)
// per batch row: adjacent pairs
// (x0, x1) -> (cos x0 - sin x1, sin x0 + cos x1).
at::Tensor apply_rope2d(const at::Tensor& x, const at::Tensor& rope);
// The official RoPE of a schedule (mode 2: each scale's grid sampled on the template's final
// grid), (2, total_tokens, head_dim / 2) float on `device`.
at::Tensor infinity_rope(const InfinitySchedule& schedule, int64_t head_dim,
                         const at::Device& device = at::kCPU);
// The block-causal additive mask (1, 1, L, L) of a schedule: a token sees its scale and earlier.
at::Tensor infinity_causal_mask(const InfinitySchedule& schedule,
                                const at::Device& device = at::kCPU);

class InfinityTransformerImpl : public torch::nn::Module {
  public:
    explicit InfinityTransformerImpl(InfinityConfig cfg);
    const InfinityConfig& config() const { return cfg_; }

    // Binds an official-layout state dict; CheckpointError names `what` and every bad tensor.
    void load(const StateDict& dict, const std::string& what);
    using torch::nn::Module::load;  // keeps the archive overload visible
    // Random weights in the official init's spirit (truncated normals, zero biases, the
    // official cfg_uncond), for benchmarks and tests.
    void init_weights(uint64_t seed);
    // The official bf16 mode (run_infinity.py's bf16=1: every block's parameters in bf16, the
    // sampler under torch.autocast(bfloat16)): blocks become bf16, and the weights autocast
    // casts per op outside them (word_embed, text_proj_for_ca, the text pool's projections)
    // get their bf16 copies; the head, its AdaLN, shared_ada_lin (autocast disabled in the
    // official code) and the embeddings stay fp32. The residual stream stays fp32: layer
    // norms, modulation and residual adds in fp32; q/k normalised and rotated in fp32, then
    // rounded; matrix products, self-attention and the KV cache in bf16; cross-attention in
    // fp32 on bf16 operands (flash-attn's varlen kernel). Call on an fp32 model on its device.
    void use_autocast_bf16();
    bool autocast_bf16() const { return autocast_; }
    // Matrix products and the KV cache: bf16 under autocast, else the weights' dtype.
    at::ScalarType compute_dtype() const;

    // The official CFG batch: the rows followed by the same rows with their text replaced by
    // cfg_uncond[:len] (or by `negative` when given: one negative row per row).
    InfinityText with_unconditional(const InfinityText& text,
                                    const InfinityText* negative = nullptr) const;
    // text_norm, the attentive pool, text_proj_for_ca, shared AdaLN and per-block keys/values
    // (block_keys = false leaves `cross` empty: the CUDA-graph path makes them in its prologue).
    InfinityCondition condition(const InfinityText& text, bool block_keys = true) const;

    // The first scale's input (B, 1, C): pooled text + pos_start.
    at::Tensor start_tokens(const InfinityCondition& c) const;
    at::Tensor level_embedding(int64_t scale) const;  // (1, 1, C)
    // word_embed of the next scale's input tokens (B, l, d) -> (B, l, C).
    at::Tensor embed_tokens(const at::Tensor& x_Bld) const;
    // The sampler's input of scale `scale` > 0 (official autoregressive_infer_cfg): word_embed
    // of the codes (B, l, d), repeated `repeat` times along the batch (the CFG halves), plus the
    // level embedding, added in place as the official code does: under autocast (bf16 word
    // embedding) the sum stays bf16.
    at::Tensor next_scale_input(const at::Tensor& x_Bld, int64_t scale, int64_t repeat) const;
    at::Tensor logits(const at::Tensor& h, const at::Tensor& cond_BD) const;  // float (B, l, V)

    // Teacher-forced forward over all scales with the block-causal mask, as the official
    // Infinity.forward: x_BLC_wo_prefix (B, L - 1, d) are the next-scale inputs. Float (B, L, V).
    at::Tensor forward_teacher(const InfinityText& text, const at::Tensor& x_BLC_wo_prefix,
                               const InfinitySchedule& schedule,
                               bool eager_attention = false) const;

    at::Tensor cfg_uncond, pos_start;
    at::Tensor text_norm_weight;  // "text_norm.weight" (the official FastRMSNorm)
    torch::nn::Sequential text_proj_for_ca{nullptr};  // Linear, GELU(tanh), Linear
    torch::nn::Embedding lvl_embed{nullptr};
    torch::nn::Linear word_embed{nullptr}, head{nullptr};
    torch::nn::Sequential shared_ada_lin{nullptr};  // SiLU, Linear(C, 6C)
    torch::nn::ModuleList blocks{nullptr};
    AdaLNBeforeHead head_nm{nullptr};

    const InfinityBlockImpl& block(int64_t i) const { return *block_handles_.at(i); }
    // text_proj_for_sos.ca: the attentive text pool.
    const InfinityCrossAttentionImpl& pool() const { return *pool_; }

  private:
    InfinityConfig cfg_;
    bool autocast_ = false;
    std::vector<InfinityBlock> block_handles_;
    InfinityCrossAttention pool_{nullptr};
    torch::nn::Linear ca_fc1_{nullptr}, ca_fc2_{nullptr}, shared_fc_{nullptr};
};
TORCH_MODULE(InfinityTransformer);

// An official state dict with "block_chunks.<c>.module.<j>." renamed to "blocks.<i>." (other
// names unchanged); CheckpointError naming `what` when the chunks are uneven.
StateDict infinity_canonical_names(const StateDict& dict, const std::string& what);

// A model with random weights (init_weights(seed)).
InfinityTransformer random_infinity(const InfinityConfig& cfg, uint64_t seed);

}  // namespace varscope
