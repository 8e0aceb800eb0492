#include "kernels/diffloss_ops.h"

#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda_path.h"

#ifdef VARSCOPE_KERNELS_CUDA
#include "kernels/cuda/diffloss_cuda.h"
#include "kernels/cuda/diffloss_params.h"
#endif

namespace varscope::kernels {
namespace {

constexpr int64_t kMaxRows = 256;    // kDiffMaxRows
constexpr int64_t kMaxWidth = 2048;  // kDiffMaxWidth
// The cached step in the Rows layout: at most 16 rows a CTA with a latent per 128 rows of a
// call (diffloss_cuda.cpp), so up to 1024 latents with both CFG halves, 2048 without.
constexpr int64_t kMaxCachedRows = 2048;

bool use_cuda(const at::Tensor& like, int64_t rows, int64_t width, KernelPath path,
              const KernelPolicy& policy, bool cached_step = false) {
    if (path == KernelPath::Reference) return false;
    std::string why;
    const bool ok = cached_step ? diff_cached_step_cuda_supported(like, rows, width, policy, &why)
                                : diff_head_cuda_supported(like, rows, width, policy, &why);
    TORCH_CHECK(ok || path != KernelPath::Cuda, "fused DiffLoss kernel requested but ", why);
    return ok;
}

}  // namespace

namespace reference {

at::Tensor diff_input_proj(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                           int64_t rows) {
    TORCH_CHECK(x.dim() == 2 && rows % x.size(0) == 0, "diff_input_proj: rows ", rows,
                " must be a multiple of x's ", x.size(0));
    const at::Tensor input =
        rows == x.size(0) ? x : at::cat(std::vector<at::Tensor>(rows / x.size(0), x));
    return at::linear(input, weight, bias);
}

at::Tensor diff_block_fc1(const at::Tensor& h, const DiffBlockWeights& w, const at::Tensor& shift,
                          const at::Tensor& scale1) {
    const auto n = at::layer_norm(h, {h.size(1)}, w.ln_weight, w.ln_bias, w.ln_eps);
    return at::silu(at::linear(n * scale1 + shift, w.fc1_weight, w.fc1_bias));
}

at::Tensor diff_block_fc2(const at::Tensor& a, const DiffBlockWeights& w, const at::Tensor& gate,
                          const at::Tensor& h, const DiffKeep& keep) {
    const auto mlp = at::linear(a, w.fc2_weight, w.fc2_bias);
    auto out = h + gate * mlp;
    if (keep.mlp.defined()) keep.mlp.copy_(mlp);
    if (keep.change.defined()) keep.change.copy_(out - h);
    return out;
}

at::Tensor diff_apply_kept(const at::Tensor& h_in, const std::vector<DiffKeptBlock>& blocks) {
    at::Tensor h = h_in;
    const int64_t rows = h.size(0);
    for (const auto& b : blocks) {
        const int64_t kept = b.term.size(0);
        const at::Tensor term =
            kept == rows ? b.term
                         : b.term.index_select(
                               0, at::arange(rows, b.term.options().dtype(at::kLong)) % kept);
        h = b.gate.defined() ? h + b.gate.narrow(0, 0, rows) * term : h + term;
    }
    return h;
}

at::Tensor diff_cached_step(const at::Tensor& x, const at::Tensor& in_weight,
                            const at::Tensor& in_bias, int64_t rows,
                            const std::vector<DiffKeptBlock>& blocks, const at::Tensor& shift,
                            const at::Tensor& scale1, const at::Tensor& weight,
                            const at::Tensor& bias, double ln_eps, const at::Tensor& noise,
                            const at::Tensor& cfg_scale, DiffCfgMode mode, const at::Tensor& delta,
                            const DiffStepCoefs& coefs) {
    const auto h =
        reference::diff_apply_kept(reference::diff_input_proj(x, in_weight, in_bias, rows), blocks);
    return reference::diff_final_step(h, shift, scale1, weight, bias, ln_eps, x, noise, cfg_scale,
                                      mode, delta, coefs);
}

at::Tensor diff_final_step(const at::Tensor& h, const at::Tensor& shift, const at::Tensor& scale1,
                           const at::Tensor& weight, const at::Tensor& bias, double ln_eps,
                           const at::Tensor& x, const at::Tensor& noise,
                           const at::Tensor& cfg_scale, DiffCfgMode mode, const at::Tensor& delta,
                           const DiffStepCoefs& k) {
    const int64_t N = x.size(0), C = x.size(1);
    const auto out =
        at::linear(at::layer_norm(h, {h.size(1)}, {}, {}, ln_eps) * scale1 + shift, weight, bias);
    at::Tensor eps, var_values;
    if (mode == DiffCfgMode::Cached) {
        const auto cond = out.narrow(1, 0, C);
        const auto uncond = cond - delta;
        eps = uncond + cfg_scale * (cond - uncond);
        var_values = out.narrow(1, C, C);
    } else {
        eps = out.narrow(1, 0, C);
        var_values = out.narrow(1, C, C);
        if (mode != DiffCfgMode::None) {
            const auto cond = eps.narrow(0, 0, N), uncond = eps.narrow(0, N, N);
            if (mode == DiffCfgMode::FullKeep) delta.copy_(cond - uncond);
            eps = uncond + cfg_scale * (cond - uncond);
            var_values = var_values.narrow(0, 0, N);
        }
    }
    const auto frac = (var_values + 1) / 2;
    const auto log_variance = frac * k.log_beta + (1 - frac) * k.log_var_clipped;
    const auto x0 = k.sqrt_recip_ac * x - k.sqrt_recipm1_ac * eps;
    const auto mean = k.coef1 * x0 + k.coef2 * x;
    if (k.last) return mean;
    return mean + at::exp(0.5 * log_variance) * noise * k.temperature;
}

}  // namespace reference

DiffCachedLayout diff_cached_layout_for(DiffCachedLayout chosen, int64_t rows) {
    if (chosen != DiffCachedLayout::Auto) return chosen;
    // H200, MAR-B head: 2 rows Split 16.0 vs Rows 16.8 us per step, 14 rows 29.1 vs 23.4.
    return rows <= 2 ? DiffCachedLayout::Split : DiffCachedLayout::Rows;
}

namespace {

// The fused kernels' conditions, with the most rows the kernel in question takes.
bool head_cuda_supported(const at::Tensor& like, int64_t rows, int64_t max_rows, int64_t width,
                         const KernelPolicy& policy, std::string* why_not) {
    if (auto why = cuda_path_blocker(policy, {like}); !why.empty())
        return unsupported(why_not, std::move(why));
    const auto t = like.scalar_type();
    if (t != at::kHalf && t != at::kBFloat16)
        return unsupported(why_not, "the fused DiffLoss kernels take float16 or bfloat16 only");
    if (rows < 1 || rows > max_rows)
        return unsupported(
            why_not, "the fused DiffLoss kernels take 1.." + std::to_string(max_rows) + " rows");
    if (width < 8 || width > kMaxWidth || width % 8 != 0)
        return unsupported(why_not,
                           "the fused DiffLoss kernels take widths that are multiples of 8 up to " +
                               std::to_string(kMaxWidth));
    return true;
}

}  // namespace

bool diff_head_cuda_supported(const at::Tensor& like, int64_t rows, int64_t width,
                              const KernelPolicy& policy, std::string* why_not) {
    return head_cuda_supported(like, rows, kMaxRows, width, policy, why_not);
}

bool diff_cached_step_cuda_supported(const at::Tensor& like, int64_t rows, int64_t width,
                                     const KernelPolicy& policy, std::string* why_not) {
    const bool by_rows =
        diff_cached_layout_for(policy.diff.cached_layout, rows) == DiffCachedLayout::Rows;
    return head_cuda_supported(like, rows, by_rows ? kMaxCachedRows : kMaxRows, width, policy,
                               why_not);
}

at::Tensor diff_input_proj(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                           int64_t rows, KernelPath path, const KernelPolicy& policy) {
    TORCH_CHECK(x.dim() == 2 && x.size(0) > 0 && rows % x.size(0) == 0,
                "diff_input_proj: rows must be a multiple of x's rows");
#ifdef VARSCOPE_KERNELS_CUDA
    if (use_cuda(x, rows, x.size(1), path, policy))
        return cuda::diff_input_proj(x, weight, bias, rows, policy.diff);
#else
    use_cuda(x, rows, x.size(1), path, policy);
#endif
    return reference::diff_input_proj(x, weight, bias, rows);
}

at::Tensor diff_block_fc1(const at::Tensor& h, const DiffBlockWeights& w, const at::Tensor& shift,
                          const at::Tensor& scale1, KernelPath path, const KernelPolicy& policy) {
#ifdef VARSCOPE_KERNELS_CUDA
    if (use_cuda(h, h.size(0), h.size(1), path, policy))
        return cuda::diff_block_fc1(h, w, shift, scale1, policy.diff);
#else
    use_cuda(h, h.size(0), h.size(1), path, policy);
#endif
    return reference::diff_block_fc1(h, w, shift, scale1);
}

std::pair<at::Tensor, at::Tensor> diff_proj_block_fc1(
    const at::Tensor& x, const at::Tensor& in_weight, const at::Tensor& in_bias, int64_t rows,
    const DiffBlockWeights& w, const at::Tensor& shift, const at::Tensor& scale1, KernelPath path,
    const KernelPolicy& policy) {
    TORCH_CHECK(x.dim() == 2 && x.size(0) > 0 && rows % x.size(0) == 0,
                "diff_proj_block_fc1: rows must be a multiple of x's rows");
#ifdef VARSCOPE_KERNELS_CUDA
    if (use_cuda(x, rows, in_weight.size(0), path, policy) && policy.diff.fold_proj &&
        cuda::diff_proj_fold_runs(x, in_weight, rows, w, policy.diff))
        return cuda::diff_proj_block_fc1(x, in_weight, in_bias, rows, w, shift, scale1,
                                         policy.diff);
#endif
    // The two layers one after the other (each on CUDA or as its reference, as `path` says).
    auto h = diff_input_proj(x, in_weight, in_bias, rows, path, policy);
    auto a = diff_block_fc1(h, w, shift, scale1, path, policy);
    return {std::move(a), std::move(h)};
}

at::Tensor diff_block_fc2(const at::Tensor& a, const DiffBlockWeights& w, const at::Tensor& gate,
                          const at::Tensor& h, KernelPath path, const DiffKeep& keep,
                          const KernelPolicy& policy) {
    for (const auto* t : {&keep.mlp, &keep.change})
        TORCH_CHECK(!t->defined() || (t->sizes() == h.sizes() && t->is_contiguous() &&
                                      t->scalar_type() == h.scalar_type()),
                    "diff_block_fc2: kept outputs must be contiguous tensors shaped like h");
#ifdef VARSCOPE_KERNELS_CUDA
    if (use_cuda(a, a.size(0), a.size(1), path, policy))
        return cuda::diff_block_fc2(a, w, gate, h, policy.diff, keep);
#else
    use_cuda(a, a.size(0), a.size(1), path, policy);
#endif
    return reference::diff_block_fc2(a, w, gate, h, keep);
}

namespace {

void check_kept(const std::vector<DiffKeptBlock>& blocks, int64_t rows, int64_t width,
                at::ScalarType type, const char* what) {
    TORCH_CHECK(blocks.size() <= 16, what, ": at most 16 kept blocks");
    for (const auto& b : blocks) {
        TORCH_CHECK(
            b.term.defined() && b.term.dim() == 2 && b.term.size(0) > 0 &&
                b.term.size(1) == width && b.term.is_contiguous() && b.term.scalar_type() == type,
            what, ": a kept term must be a contiguous (rows, ", width, ") ", type, " tensor");
        TORCH_CHECK(b.term.size(0) >= rows || rows % b.term.size(0) == 0, what, ": ",
                    b.term.size(0), " kept rows cannot serve ", rows);
        TORCH_CHECK(!b.gate.defined() ||
                        (b.gate.dim() == 2 && b.gate.size(0) >= rows && b.gate.size(1) == width),
                    what, ": a gate must have (", rows, ", ", width, ") rows");
    }
}

}  // namespace

at::Tensor diff_apply_kept(const at::Tensor& h, const std::vector<DiffKeptBlock>& blocks,
                           KernelPath path, const KernelPolicy& policy) {
    TORCH_CHECK(h.dim() == 2, "diff_apply_kept: h (M, W) expected");
    check_kept(blocks, h.size(0), h.size(1), h.scalar_type(), "diff_apply_kept");
#ifdef VARSCOPE_KERNELS_CUDA
    if (use_cuda(h, h.size(0), h.size(1), path, policy))
        return cuda::diff_apply_kept(h, blocks, policy.diff);
#else
    use_cuda(h, h.size(0), h.size(1), path, policy);
#endif
    return reference::diff_apply_kept(h, blocks);
}

at::Tensor diff_cached_step(const at::Tensor& x, const at::Tensor& in_weight,
                            const at::Tensor& in_bias, int64_t rows,
                            const std::vector<DiffKeptBlock>& blocks, const at::Tensor& shift,
                            const at::Tensor& scale1, const at::Tensor& weight,
                            const at::Tensor& bias, double ln_eps, const at::Tensor& noise,
                            const at::Tensor& cfg_scale, DiffCfgMode mode, const at::Tensor& delta,
                            const DiffStepCoefs& coefs, KernelPath path,
                            const KernelPolicy& policy) {
    TORCH_CHECK(
        x.dim() == 2 && x.size(0) > 0 && in_weight.dim() == 2 && in_weight.size(1) == x.size(1),
        "diff_cached_step: x (N, C) and an input projection (W, C) expected");
    const int64_t N = x.size(0), W = in_weight.size(0);
    const bool both = mode == DiffCfgMode::Full || mode == DiffCfgMode::FullKeep;
    TORCH_CHECK(rows == (both ? 2 * N : N), "diff_cached_step: ", rows, " rows, expected ",
                both ? 2 * N : N);
    check_kept(blocks, rows, W, x.scalar_type(), "diff_cached_step");
    TORCH_CHECK(weight.size(0) == 2 * x.size(1),
                "diff_cached_step: the final layer must output 2C");
    TORCH_CHECK(mode == DiffCfgMode::None || cfg_scale.defined(),
                "diff_cached_step: CFG needs a scale");
    TORCH_CHECK(mode == DiffCfgMode::None || mode == DiffCfgMode::Full || delta.defined(),
                "diff_cached_step: the head condition cache needs a delta tensor");
#ifdef VARSCOPE_KERNELS_CUDA
    if (use_cuda(x, rows, W, path, policy, true) && (x.size(1) == 8 || x.size(1) == 16))
        return cuda::diff_cached_step(x, in_weight, in_bias, rows, blocks, shift, scale1, weight,
                                      bias, ln_eps, noise, cfg_scale, mode, delta, coefs,
                                      policy.diff);
    TORCH_CHECK(path != KernelPath::Cuda || x.size(1) == 8 || x.size(1) == 16,
                "fused DiffLoss cached step requested but the latent width ", x.size(1),
                " is not 8 or 16");
#else
    use_cuda(x, rows, W, path, policy, true);
#endif
    // The three ops one after the other (each on CUDA or as its reference, as `path` says).
    const auto h = diff_apply_kept(diff_input_proj(x, in_weight, in_bias, rows, path, policy),
                                   blocks, path, policy);
    return diff_final_step(h, shift, scale1, weight, bias, ln_eps, x.clone(), noise, cfg_scale,
                           mode, delta, coefs, path, policy);
}

at::Tensor diff_final_step(const at::Tensor& h, const at::Tensor& shift, const at::Tensor& scale1,
                           const at::Tensor& weight, const at::Tensor& bias, double ln_eps,
                           const at::Tensor& x, const at::Tensor& noise,
                           const at::Tensor& cfg_scale, DiffCfgMode mode, const at::Tensor& delta,
                           const DiffStepCoefs& coefs, KernelPath path,
                           const KernelPolicy& policy) {
    TORCH_CHECK(x.dim() == 2 && h.dim() == 2, "diff_final_step: x (N, C) and h (M, W) expected");
    const int64_t N = x.size(0);
    const bool both = mode == DiffCfgMode::Full || mode == DiffCfgMode::FullKeep;
    TORCH_CHECK(h.size(0) == (both ? 2 * N : N), "diff_final_step: h has ", h.size(0),
                " rows, expected ", both ? 2 * N : N);
    TORCH_CHECK(weight.size(0) == 2 * x.size(1), "diff_final_step: the final layer must output 2C");
    TORCH_CHECK(mode == DiffCfgMode::None || cfg_scale.defined(),
                "diff_final_step: CFG needs a scale");
    TORCH_CHECK(mode == DiffCfgMode::None || mode == DiffCfgMode::Full || delta.defined(),
                "diff_final_step: the head condition cache needs a delta tensor");
#ifdef VARSCOPE_KERNELS_CUDA
    if (use_cuda(h, h.size(0), h.size(1), path, policy))
        return cuda::diff_final_step(h, shift, scale1, weight, bias, ln_eps, x, noise, cfg_scale,
                                     mode, delta, coefs, policy.diff);
#else
    use_cuda(h, h.size(0), h.size(1), path, policy);
#endif
    return reference::diff_final_step(h, shift, scale1, weight, bias, ln_eps, x, noise, cfg_scale,
                                      mode, delta, coefs);
}

}  // namespace varscope::kernels
