#include "kernels/diffloss_ops.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/cuda_path.h"

#ifdef VARSCOPE_KERNELS_CUDA
#include "kernels/cuda/diffloss_cuda.h"
#include "kernels/cuda/diffloss_params.h"
#endif

namespace varscope::kernels {
namespace {

std::atomic<int> g_pdl{-1};        // -1: from the environment
std::atomic<int> g_row_split{-1};  // -1: from the environment
std::atomic<int> g_fold_proj{-1};  // -1: from the environment
std::atomic<int> g_lean{-1};       // -1: from the environment

// A switch: set, else the environment variable (on unless it is "0").
bool switch_on(const std::atomic<int>& v, const char* env_name) {
    const int set = v.load();
    if (set >= 0) return set == 1;
    const char* env = std::getenv(env_name);
    return env == nullptr || std::strcmp(env, "0") != 0;
}

constexpr int64_t kMaxRows = 256;    // kDiffMaxRows
constexpr int64_t kMaxWidth = 2048;  // kDiffMaxWidth

bool use_cuda(const at::Tensor& like, int64_t rows, int64_t width, KernelPath path) {
    if (path == KernelPath::Reference) return false;
    std::string why;
    const bool ok = diff_head_cuda_supported(like, rows, width, &why);
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
                          const at::Tensor& h) {
    return h + gate * at::linear(a, w.fc2_weight, w.fc2_bias);
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

void set_diff_pdl(bool on) {
    g_pdl = on ? 1 : 0;
}

bool diff_pdl_enabled() {
    const int v = g_pdl.load();
    if (v >= 0) return v == 1;
    const char* env = std::getenv("VARSCOPE_DIFF_PDL");
    return !(env != nullptr && std::strcmp(env, "0") == 0);
}

void set_diff_row_split(bool on) {
    g_row_split = on ? 1 : 0;
}

bool diff_row_split_enabled() {
    const int v = g_row_split.load();
    if (v >= 0) return v == 1;
    const char* env = std::getenv("VARSCOPE_DIFF_ROW_SPLIT");
    return env == nullptr || std::strcmp(env, "0") != 0;  // default on (timed: MAR-B 500 vs 567 ms)
}

void set_diff_fold_proj(bool on) {
    g_fold_proj = on ? 1 : 0;
}

bool diff_fold_proj_enabled() {
    return switch_on(g_fold_proj, "VARSCOPE_DIFF_FOLD_PROJ");
}

void set_diff_lean(bool on) {
    g_lean = on ? 1 : 0;
}

bool diff_lean_enabled() {
    return switch_on(g_lean, "VARSCOPE_DIFF_LEAN");
}

bool diff_head_cuda_supported(const at::Tensor& like, int64_t rows, int64_t width,
                              std::string* why_not) {
    if (auto why = cuda_path_blocker({like}); !why.empty())
        return unsupported(why_not, std::move(why));
    const auto t = like.scalar_type();
    if (t != at::kHalf && t != at::kBFloat16)
        return unsupported(why_not, "the fused DiffLoss kernels take float16 or bfloat16 only");
    if (rows < 1 || rows > kMaxRows)
        return unsupported(
            why_not, "the fused DiffLoss kernels take 1.." + std::to_string(kMaxRows) + " rows");
    if (width < 8 || width > kMaxWidth || width % 8 != 0)
        return unsupported(why_not,
                           "the fused DiffLoss kernels take widths that are multiples of 8 up to " +
                               std::to_string(kMaxWidth));
    return true;
}

at::Tensor diff_input_proj(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                           int64_t rows, KernelPath path) {
    TORCH_CHECK(x.dim() == 2 && x.size(0) > 0 && rows % x.size(0) == 0,
                "diff_input_proj: rows must be a multiple of x's rows");
#ifdef VARSCOPE_KERNELS_CUDA
    if (use_cuda(x, rows, x.size(1), path))
        return cuda::diff_input_proj(x, weight, bias, rows, diff_pdl_enabled());
#else
    use_cuda(x, rows, x.size(1), path);
#endif
    return reference::diff_input_proj(x, weight, bias, rows);
}

at::Tensor diff_block_fc1(const at::Tensor& h, const DiffBlockWeights& w, const at::Tensor& shift,
                          const at::Tensor& scale1, KernelPath path) {
#ifdef VARSCOPE_KERNELS_CUDA
    if (use_cuda(h, h.size(0), h.size(1), path))
        return cuda::diff_block_fc1(h, w, shift, scale1, diff_pdl_enabled());
#else
    use_cuda(h, h.size(0), h.size(1), path);
#endif
    return reference::diff_block_fc1(h, w, shift, scale1);
}

std::pair<at::Tensor, at::Tensor> diff_proj_block_fc1(
    const at::Tensor& x, const at::Tensor& in_weight, const at::Tensor& in_bias, int64_t rows,
    const DiffBlockWeights& w, const at::Tensor& shift, const at::Tensor& scale1, KernelPath path) {
    TORCH_CHECK(x.dim() == 2 && x.size(0) > 0 && rows % x.size(0) == 0,
                "diff_proj_block_fc1: rows must be a multiple of x's rows");
#ifdef VARSCOPE_KERNELS_CUDA
    if (use_cuda(x, rows, in_weight.size(0), path) && diff_fold_proj_enabled() &&
        cuda::diff_proj_fold_runs(x, in_weight, rows, w))
        return cuda::diff_proj_block_fc1(x, in_weight, in_bias, rows, w, shift, scale1,
                                         diff_pdl_enabled());
#endif
    // The two layers one after the other (each on CUDA or as its reference, as `path` says).
    auto h = diff_input_proj(x, in_weight, in_bias, rows, path);
    auto a = diff_block_fc1(h, w, shift, scale1, path);
    return {std::move(a), std::move(h)};
}

at::Tensor diff_block_fc2(const at::Tensor& a, const DiffBlockWeights& w, const at::Tensor& gate,
                          const at::Tensor& h, KernelPath path) {
#ifdef VARSCOPE_KERNELS_CUDA
    if (use_cuda(a, a.size(0), a.size(1), path))
        return cuda::diff_block_fc2(a, w, gate, h, diff_pdl_enabled());
#else
    use_cuda(a, a.size(0), a.size(1), path);
#endif
    return reference::diff_block_fc2(a, w, gate, h);
}

at::Tensor diff_final_step(const at::Tensor& h, const at::Tensor& shift, const at::Tensor& scale1,
                           const at::Tensor& weight, const at::Tensor& bias, double ln_eps,
                           const at::Tensor& x, const at::Tensor& noise,
                           const at::Tensor& cfg_scale, DiffCfgMode mode, const at::Tensor& delta,
                           const DiffStepCoefs& coefs, KernelPath path) {
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
    if (use_cuda(h, h.size(0), h.size(1), path))
        return cuda::diff_final_step(h, shift, scale1, weight, bias, ln_eps, x, noise, cfg_scale,
                                     mode, delta, coefs, diff_pdl_enabled());
#else
    use_cuda(h, h.size(0), h.size(1), path);
#endif
    return reference::diff_final_step(h, shift, scale1, weight, bias, ln_eps, x, noise, cfg_scale,
                                      mode, delta, coefs);
}

}  // namespace varscope::kernels
