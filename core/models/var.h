// The VAR transformer (FoundationVision/VAR): class-conditional next-scale prediction with
// AdaLN self-attention blocks. Parameter and buffer names equal the official state-dict names,
// so official checkpoints bind unchanged.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>

#include <array>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <vector>

#include "core/io/state_dict.h"
#include "kernels/exec_policy.h"

namespace varscope {

struct VarConfig {
    int64_t depth = 16;
    int64_t embed_dim = 1024;
    int64_t num_heads = 16;
    int64_t num_classes = 1000;
    int64_t vocab_size = 4096;
    int64_t cvae = 32;
    double mlp_ratio = 4.0;
    double norm_eps = 1e-6;
    bool shared_aln = false;
    bool attn_l2_norm = true;
    std::vector<int64_t> patch_nums{1, 2, 3, 4, 5, 6, 8, 10, 13, 16};

    int64_t num_scales() const { return static_cast<int64_t>(patch_nums.size()); }
    int64_t first_l() const { return patch_nums.front() * patch_nums.front(); }
    int64_t total_tokens() const;           // L = sum pn^2
    int64_t scale_begin(int64_t si) const;  // first token index of scale si
    int64_t head_dim() const { return embed_dim / num_heads; }

    // The official build_vae_var recipe: heads = depth, width = 64 * depth.
    static VarConfig for_depth(int64_t depth, std::vector<int64_t> patch_nums = {});
    // Reads the architecture off tensor names and shapes; `patch_nums` empty = derive from the
    // number of position embeddings (known 256px / 512px schedules), else it is validated.
    static VarConfig infer_from(const StateDict& dict, const std::vector<int64_t>& patch_nums = {});
    void validate() const;  // throws std::invalid_argument naming the bad field

    nlohmann::json to_json() const;
    static VarConfig from_json(const nlohmann::json& j);
};

// The two official patch schedules.
std::vector<int64_t> patch_nums_256();
std::vector<int64_t> patch_nums_512();

// Queries, keys and values in (B, heads, tokens, head_dim) layout.
struct Qkv {
    at::Tensor q, k, v;
};

// A KV cache's slots for one step's keys and values, (B, H, L, c) (KvCache::next_slots). Where
// the fused q/k normalisation runs, it writes them there in the same pass, and Qkv's k and v are
// those slots (the cache's append then copies nothing).
struct KvSlots {
    at::Tensor k, v;
};

class SelfAttentionImpl : public torch::nn::Module {
  public:
    SelfAttentionImpl(int64_t embed_dim, int64_t num_heads, bool attn_l2_norm);
    Qkv project_qkv(const at::Tensor& x_BLC) const;  // incl. q/k L2 norm and head scales
    // The same with the per-call constants precomputed: qkv_bias() and q_mul().
    // keep_fp32_qk (bf16-autocast only): q and k stay in fp32 after the L2 norm, for a caller
    // that rotates them first (Infinity's RoPE runs in fp32 under autocast) and rounds later.
    // pre_cast (bf16-autocast only): x_BLC is already the weights' bf16, rounded from the fp32
    // stream by the caller (a fused kernel); q and k take autocast's fp32 path all the same.
    // fuse (bf16-autocast, q and k rounded to bf16): the kernel policy under which their
    // normalisation after the norms runs as one kernel (kernels/qk_norm.h); the same values.
    // slots (may be null): where that kernel runs, k and v are written there (see KvSlots).
    Qkv project_qkv(const at::Tensor& x_BLC, const at::Tensor& qkv_bias, const at::Tensor& q_mul,
                    bool keep_fp32_qk = false, bool pre_cast = false,
                    const kernels::KernelPolicy* fuse = nullptr,
                    const KvSlots* slots = nullptr) const;
    at::Tensor qkv_bias() const;  // q_bias | zero_k_bias | v_bias
    at::Tensor q_mul() const;     // exp(min(scale_mul, log 100)); undefined without L2 norm
    at::Tensor project_out(const at::Tensor& o_BHLc) const;  // merge heads + output projection
    // Softmax scale applied to q·k: 1 with L2-normalised q/k (the learnt scale is folded into q).
    double softmax_scale() const { return scale_; }
    int64_t num_heads() const { return num_heads_; }

    torch::nn::Linear mat_qkv{nullptr}, proj{nullptr};
    at::Tensor q_bias, v_bias, zero_k_bias, scale_mul_1H11;

  private:
    int64_t num_heads_, head_dim_;
    bool l2_norm_;
    double scale_;
};
TORCH_MODULE(SelfAttention);

class FeedForwardImpl : public torch::nn::Module {
  public:
    FeedForwardImpl(int64_t dim, int64_t hidden);
    at::Tensor forward(const at::Tensor& x) const;  // fc2(gelu_tanh(fc1(x)))
    torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(FeedForward);

// AdaLN modulation of one block: each tensor is (B, 1, C).
struct Modulation {
    at::Tensor gamma1, gamma2, scale1, scale2, shift1, shift2;
};

// What a block's step needs that depends only on the class condition: computed once per
// sampling call (the CUDA-graph prologue, or eagerly) instead of in every block of every step.
struct BlockConstants {
    Modulation m;
    // The modulated inputs' factors: 1 + scale (rounded in the modulation's dtype, as autocast
    // rounds it) and the shift. In fp32 where the residual stream is fp32 (bf16-autocast): the
    // product promotes them to fp32 all the same, so the values are unchanged, and the fused
    // modulation kernel reads them without two casts per block and step.
    at::Tensor scale1p, scale2p, shift1, shift2;
    at::Tensor qkv_bias;  // SelfAttentionImpl::qkv_bias()
    at::Tensor q_mul;     // SelfAttentionImpl::q_mul()
};

// Attention callback used by blocks: q, k, v in BHLc, returns BHLc.
using AttendFn =
    std::function<at::Tensor(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v)>;

class AdaLNSelfAttnImpl : public torch::nn::Module {
  public:
    AdaLNSelfAttnImpl(const VarConfig& cfg, int64_t block_idx);

    // `cond` is the class embedding (B, D), or with shared AdaLN the shared projection (B,1,6,C).
    Modulation modulation(const at::Tensor& cond) const;
    at::Tensor attn_input(const at::Tensor& x, const Modulation& m) const;
    at::Tensor ffn_branch(const at::Tensor& x, const Modulation& m) const;  // gamma2 * ffn(...)
    // The same operations with the per-call constants precomputed (same values).
    // fp32_stream: the residual stream is fp32 (bf16-autocast): the factors in fp32.
    BlockConstants constants(const at::Tensor& cond, bool fp32_stream = false) const;
    at::Tensor attn_input(const at::Tensor& x, const BlockConstants& k) const;
    at::Tensor ffn_branch(const at::Tensor& x, const BlockConstants& k) const;
    // The sampling loop's path, the same values: attn->project_qkv(attn_input(x, k)), x +
    // gamma1 * attn->project_out(o), x + ffn_branch(x, k); with `fuse` (the kernel policy) the
    // bf16-autocast mode's element-wise steps run as fused kernels (block_elementwise.h), and
    // the keys and values may land in the KV cache's `slots` directly (project_qkv).
    Qkv attention_inputs(const at::Tensor& x, const BlockConstants& k,
                         const kernels::KernelPolicy* fuse, const KvSlots* slots = nullptr) const;
    at::Tensor attn_residual(const at::Tensor& x, const at::Tensor& o_BHLc, const BlockConstants& k,
                             const kernels::KernelPolicy* fuse) const;
    at::Tensor ffn_residual(const at::Tensor& x, const BlockConstants& k,
                            const kernels::KernelPolicy* fuse) const;
    // The standard block: x + gamma1*attn(...) then x + gamma2*ffn(...).
    at::Tensor forward(const at::Tensor& x, const at::Tensor& cond, const AttendFn& attend) const;

    SelfAttention attn{nullptr};
    FeedForward ffn{nullptr};
    torch::nn::Sequential ada_lin{nullptr};  // absent with shared AdaLN
    at::Tensor ada_gss;                      // only with shared AdaLN
    torch::nn::LinearImpl& ada_fc() { return *ada_fc_; }

  private:
    at::Tensor norm(const at::Tensor& x) const;
    torch::nn::Linear ada_fc_{nullptr};  // ada_lin[1], kept typed for const access
    int64_t dim_;
    double eps_;
    bool shared_aln_;
};
TORCH_MODULE(AdaLNSelfAttn);

class AdaLNBeforeHeadImpl : public torch::nn::Module {
  public:
    AdaLNBeforeHeadImpl(int64_t dim, int64_t cond_dim, double eps);
    // autocast: 1 + scale in the projection's dtype, as under torch.autocast (else in x's).
    at::Tensor forward(const at::Tensor& x, const at::Tensor& cond, bool autocast = false) const;
    torch::nn::Sequential ada_lin{nullptr};
    torch::nn::LinearImpl& fc() { return *fc_; }

  private:
    torch::nn::Linear fc_{nullptr};
    int64_t dim_;
    double eps_;
};
TORCH_MODULE(AdaLNBeforeHead);

class VarTransformerImpl : public torch::nn::Module {
  public:
    explicit VarTransformerImpl(VarConfig cfg);
    const VarConfig& config() const { return cfg_; }

    // Binds an official-layout state dict (errors name every bad tensor).
    void load(const StateDict& dict, const std::string& what);
    using torch::nn::Module::load;  // keeps the archive overload visible
    // The official init recipe (truncated normal, scaled AdaLN/head) for random-weight runs.
    void init_weights(uint64_t seed);
    // "bf16-autocast" precision: the model then computes what the official model computes under
    // torch.autocast(bfloat16) from fp32 weights. Every weight that autocast casts per op (the
    // inputs of nn.Linear: blocks' qkv / proj / FFN / AdaLN projections, their q/v biases, the
    // word embedding, the head and its AdaLN) becomes its bf16 copy, made once (the same
    // rounding as autocast's casts); embeddings, positions, the head scales and shared AdaLN's
    // gains stay fp32. The residual stream stays fp32: LayerNorm, residual adds and the
    // modulation run in fp32 on bf16-rounded modulations (1 + scale rounded in bf16), the q/k
    // L2 norms in fp32 (autocast's linalg_vector_norm(dtype=float)), matrix products and
    // attention in bf16. Call on an fp32 model after moving it to its device.
    void use_autocast_bf16();
    bool autocast_bf16() const { return autocast_; }
    // dtype of the matrix products and of the KV cache (the residual stream's, except under
    // autocast, where it is bf16 and the stream fp32).
    at::ScalarType compute_dtype() const;

    at::Tensor class_embedding(const at::Tensor& labels) const;   // labels < 0 -> unconditional
    at::Tensor block_condition(const at::Tensor& cond_BD) const;  // shared AdaLN projection or id
    at::Tensor level_position() const;                            // lvl_embed(lvl_1L) + pos_1LC
    at::Tensor first_scale_input(const at::Tensor& cond_BD) const;
    at::Tensor logits(const at::Tensor& h, const at::Tensor& cond_BD) const;

    // Teacher-forced forward over all scales with the causal block mask: labels (B),
    // x_BLCv (B, L - first_l, Cvae) from Vqvae::idx_to_var_input. Returns float logits (B, L, V).
    at::Tensor forward_teacher(const at::Tensor& labels, const at::Tensor& x_BLCv,
                               bool eager_attention = false) const;

    torch::nn::Linear word_embed{nullptr}, head{nullptr};
    torch::nn::Embedding class_emb{nullptr}, lvl_embed{nullptr};
    at::Tensor pos_start, pos_1LC, lvl_1L, attn_bias_for_masking;
    torch::nn::Sequential shared_ada_lin{nullptr};
    torch::nn::ModuleList blocks{nullptr};
    AdaLNBeforeHead head_nm{nullptr};

    const AdaLNSelfAttnImpl& block(int64_t i) const { return *block_handles_.at(i); }

  private:
    VarConfig cfg_;
    std::vector<AdaLNSelfAttn> block_handles_;  // typed views of `blocks`
    torch::nn::Linear shared_fc_{nullptr};
    bool autocast_ = false;
};
TORCH_MODULE(VarTransformer);

// Attention primitives shared by the model and the sampler.
// Dense attention through at::scaled_dot_product_attention (flash/cuDNN/efficient on GPU).
at::Tensor attention_sdpa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          double scale, const at::Tensor& additive_mask = {});
// Eager attention that materialises the probabilities (B, H, Lq, Lk) for probes.
at::Tensor attention_eager(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           double scale, const at::Tensor& additive_mask = {},
                           at::Tensor* probs_out = nullptr);

}  // namespace varscope
