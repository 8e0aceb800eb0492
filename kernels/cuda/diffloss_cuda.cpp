#include "kernels/cuda/diffloss_cuda.h"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <utility>
#include <vector>

#include "kernels/alignment.h"
#include "kernels/cuda/diffloss_params.h"
#include "kernels/cuda/torch_glue.h"

namespace varscope::kernels::cuda {
namespace {

static_assert(int(DiffCfgMode::None) == int(DiffCfg::None) &&
                  int(DiffCfgMode::Full) == int(DiffCfg::Full) &&
                  int(DiffCfgMode::FullKeep) == int(DiffCfg::FullKeep) &&
                  int(DiffCfgMode::Cached) == int(DiffCfg::Cached),
              "DiffCfgMode and DiffCfg must list the modes in one order");

// The kernels read rows in 16-byte chunks: contiguous rows, aligned starts and row strides.
at::Tensor rows_layout(const at::Tensor& t, at::ScalarType type) {
    TORCH_CHECK(t.scalar_type() == type, "fused DiffLoss kernels: mixed dtypes (", t.scalar_type(),
                " vs ", type, ")");
    TORCH_CHECK(t.dim() <= 2, "fused DiffLoss kernels: 1-D or 2-D tensors expected");
    const bool ok =
        t.stride(-1) == 1 && (t.dim() == 1 || t.stride(0) % 8 == 0) && aligned(t.data_ptr(), 16);
    return ok ? t : t.contiguous();
}

at::Tensor optional_layout(const at::Tensor& t, at::ScalarType type) {
    return t.defined() ? rows_layout(t, type) : t;
}

cudaError_t launch_linear(DiffLinearParams p, at::ScalarType type, cudaStream_t s,
                          const DiffLossPolicy& policy) {
    p.row_split = policy.row_split;
    p.lean = policy.lean;
    return type == at::kBFloat16 ? launch_diff_linear_bf16(p, s) : launch_diff_linear_fp16(p, s);
}

// The fields every linear-layer launch sets: `in` (its rows repeated up to `rows`) times the
// (N, K) weight, plus bias, into `out`; the callers add their prologue/epilogue operands.
DiffLinearParams linear_params(const at::Tensor& in, int64_t rows, const at::Tensor& w,
                               const at::Tensor& b, void* out, DiffPrologue prologue,
                               DiffEpilogue epilogue, bool pdl) {
    DiffLinearParams p;
    p.in = in.data_ptr();
    p.in_rows = static_cast<int>(in.size(0));
    p.rows = static_cast<int>(rows);
    p.K = static_cast<int>(in.size(1));
    p.N = static_cast<int>(w.size(0));
    p.weight = w.data_ptr();
    p.bias = b.data_ptr();
    p.out = out;
    p.prologue = prologue;
    p.epilogue = epilogue;
    p.pdl = pdl;
    return p;
}

void check_rows(const at::Tensor& t, int64_t rows, int64_t cols, const char* name) {
    TORCH_CHECK(t.dim() == 2 && t.size(0) >= rows && t.size(1) == cols,
                "fused DiffLoss kernels: ", name, " has shape ", t.sizes(), ", expected (", rows,
                ", ", cols, ")");
}

}  // namespace

at::Tensor diff_input_proj(const at::Tensor& x_in, const at::Tensor& w_in, const at::Tensor& b_in,
                           int64_t rows, const DiffLossPolicy& policy) {
    const c10::cuda::CUDAGuard guard(x_in.device());
    const auto type = x_in.scalar_type();
    const auto x = rows_layout(x_in, type).contiguous(), w = rows_layout(w_in, type).contiguous(),
               b = rows_layout(b_in, type).contiguous();
    TORCH_CHECK(w.size(1) == x.size(1), "diff_input_proj: weight ", w.sizes(), " vs x ", x.sizes());
    auto out = at::empty({rows, w.size(0)}, x.options());
    const DiffLinearParams p = linear_params(x, rows, w, b, out.data_ptr(), DiffPrologue::Copy,
                                             DiffEpilogue::Bias, policy.pdl);
    check_cuda(launch_linear(p, type, stream_of(x), policy), "fused DiffLoss input projection");
    return out;
}

namespace {

// fc1's launch parameters for `rows` rows of width K read from `in` (without the projection).
struct Fc1Launch {
    DiffLinearParams p;
    at::Tensor out;
    std::vector<at::Tensor> keep;  // layout copies the launch reads
};

Fc1Launch fc1_params(const at::Tensor& in, int64_t M, int64_t K, const DiffBlockWeights& wt,
                     const at::Tensor& shift_in, const at::Tensor& scale1_in, bool pdl) {
    const auto type = in.scalar_type();
    const auto w = rows_layout(wt.fc1_weight, type).contiguous();
    const auto b = rows_layout(wt.fc1_bias, type).contiguous();
    const auto lw = optional_layout(wt.ln_weight, type), lb = optional_layout(wt.ln_bias, type);
    const auto shift = rows_layout(shift_in, type), scale1 = rows_layout(scale1_in, type);
    check_rows(shift, M, K, "shift");
    check_rows(scale1, M, K, "scale1");
    TORCH_CHECK(w.size(1) == K, "diff_block_fc1: weight ", w.sizes(), " vs width ", K);
    Fc1Launch l;
    l.out = at::empty({M, w.size(0)}, in.options());
    l.p = linear_params(in, M, w, b, l.out.data_ptr(), DiffPrologue::NormModulate,
                        DiffEpilogue::BiasSilu, pdl);
    l.p.K = static_cast<int>(K);
    l.p.ln_weight = lw.defined() ? lw.data_ptr() : nullptr;
    l.p.ln_bias = lb.defined() ? lb.data_ptr() : nullptr;
    l.p.ln_eps = static_cast<float>(wt.ln_eps);
    l.p.shift = shift.data_ptr();
    l.p.shift_stride = shift.stride(0);
    l.p.scale1 = scale1.data_ptr();
    l.p.scale1_stride = scale1.stride(0);
    l.keep = {w, b, lw, lb, shift, scale1};
    return l;
}

}  // namespace

bool diff_proj_fold_runs(const at::Tensor& x, const at::Tensor& w_in, int64_t rows,
                         const DiffBlockWeights& wt, const DiffLossPolicy& policy) {
    // One 8-row tiling for the folded kernel: where the chain would take 16/32-row tiles the
    // caller runs the two kernels (the same values as the unfolded chain either way).
    return (x.size(1) == 8 || x.size(1) == 16) && w_in.size(1) == x.size(1) &&
           wt.fc1_weight.size(0) == w_in.size(0) && wt.fc1_weight.size(1) == w_in.size(0) &&
           (rows <= 8 || policy.row_split);
}

std::pair<at::Tensor, at::Tensor> diff_proj_block_fc1(
    const at::Tensor& x_in, const at::Tensor& w_in, const at::Tensor& b_in, int64_t rows,
    const DiffBlockWeights& wt, const at::Tensor& shift, const at::Tensor& scale1,
    const DiffLossPolicy& policy) {
    const c10::cuda::CUDAGuard guard(x_in.device());
    const auto type = x_in.scalar_type();
    const auto x = rows_layout(x_in, type).contiguous(), wi = rows_layout(w_in, type).contiguous(),
               bi = rows_layout(b_in, type).contiguous();
    TORCH_CHECK(diff_proj_fold_runs(x, wi, rows, wt, policy), "diff_proj_block_fc1: shapes ",
                x.sizes(), " / ", wi.sizes(), " / ", wt.fc1_weight.sizes(), " not foldable");
    const int64_t K = wi.size(0);
    Fc1Launch l = fc1_params(x, rows, K, wt, shift, scale1, policy.pdl);
    auto h = at::empty({rows, K}, x.options());
    l.p.proj_weight = wi.data_ptr();
    l.p.proj_bias = bi.data_ptr();
    l.p.proj_k = static_cast<int>(x.size(1));
    l.p.proj_out = h.data_ptr();
    check_cuda(launch_linear(l.p, type, stream_of(x), policy),
               "fused DiffLoss projection + block fc1");
    return {l.out, h};
}

at::Tensor diff_block_fc1(const at::Tensor& h_in, const DiffBlockWeights& wt,
                          const at::Tensor& shift_in, const at::Tensor& scale1_in,
                          const DiffLossPolicy& policy) {
    const c10::cuda::CUDAGuard guard(h_in.device());
    const auto type = h_in.scalar_type();
    const auto h = h_in.contiguous();
    const int64_t M = h.size(0), K = h.size(1);
    Fc1Launch l = fc1_params(h, M, K, wt, shift_in, scale1_in, policy.pdl);
    check_cuda(launch_linear(l.p, type, stream_of(h), policy), "fused DiffLoss block fc1");
    return l.out;
}

at::Tensor diff_block_fc2(const at::Tensor& a_in, const DiffBlockWeights& wt,
                          const at::Tensor& gate_in, const at::Tensor& h_in,
                          const DiffLossPolicy& policy, const DiffKeep& keep) {
    const c10::cuda::CUDAGuard guard(a_in.device());
    const auto type = a_in.scalar_type();
    const auto a = a_in.contiguous();
    const int64_t M = a.size(0), K = a.size(1);
    const auto w = rows_layout(wt.fc2_weight, type).contiguous();
    const auto b = rows_layout(wt.fc2_bias, type).contiguous();
    const auto gate = rows_layout(gate_in, type);
    // Written in place: h must be a contiguous (M, N) tensor of its own.
    at::Tensor h = h_in;
    if (!h.is_contiguous() || h.scalar_type() != type) h = h_in.to(type).contiguous();
    check_rows(gate, M, w.size(0), "gate");
    TORCH_CHECK(h.size(0) == M && h.size(1) == w.size(0), "diff_block_fc2: h ", h.sizes());
    TORCH_CHECK(w.size(1) == K, "diff_block_fc2: weight ", w.sizes(), " vs a ", a.sizes());
    DiffLinearParams p = linear_params(a, M, w, b, h.data_ptr(), DiffPrologue::Copy,
                                       DiffEpilogue::BiasGateResid, policy.pdl);
    p.gate = gate.data_ptr();
    p.gate_stride = gate.stride(0);
    p.resid = h.data_ptr();
    // The dispatch checked their shapes and layout (contiguous, like h).
    p.keep_mlp = keep.mlp.defined() ? keep.mlp.data_ptr() : nullptr;
    p.keep_change = keep.change.defined() ? keep.change.data_ptr() : nullptr;
    check_cuda(launch_linear(p, type, stream_of(a), policy), "fused DiffLoss block fc2");
    return h;
}

namespace {

// The kept blocks as kernel operands (the dispatch checked shapes, dtype and contiguity; the
// gates' layout is fixed here, the copies go to `hold`).
DiffKeptList kept_list(const std::vector<DiffKeptBlock>& blocks, at::ScalarType type,
                       std::vector<at::Tensor>& hold) {
    TORCH_CHECK(blocks.size() <= static_cast<size_t>(kDiffMaxKept),
                "fused DiffLoss kernels: at most ", kDiffMaxKept, " kept blocks");
    DiffKeptList l;
    for (const auto& b : blocks) {
        DiffKeptTerm& k = l.block[l.count++];
        TORCH_CHECK(aligned(b.term.data_ptr(), 16),
                    "fused DiffLoss kernels: a kept term is not 16-byte aligned");
        k.term = b.term.data_ptr();
        k.term_rows = static_cast<int>(b.term.size(0));
        if (b.gate.defined()) {
            hold.push_back(rows_layout(b.gate, type));
            k.gate = hold.back().data_ptr();
            k.gate_stride = hold.back().stride(0);
        }
    }
    return l;
}

}  // namespace

at::Tensor diff_apply_kept(const at::Tensor& h, const std::vector<DiffKeptBlock>& blocks,
                           const DiffLossPolicy& policy) {
    const c10::cuda::CUDAGuard guard(h.device());
    // Updated in place: h must be contiguous and aligned.
    TORCH_CHECK(h.is_contiguous() && aligned(h.data_ptr(), 16),
                "diff_apply_kept: h must be contiguous");
    std::vector<at::Tensor> hold;
    DiffApplyParams p;
    p.h = h.data_ptr();
    p.rows = static_cast<int>(h.size(0));
    p.K = static_cast<int>(h.size(1));
    p.kept = kept_list(blocks, h.scalar_type(), hold);
    p.pdl = policy.pdl;
    const cudaStream_t s = stream_of(h);
    check_cuda(h.scalar_type() == at::kBFloat16 ? launch_diff_apply_bf16(p, s)
                                                : launch_diff_apply_fp16(p, s),
               "fused DiffLoss kept blocks");
    return h;
}

namespace {

// The final kernel's operands but its input rows (the final layer, CFG, the posterior update
// of x (N, C) into x_out); the copies it reads go to `hold`.
DiffFinalParams final_params(int64_t M, int64_t K, const at::Tensor& shift_in,
                             const at::Tensor& scale1_in, const at::Tensor& w_in,
                             const at::Tensor& b_in, double ln_eps, const at::Tensor& x_in,
                             void* x_out, const at::Tensor& noise_in, const at::Tensor& cfg_scale,
                             DiffCfgMode mode, const at::Tensor& delta_in, const DiffStepCoefs& k,
                             bool pdl, std::vector<at::Tensor>& hold) {
    const auto type = x_in.scalar_type();
    const int64_t N = x_in.size(0), C = x_in.size(1);
    const auto w = rows_layout(w_in, type).contiguous(), b = rows_layout(b_in, type).contiguous();
    const auto shift = rows_layout(shift_in, type), scale1 = rows_layout(scale1_in, type);
    check_rows(shift, M, K, "final shift");
    check_rows(scale1, M, K, "final scale1");
    TORCH_CHECK(w.size(0) == 2 * C && w.size(1) == K, "diff_final_step: weight ", w.sizes());
    TORCH_CHECK(x_in.is_contiguous() && aligned(x_in.data_ptr(), 16),
                "diff_final_step: x must be a contiguous ", type, " tensor");
    DiffFinalParams p;
    p.rows = static_cast<int>(M);
    p.K = static_cast<int>(K);
    p.C = static_cast<int>(C);
    p.latents = static_cast<int>(N);
    p.weight = w.data_ptr();
    p.bias = b.data_ptr();
    p.ln_eps = static_cast<float>(ln_eps);
    p.shift = shift.data_ptr();
    p.shift_stride = shift.stride(0);
    p.scale1 = scale1.data_ptr();
    p.scale1_stride = scale1.stride(0);
    p.x = x_in.data_ptr();
    p.x_out = x_out;
    hold.insert(hold.end(), {w, b, shift, scale1});
    if (!k.last) {
        at::Tensor noise = noise_in.scalar_type() == type && noise_in.stride(1) == 1
                               ? noise_in
                               : noise_in.to(type).contiguous();
        TORCH_CHECK(noise.size(0) >= N && noise.size(1) == C, "diff_final_step: noise ",
                    noise.sizes());
        p.noise = noise.data_ptr();
        p.noise_stride = noise.stride(0);
        hold.push_back(noise);
    }
    if (mode == DiffCfgMode::FullKeep || mode == DiffCfgMode::Cached) {
        TORCH_CHECK(delta_in.is_contiguous() && delta_in.scalar_type() == type &&
                        delta_in.size(0) == N && delta_in.size(1) == C,
                    "diff_final_step: delta must be a contiguous (N, C) ", type, " tensor");
        p.delta = delta_in.data_ptr();
    }
    if (mode != DiffCfgMode::None) {
        TORCH_CHECK(cfg_scale.scalar_type() == at::kFloat && cfg_scale.numel() == 1 &&
                        cfg_scale.device() == x_in.device(),
                    "diff_final_step: cfg_scale must be a float32 scalar on the device");
        p.cfg = cfg_scale.data_ptr<float>();
    }
    p.mode = static_cast<DiffCfg>(static_cast<int>(mode));
    p.sqrt_recip_ac = k.sqrt_recip_ac;
    p.sqrt_recipm1_ac = k.sqrt_recipm1_ac;
    p.coef1 = k.coef1;
    p.coef2 = k.coef2;
    p.log_beta = k.log_beta;
    p.log_var_clipped = k.log_var_clipped;
    p.temperature = k.temperature;
    p.last = k.last;
    p.pdl = pdl;
    return p;
}

cudaError_t launch_final(const DiffFinalParams& p, at::ScalarType type, cudaStream_t s) {
    return type == at::kBFloat16 ? launch_diff_final_bf16(p, s) : launch_diff_final_fp16(p, s);
}

}  // namespace

at::Tensor diff_final_step(const at::Tensor& h_in, const at::Tensor& shift,
                           const at::Tensor& scale1, const at::Tensor& w, const at::Tensor& b,
                           double ln_eps, const at::Tensor& x, const at::Tensor& noise,
                           const at::Tensor& cfg_scale, DiffCfgMode mode, const at::Tensor& delta,
                           const DiffStepCoefs& k, const DiffLossPolicy& policy) {
    const c10::cuda::CUDAGuard guard(h_in.device());
    const auto type = h_in.scalar_type();
    const auto h = h_in.contiguous();
    // x (and delta) are updated in place: tensors of this dtype.
    TORCH_CHECK(x.scalar_type() == type, "diff_final_step: x must be a contiguous ", type,
                " tensor (updated in place)");
    std::vector<at::Tensor> hold;
    DiffFinalParams p = final_params(h.size(0), h.size(1), shift, scale1, w, b, ln_eps, x, nullptr,
                                     noise, cfg_scale, mode, delta, k, policy.pdl, hold);
    p.in = h.data_ptr();
    check_cuda(launch_final(p, type, stream_of(h)), "fused DiffLoss final step");
    return x;
}

at::Tensor diff_cached_step(const at::Tensor& x_in, const at::Tensor& w_in, const at::Tensor& b_in,
                            int64_t rows, const std::vector<DiffKeptBlock>& blocks,
                            const at::Tensor& shift, const at::Tensor& scale1, const at::Tensor& w,
                            const at::Tensor& b, double ln_eps, const at::Tensor& noise,
                            const at::Tensor& cfg_scale, DiffCfgMode mode, const at::Tensor& delta,
                            const DiffStepCoefs& k, const DiffLossPolicy& policy) {
    const c10::cuda::CUDAGuard guard(x_in.device());
    const auto type = x_in.scalar_type();
    const auto x = rows_layout(x_in, type).contiguous();
    const auto wi = rows_layout(w_in, type).contiguous(), bi = rows_layout(b_in, type).contiguous();
    auto next = at::empty_like(x);
    std::vector<at::Tensor> hold;
    DiffFinalParams p =
        final_params(rows, wi.size(0), shift, scale1, w, b, ln_eps, x, next.data_ptr(), noise,
                     cfg_scale, mode, delta, k, policy.pdl, hold);
    p.proj_weight = wi.data_ptr();
    p.proj_bias = bi.data_ptr();
    p.proj_k = static_cast<int>(x.size(1));
    p.kept = kept_list(blocks, type, hold);
    const bool halves = mode == DiffCfgMode::Full || mode == DiffCfgMode::FullKeep;
    switch (diff_cached_layout_for(policy.cached_layout, rows)) {
        case DiffCachedLayout::Split:
            p.latents_per_cta = halves ? 4 : 8;  // 8 rows a CTA
            break;
        case DiffCachedLayout::Rows:
            // One latent a CTA while that is at most 128 CTAs (about one wave), else more.
            p.latents_per_cta = static_cast<int>((p.latents + 127) / 128);
            p.all_channels = true;
            break;
        default:
            break;
    }
    check_cuda(launch_final(p, type, stream_of(x)), "fused DiffLoss cached step");
    return next;
}

}  // namespace varscope::kernels::cuda
