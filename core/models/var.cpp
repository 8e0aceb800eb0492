#include "core/models/var.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/modules/activation.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "core/io/json_fields.h"
#include "core/io/module_binding.h"
#include "core/models/block_elementwise.h"
#include "kernels/qk_norm.h"

namespace varscope {
namespace {

std::string join(const std::vector<int64_t>& v) {
    std::ostringstream os;
    for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
    return os.str();
}

int64_t sum_squares(const std::vector<int64_t>& pn) {
    return std::accumulate(pn.begin(), pn.end(), int64_t{0},
                           [](int64_t acc, int64_t p) { return acc + p * p; });
}

const at::Tensor& require(const StateDict& d, const std::string& name) {
    auto it = d.find(name);
    if (it == d.end()) throw CheckpointError("VAR checkpoint: missing tensor '" + name + "'");
    return it->second;
}

// Truncated normal in [-2 std, 2 std] by inverse-CDF sampling, as torch.nn.init.trunc_normal_.
void trunc_normal_(at::Tensor t, double std, at::Generator& gen) {
    at::NoGradGuard g;
    const double lo = std::erf(-2.0 / std::sqrt(2.0)), hi = -lo;
    auto u = at::empty(t.sizes(), t.options().dtype(at::kFloat).device(at::kCPU));
    u.uniform_(lo, hi, gen);
    u.erfinv_().mul_(std * std::sqrt(2.0)).clamp_(-2.0 * std, 2.0 * std);
    t.copy_(u);
}

// The input is cast to the weight's dtype, as torch.autocast casts nn.Linear's inputs (a no-op
// when both already agree, i.e. everywhere but in the bf16-autocast mode's fp32 stream).
at::Tensor linear(const torch::nn::Linear& l, const at::Tensor& x) {
    const auto& w = l->weight;
    return at::linear(x.to(w.scalar_type()), w,
                      l->bias.defined() ? std::optional<at::Tensor>(l->bias) : std::nullopt);
}

// x / max(||x||, 1e-12) over the last dim, as torch.nn.functional.normalize.
at::Tensor l2_normalize(const at::Tensor& x) {
    return x / x.norm(2, {-1}, /*keepdim=*/true).clamp_min(1e-12);
}

// F.normalize of a bf16 tensor under torch.autocast: its norm is linalg_vector_norm, which
// autocast runs with dtype=float, and bf16 / fp32 promotes: an fp32 result.
at::Tensor autocast_norm(const at::Tensor& x) {
    return at::linalg_vector_norm(x, 2, at::IntArrayRef{-1}, /*keepdim=*/true, at::kFloat);
}
at::Tensor l2_normalize_autocast(const at::Tensor& x, const at::Tensor& norm) {
    return x / norm.clamp_min(1e-12);
}

// The schedule written in the lvl_1L buffer (level index of each token), which official and
// our own checkpoints carry; empty if absent or not a sequence of square token maps.
std::vector<int64_t> schedule_from_levels(const StateDict& d) {
    auto it = d.find("lvl_1L");
    if (it == d.end() || it->second.numel() == 0) return {};
    auto lv = it->second.reshape({-1}).to(at::kLong);
    const int64_t levels = lv.max().item<int64_t>() + 1;
    if (levels < 1 || levels > 64) return {};
    auto counts = at::bincount(lv, {}, levels);
    std::vector<int64_t> pn;
    for (int64_t i = 0; i < levels; ++i) {
        const int64_t n = counts[i].item<int64_t>();
        const auto side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(n))));
        if (side * side != n) return {};
        pn.push_back(side);
    }
    return pn;
}

}  // namespace

std::vector<int64_t> patch_nums_256() {
    return {1, 2, 3, 4, 5, 6, 8, 10, 13, 16};
}
std::vector<int64_t> patch_nums_512() {
    return {1, 2, 3, 4, 6, 9, 13, 18, 24, 32};
}

// ----------------------------------------------------------------------------- VarConfig

int64_t VarConfig::total_tokens() const {
    return sum_squares(patch_nums);
}

int64_t VarConfig::scale_begin(int64_t si) const {
    int64_t b = 0;
    for (int64_t i = 0; i < si; ++i) b += patch_nums[i] * patch_nums[i];
    return b;
}

VarConfig VarConfig::for_depth(int64_t depth, std::vector<int64_t> patch_nums) {
    VarConfig c;
    c.depth = depth;
    c.num_heads = depth;
    c.embed_dim = depth * 64;
    if (!patch_nums.empty()) c.patch_nums = std::move(patch_nums);
    c.validate();
    return c;
}

void VarConfig::validate() const {
    auto fail = [](const std::string& m) { throw std::invalid_argument("VAR config: " + m); };
    if (depth < 1 || depth > 256) fail("depth must be in [1, 256], got " + std::to_string(depth));
    if (num_heads < 1 || embed_dim % num_heads != 0)
        fail("embed_dim (" + std::to_string(embed_dim) + ") must be a multiple of num_heads (" +
             std::to_string(num_heads) + ")");
    if (num_classes < 1) fail("num_classes must be >= 1");
    if (vocab_size < 2) fail("vocab_size must be >= 2");
    if (cvae < 1) fail("cvae must be >= 1");
    if (patch_nums.empty()) fail("patch_nums must not be empty");
    for (size_t i = 0; i < patch_nums.size(); ++i)
        if (patch_nums[i] < 1 || (i && patch_nums[i] <= patch_nums[i - 1]))
            fail("patch_nums must be positive and strictly increasing, got [" + join(patch_nums) +
                 "]");
    // Far above any schedule in use (VAR 512 px: 32, Infinity 1024 px: 64); a typo like 1000
    // asked LibTorch for a terabyte.
    if (patch_nums.back() > 256)
        fail("patch_nums entries must be at most 256, got " + std::to_string(patch_nums.back()));
}

VarConfig VarConfig::infer_from(const StateDict& d, const std::vector<int64_t>& patch_nums) {
    VarConfig c;
    const at::Tensor we = require(d, "word_embed.weight");  // (C, Cvae)
    c.embed_dim = we.size(0);
    c.cvae = we.size(1);
    c.num_classes = require(d, "class_emb.weight").size(0) - 1;
    c.vocab_size = require(d, "head.weight").size(0);
    c.depth = 0;
    while (d.count("blocks." + std::to_string(c.depth) + ".attn.mat_qkv.weight")) ++c.depth;
    if (c.depth == 0) throw CheckpointError("VAR checkpoint: no 'blocks.0.attn.mat_qkv.weight'");
    c.shared_aln = d.count("shared_ada_lin.1.weight") > 0;
    auto sm = d.find("blocks.0.attn.scale_mul_1H11");
    c.attn_l2_norm = sm != d.end();
    c.num_heads = c.attn_l2_norm ? sm->second.size(1) : c.embed_dim / 64;
    c.mlp_ratio = static_cast<double>(require(d, "blocks.0.ffn.fc1.weight").size(0)) / c.embed_dim;

    const int64_t L = require(d, "pos_1LC").size(1);
    const int64_t levels = require(d, "lvl_embed.weight").size(0);
    if (!patch_nums.empty()) {
        c.patch_nums = patch_nums;
    } else if (auto from_levels = schedule_from_levels(d); !from_levels.empty()) {
        c.patch_nums = from_levels;
    } else if (L == sum_squares(patch_nums_256())) {
        c.patch_nums = patch_nums_256();
    } else if (L == sum_squares(patch_nums_512())) {
        c.patch_nums = patch_nums_512();
    } else {
        throw CheckpointError("VAR checkpoint: pos_1LC has " + std::to_string(L) +
                              " positions, which matches no known patch schedule; pass the "
                              "schedule explicitly (patch_nums)");
    }
    if (sum_squares(c.patch_nums) != L || static_cast<int64_t>(c.patch_nums.size()) != levels)
        throw CheckpointError("VAR checkpoint: patch schedule mismatch: schedule [" +
                              join(c.patch_nums) + "] has " + std::to_string(c.patch_nums.size()) +
                              " scales and " + std::to_string(sum_squares(c.patch_nums)) +
                              " tokens, checkpoint has " + std::to_string(levels) +
                              " level embeddings and " + std::to_string(L) + " positions");
    c.validate();
    return c;
}

nlohmann::json VarConfig::to_json() const {
    return {{"depth", depth},           {"embed_dim", embed_dim},
            {"num_heads", num_heads},   {"num_classes", num_classes},
            {"vocab_size", vocab_size}, {"cvae", cvae},
            {"mlp_ratio", mlp_ratio},   {"norm_eps", norm_eps},
            {"shared_aln", shared_aln}, {"attn_l2_norm", attn_l2_norm},
            {"patch_nums", patch_nums}};
}

VarConfig VarConfig::from_json(const nlohmann::json& j) {
    VarConfig c;
    auto get = [&](const char* key, auto& field) {
        read_json_field(j, key, field, "VAR config: field ");
    };
    if (!j.is_object()) throw std::invalid_argument("VAR config: expected a JSON object");
    require_known_fields(j, VarConfig{}.to_json(), "VAR config");
    get("depth", c.depth);
    get("embed_dim", c.embed_dim);
    get("num_heads", c.num_heads);
    get("num_classes", c.num_classes);
    get("vocab_size", c.vocab_size);
    get("cvae", c.cvae);
    get("mlp_ratio", c.mlp_ratio);
    get("norm_eps", c.norm_eps);
    get("shared_aln", c.shared_aln);
    get("attn_l2_norm", c.attn_l2_norm);
    get("patch_nums", c.patch_nums);
    c.validate();
    return c;
}

// ----------------------------------------------------------------------------- attention

at::Tensor attention_sdpa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          double scale, const at::Tensor& additive_mask) {
    std::optional<at::Tensor> mask;
    if (additive_mask.defined()) mask = additive_mask.to(q.scalar_type());
    return at::scaled_dot_product_attention(q, k, v, mask, 0.0, false, scale);
}

at::Tensor attention_eager(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           double scale, const at::Tensor& additive_mask, at::Tensor* probs_out) {
    auto scores = at::matmul(q.mul(scale), k.transpose(-2, -1));
    if (additive_mask.defined()) scores = scores + additive_mask.to(scores.scalar_type());
    auto probs = at::softmax(scores, -1);
    if (probs_out) *probs_out = probs;
    return at::matmul(probs, v);
}

// ----------------------------------------------------------------------------- blocks

SelfAttentionImpl::SelfAttentionImpl(int64_t C, int64_t H, bool l2)
    : num_heads_(H), head_dim_(C / H), l2_norm_(l2) {
    mat_qkv = register_module("mat_qkv",
                              torch::nn::Linear(torch::nn::LinearOptions(C, 3 * C).bias(false)));
    q_bias = register_parameter("q_bias", at::zeros({C}));
    v_bias = register_parameter("v_bias", at::zeros({C}));
    zero_k_bias = register_buffer("zero_k_bias", at::zeros({C}));
    if (l2)
        scale_mul_1H11 = register_parameter("scale_mul_1H11", at::full({1, H, 1, 1}, 4.0).log());
    proj = register_module("proj", torch::nn::Linear(C, C));
    scale_ = l2 ? 1.0 : 0.25 / std::sqrt(static_cast<double>(head_dim_));
}

at::Tensor SelfAttentionImpl::qkv_bias() const {
    return at::cat({q_bias, zero_k_bias, v_bias});
}

at::Tensor SelfAttentionImpl::q_mul() const {
    // The learnt per-head temperature, capped at log(100) as in the official model.
    return l2_norm_ ? scale_mul_1H11.clamp_max(std::log(100.0)).exp() : at::Tensor();
}

Qkv SelfAttentionImpl::project_qkv(const at::Tensor& x) const {
    return project_qkv(x, qkv_bias(), q_mul());
}

Qkv SelfAttentionImpl::project_qkv(const at::Tensor& x, const at::Tensor& bias,
                                   const at::Tensor& mul, bool keep_fp32_qk, bool pre_cast,
                                   const kernels::KernelPolicy* fuse, const KvSlots* slots) const {
    const int64_t B = x.size(0), L = x.size(1);
    const auto& w = mat_qkv->weight;
    auto qkv = at::linear(x.to(w.scalar_type()), w, bias).view({B, L, 3, num_heads_, head_dim_});
    auto parts = qkv.permute({2, 0, 3, 1, 4}).unbind(0);  // 3 x (B, H, L, c)
    Qkv r{parts[0], parts[1], parts[2]};
    if (l2_norm_) {
        if (pre_cast || x.scalar_type() != w.scalar_type()) {
            // bf16-autocast: normalised and scaled in fp32, rounded to bf16 where autocast's
            // SDPA casts them (keys are cached in bf16: the same values).
            const auto norm_q = autocast_norm(r.q), norm_k = autocast_norm(r.k);
            const auto mul32 = mul.scalar_type() == at::kFloat ? mul : mul.to(at::kFloat);
            if (!keep_fp32_qk && fuse && w.scalar_type() == at::kBFloat16) {
                const kernels::QkCacheSlots cache =
                    slots ? kernels::QkCacheSlots{slots->k, r.v, slots->v}
                          : kernels::QkCacheSlots{};
                const auto* into = slots ? &cache : nullptr;
                if (kernels::fused_qk_norm_supported(r.q, r.k, norm_q, norm_k, mul32, *fuse,
                                                     nullptr, into)) {
                    std::tie(r.q, r.k) =
                        kernels::fused_qk_norm_bf16(r.q, r.k, norm_q, norm_k, mul32, *fuse, into);
                    if (into) r.v = slots->v;
                    return r;
                }
            }
            r.q = l2_normalize_autocast(r.q, norm_q).mul(mul);
            r.k = l2_normalize_autocast(r.k, norm_k);
            if (!keep_fp32_qk) {
                r.q = r.q.to(w.scalar_type());
                r.k = r.k.to(w.scalar_type());
            }
        } else {
            r.q = l2_normalize(r.q).mul(mul);
            r.k = l2_normalize(r.k);
        }
    }
    return r;
}

at::Tensor SelfAttentionImpl::project_out(const at::Tensor& o) const {
    const int64_t B = o.size(0), L = o.size(2);
    return linear(proj, o.transpose(1, 2).reshape({B, L, num_heads_ * head_dim_}));
}

FeedForwardImpl::FeedForwardImpl(int64_t dim, int64_t hidden) {
    fc1 = register_module("fc1", torch::nn::Linear(dim, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, dim));
}

at::Tensor FeedForwardImpl::forward(const at::Tensor& x) const {
    return linear(fc2, at::gelu(linear(fc1, x), "tanh"));
}

AdaLNSelfAttnImpl::AdaLNSelfAttnImpl(const VarConfig& cfg, int64_t)
    : dim_(cfg.embed_dim), eps_(cfg.norm_eps), shared_aln_(cfg.shared_aln) {
    const int64_t C = cfg.embed_dim;
    attn = register_module("attn", SelfAttention(C, cfg.num_heads, cfg.attn_l2_norm));
    ffn = register_module("ffn",
                          FeedForward(C, static_cast<int64_t>(std::llround(C * cfg.mlp_ratio))));
    if (shared_aln_) {
        ada_gss = register_parameter("ada_gss", at::randn({1, 1, 6, C}) / std::sqrt(double(C)));
    } else {
        ada_fc_ = torch::nn::Linear(C, 6 * C);
        ada_lin = register_module("ada_lin", torch::nn::Sequential(torch::nn::SiLU(), ada_fc_));
    }
}

at::Tensor AdaLNSelfAttnImpl::norm(const at::Tensor& x) const {
    return at::layer_norm(x, {dim_}, {}, {}, eps_);
}

Modulation AdaLNSelfAttnImpl::modulation(const at::Tensor& cond) const {
    // Official order of the six chunks: gamma1, gamma2, scale1, scale2, shift1, shift2.
    at::Tensor six =
        shared_aln_ ? ada_gss + cond : linear(ada_fc_, at::silu(cond)).view({-1, 1, 6, dim_});
    auto p = six.unbind(2);
    return {p[0], p[1], p[2], p[3], p[4], p[5]};
}

at::Tensor AdaLNSelfAttnImpl::attn_input(const at::Tensor& x, const Modulation& m) const {
    return norm(x).mul(m.scale1.add(1)).add_(m.shift1);
}

at::Tensor AdaLNSelfAttnImpl::ffn_branch(const at::Tensor& x, const Modulation& m) const {
    return ffn->forward(norm(x).mul(m.scale2.add(1)).add_(m.shift2)).mul(m.gamma2);
}

BlockConstants AdaLNSelfAttnImpl::constants(const at::Tensor& cond, bool fp32_stream) const {
    BlockConstants k;
    k.m = modulation(cond);
    k.scale1p = k.m.scale1.add(1);
    k.scale2p = k.m.scale2.add(1);
    k.shift1 = k.m.shift1;
    k.shift2 = k.m.shift2;
    if (fp32_stream)
        for (auto* t : {&k.scale1p, &k.scale2p, &k.shift1, &k.shift2}) *t = t->to(at::kFloat);
    k.qkv_bias = attn->qkv_bias();
    k.q_mul = attn->q_mul();
    return k;
}

at::Tensor AdaLNSelfAttnImpl::attn_input(const at::Tensor& x, const BlockConstants& k) const {
    return modulated_input(norm(x), k.scale1p, k.shift1, attn->mat_qkv, nullptr);
}

at::Tensor AdaLNSelfAttnImpl::ffn_branch(const at::Tensor& x, const BlockConstants& k) const {
    return ffn->forward(modulated_input(norm(x), k.scale2p, k.shift2, ffn->fc1, nullptr))
        .mul(k.m.gamma2);
}

Qkv AdaLNSelfAttnImpl::attention_inputs(const at::Tensor& x, const BlockConstants& k,
                                        const kernels::KernelPolicy* fuse,
                                        const KvSlots* slots) const {
    const auto in = modulated_norm_input(x, eps_, k.scale1p, k.shift1, attn->mat_qkv, fuse);
    const bool pre_cast = in.scalar_type() != x.scalar_type();  // the kernel rounded it to bf16
    return attn->project_qkv(in, k.qkv_bias, k.q_mul, /*keep_fp32_qk=*/false, pre_cast, fuse,
                             slots);
}

at::Tensor AdaLNSelfAttnImpl::attn_residual(const at::Tensor& x, const at::Tensor& o,
                                            const BlockConstants& k,
                                            const kernels::KernelPolicy* fuse) const {
    return gated_residual(x, attn->project_out(o), k.m.gamma1, GateProduct::Promoted, fuse);
}

at::Tensor AdaLNSelfAttnImpl::ffn_residual(const at::Tensor& x, const BlockConstants& k,
                                           const kernels::KernelPolicy* fuse) const {
    const auto in = modulated_norm_input(x, eps_, k.scale2p, k.shift2, ffn->fc1, fuse);
    return gated_residual(x, ffn->forward(in), k.m.gamma2, GateProduct::Promoted, fuse);
}

at::Tensor AdaLNSelfAttnImpl::forward(const at::Tensor& x, const at::Tensor& cond,
                                      const AttendFn& attend) const {
    auto m = modulation(cond);
    auto qkv = attn->project_qkv(attn_input(x, m));
    auto h = x + attn->project_out(attend(qkv.q, qkv.k, qkv.v)).mul(m.gamma1);
    return h + ffn_branch(h, m);
}

AdaLNBeforeHeadImpl::AdaLNBeforeHeadImpl(int64_t dim, int64_t cond_dim, double eps)
    : dim_(dim), eps_(eps) {
    fc_ = torch::nn::Linear(cond_dim, 2 * dim);
    ada_lin = register_module("ada_lin", torch::nn::Sequential(torch::nn::SiLU(), fc_));
}

at::Tensor AdaLNBeforeHeadImpl::forward(const at::Tensor& x, const at::Tensor& cond,
                                        bool autocast) const {
    // Modulation in the weights' precision, normalisation in the input's (fp32 for the head).
    // Under autocast the SiLU runs on the fp32 condition and 1 + scale is rounded to bf16.
    auto p =
        (autocast ? linear(fc_, at::silu(cond))
                  : linear(fc_, at::silu(cond.to(fc_->weight.scalar_type()))).to(x.scalar_type()))
            .view({-1, 1, 2, dim_})
            .unbind(2);  // scale, shift
    return at::layer_norm(x, {dim_}, {}, {}, eps_).mul(p[0].add(1)).add_(p[1]);
}

// ----------------------------------------------------------------------------- transformer

VarTransformerImpl::VarTransformerImpl(VarConfig cfg) : cfg_(std::move(cfg)) {
    cfg_.validate();
    const int64_t C = cfg_.embed_dim, L = cfg_.total_tokens(), S = cfg_.num_scales();
    word_embed = register_module("word_embed", torch::nn::Linear(cfg_.cvae, C));
    class_emb = register_module("class_emb", torch::nn::Embedding(cfg_.num_classes + 1, C));
    pos_start = register_parameter("pos_start", at::zeros({1, cfg_.first_l(), C}));
    pos_1LC = register_parameter("pos_1LC", at::zeros({1, L, C}));
    lvl_embed = register_module("lvl_embed", torch::nn::Embedding(S, C));
    if (cfg_.shared_aln) {
        shared_fc_ = torch::nn::Linear(C, 6 * C);
        shared_ada_lin =
            register_module("shared_ada_lin", torch::nn::Sequential(torch::nn::SiLU(), shared_fc_));
    }
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < cfg_.depth; ++i) {
        block_handles_.emplace_back(cfg_, i);
        blocks->push_back(block_handles_.back());
    }

    // Level index per token, and the causal block mask (a token sees its own and earlier scales).
    std::vector<int64_t> lvl;
    lvl.reserve(L);
    for (int64_t s = 0; s < S; ++s)
        for (int64_t t = 0; t < cfg_.patch_nums[s] * cfg_.patch_nums[s]; ++t) lvl.push_back(s);
    auto d = at::tensor(lvl, at::kLong);
    lvl_1L = register_buffer("lvl_1L", d.view({1, L}).clone());
    auto allowed = d.view({L, 1}).ge(d.view({1, L}));
    attn_bias_for_masking = register_buffer(
        "attn_bias_for_masking",
        at::zeros({L, L}).masked_fill_(allowed.logical_not(), -INFINITY).view({1, 1, L, L}));
    head_nm = register_module("head_nm", AdaLNBeforeHead(C, C, cfg_.norm_eps));
    head = register_module("head", torch::nn::Linear(C, cfg_.vocab_size));
}

void VarTransformerImpl::load(const StateDict& dict, const std::string& what) {
    BindOptions opt;
    opt.what = what;
    // Derived buffers: computed here from the schedule; checkpoints may or may not carry them.
    opt.optional_buffers = {"lvl_1L", "attn_bias_for_masking"};
    for (int64_t i = 0; i < cfg_.depth; ++i)
        opt.optional_buffers.push_back("blocks." + std::to_string(i) + ".attn.zero_k_bias");
    bind_state_dict(*this, dict, opt);
}

void VarTransformerImpl::init_weights(uint64_t seed) {
    at::NoGradGuard g;
    auto gen = at::detail::createCPUGenerator(seed);
    const double std = std::sqrt(1.0 / cfg_.embed_dim / 3.0);  // the official "automated" std
    for (auto& p : named_parameters()) {
        const auto& n = p.key();
        auto t = p.value();
        if (n.find("scale_mul_1H11") != std::string::npos)
            t.fill_(std::log(4.0));
        else if (n.size() > 5 && n.compare(n.size() - 5, 5, ".bias") == 0)
            t.zero_();
        else if (n.find("q_bias") != std::string::npos || n.find("v_bias") != std::string::npos)
            t.zero_();
        else
            trunc_normal_(t, std, gen);
    }
    const double depth_div = std::sqrt(2.0 * cfg_.depth);
    head->weight.mul_(0.02);
    head_nm->fc().weight.mul_(0.5);
    for (int64_t i = 0; i < cfg_.depth; ++i) {
        auto& b = *block_handles_[i];
        b.attn->proj->weight.div_(depth_div);
        b.ffn->fc2->weight.div_(depth_div);
        const int64_t C = cfg_.embed_dim;
        if (!cfg_.shared_aln) {
            auto w = b.ada_fc().weight;
            w.narrow(0, 2 * C, 4 * C).mul_(0.5);
            w.narrow(0, 0, 2 * C).mul_(1e-5);
        } else {
            b.ada_gss.narrow(2, 2, 4).mul_(0.5);
            b.ada_gss.narrow(2, 0, 2).mul_(1e-5);
        }
    }
}

void VarTransformerImpl::use_autocast_bf16() {
    at::NoGradGuard g;
    const auto bf16 = at::kBFloat16;
    TORCH_CHECK(pos_1LC.scalar_type() == at::kFloat, "bf16-autocast needs an fp32 model");
    word_embed->to(bf16);
    head->to(bf16);
    head_nm->ada_lin->to(bf16);
    if (shared_ada_lin) shared_ada_lin->to(bf16);
    for (auto& b : block_handles_) {
        b->attn->mat_qkv->to(bf16);
        b->attn->proj->to(bf16);
        for (auto* t : {&b->attn->q_bias, &b->attn->v_bias, &b->attn->zero_k_bias})
            t->set_data(t->to(bf16));
        b->ffn->to(bf16);
        if (b->ada_lin) b->ada_lin->to(bf16);
    }
    autocast_ = true;
}

at::ScalarType VarTransformerImpl::compute_dtype() const {
    return block(0).attn->mat_qkv->weight.scalar_type();
}

at::Tensor VarTransformerImpl::class_embedding(const at::Tensor& labels) const {
    auto idx = at::where(labels.lt(0), at::full_like(labels, cfg_.num_classes), labels);
    return at::embedding(class_emb->weight, idx);
}

at::Tensor VarTransformerImpl::block_condition(const at::Tensor& cond_BD) const {
    if (!cfg_.shared_aln) return cond_BD;
    return linear(shared_fc_, at::silu(cond_BD)).view({-1, 1, 6, cfg_.embed_dim});
}

at::Tensor VarTransformerImpl::level_position() const {
    // Module::to(dtype) also casts integer buffers, so restore the index type here.
    return at::embedding(lvl_embed->weight, lvl_1L.to(at::kLong)) + pos_1LC;
}

at::Tensor VarTransformerImpl::first_scale_input(const at::Tensor& cond_BD) const {
    const int64_t B = cond_BD.size(0), fl = cfg_.first_l();
    return cond_BD.unsqueeze(1).expand({B, fl, -1}) + pos_start.expand({B, fl, -1}) +
           level_position().narrow(1, 0, fl);
}

at::Tensor VarTransformerImpl::logits(const at::Tensor& h, const at::Tensor& cond_BD) const {
    auto normed = head_nm->forward(h.to(at::kFloat), cond_BD, autocast_);
    return linear(head, normed.to(head->weight.scalar_type())).to(at::kFloat);
}

at::Tensor VarTransformerImpl::forward_teacher(const at::Tensor& labels, const at::Tensor& x_BLCv,
                                               bool eager_attention) const {
    const int64_t B = labels.size(0), L = cfg_.total_tokens();
    if (x_BLCv.dim() != 3 || x_BLCv.size(0) != B || x_BLCv.size(1) != L - cfg_.first_l() ||
        x_BLCv.size(2) != cfg_.cvae)
        throw std::invalid_argument("forward_teacher: x_BLCv must be (B, L - first_l, Cvae) = (" +
                                    std::to_string(B) + ", " + std::to_string(L - cfg_.first_l()) +
                                    ", " + std::to_string(cfg_.cvae) + ")");
    auto cond_BD = class_embedding(labels);
    auto x = at::cat({cond_BD.unsqueeze(1).expand({B, cfg_.first_l(), -1}) +
                          pos_start.expand({B, cfg_.first_l(), -1}),
                      linear(word_embed, x_BLCv.to(word_embed->weight.scalar_type()))},
                     1);
    x = x + level_position();
    auto cond = block_condition(cond_BD);
    const auto& mask = attn_bias_for_masking;
    AttendFn attend = [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
        const double s = block(0).attn->softmax_scale();
        return eager_attention ? attention_eager(q, k, v, s, mask)
                               : attention_sdpa(q, k, v, s, mask);
    };
    for (int64_t i = 0; i < cfg_.depth; ++i) x = block(i).forward(x, cond, attend);
    return logits(x, cond_BD);
}

}  // namespace varscope
