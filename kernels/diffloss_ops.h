// The layers of MAR's DiffLoss head (SimpleMLPAdaLN) and one reverse-diffusion step of its
// sampler, as fused operations: CUDA kernels for few rows (kernels/cuda/diffloss_kernel.cuh)
// with LibTorch references beside them. The references are the op sequence of the module path
// (core/models/diffloss.cpp forward_modulated and DiffusionSampler's step): the same ops in the
// same order, so a loop over them on the CPU gives the module path's values exactly (tested).
//
//   diff_input_proj:  h = x[m % N] W^T + b (with CFG the 2N rows repeat the N latents)
//   diff_block_fc1:   a = silu((LayerNorm(h) * scale1 + shift) W1^T + b1)
//   diff_proj_block_fc1: the two above as one kernel (block 0's fc1 computes h itself)
//   diff_block_fc2:   h' = h + gate * (a W2^T + b2)
//   diff_final_step:  out = (LayerNorm(h) * scale1 + shift) Wf^T + bf (no affine), then eps with
//                     CFG, the learned-range log variance and the posterior update of x.
//
//   LazyMAR's head MLP cache (DiffusionSampler's HeadMlpStep) in the same chain:
//   diff_block_fc2 with DiffKeep: also writes the block's MLP term or output change (refresh)
//   diff_apply_kept:  h after blocks replayed from their kept terms (warm-up steps)
//   diff_cached_step: a step that replays every block: input projection, the kept blocks and
//                     diff_final_step as one kernel
//
// The CUDA path runs for CUDA float16/bfloat16 tensors of at most kDiffMaxRows rows and widths
// that are multiples of 8 up to 2048 (diff_head_cuda_supported); KernelPolicy::reference selects
// the references. The CUDA fc2 and final step write in place (h, x, delta) and return those
// tensors; the references return new tensors. Each entry point takes the policy whose `diff`
// switches (kernels/exec_policy.h) pick among kernels that give the same values.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

#include "kernels/attention_dispatch.h"
#include "kernels/exec_policy.h"

namespace varscope::kernels {

// Weights of one residual block (LayerNorm affine may be undefined).
struct DiffBlockWeights {
    at::Tensor ln_weight, ln_bias;
    double ln_eps = 1e-6;
    at::Tensor fc1_weight, fc1_bias, fc2_weight, fc2_bias;
};

// What fc2 also writes at a step that refreshes the head MLP cache (undefined = nothing): the
// block's MLP term before its gate, or its output change h' - h; (M, W) contiguous.
struct DiffKeep {
    at::Tensor mlp, change;
};

// A block replayed from the head MLP cache: h = h + gate * term (gate defined: the kept MLP
// term) or h = h + term (the kept output change), each op rounded to the dtype as the module
// path's. term (kept rows, W) contiguous: row m reads term row m % kept rows (the released code
// takes the first rows of a larger kept tensor, or repeats a half-sized one twice).
struct DiffKeptBlock {
    at::Tensor term, gate;
};

// How the final step forms eps (DiffusionSampler::sample's CFG and head condition cache).
enum class DiffCfgMode {
    None,      // h has N rows: eps = out[:, :C]
    Full,      // 2N rows (conditional first): eps = u + s (c - u)
    FullKeep,  // as Full and delta = c - u is written (the cache's refresh step)
    Cached     // N conditional rows: u = c - delta
};

// The schedule's float32 coefficients of reverse step i.
struct DiffStepCoefs {
    float sqrt_recip_ac = 0, sqrt_recipm1_ac = 0, coef1 = 0, coef2 = 0;
    float log_beta = 0, log_var_clipped = 0;
    float temperature = 1;
    bool last = false;  // i == 0: x = mean, no noise
};

// x (N, C) -> (rows, W); rows a multiple of N.
at::Tensor diff_input_proj(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                           int64_t rows, KernelPath path = KernelPath::Auto,
                           const KernelPolicy& policy = {});
// h (M, W); shift, scale1 (M, W) with a contiguous last dim.
at::Tensor diff_block_fc1(const at::Tensor& h, const DiffBlockWeights& w, const at::Tensor& shift,
                          const at::Tensor& scale1, KernelPath path = KernelPath::Auto,
                          const KernelPolicy& policy = {});
// diff_input_proj then diff_block_fc1 on its output: returns {a, h}. On CUDA one kernel (the
// input projection folded into fc1's prologue; each CTA projects its rows itself and writes the
// features it owns to h, which fc2 then updates in place), with the two kernels' values bit for
// bit; two kernels where the fold does not apply (latent width not 8/16, non-square fc1, 16/32-row
// tiles) or is switched off (DiffLossPolicy::fold_proj).
std::pair<at::Tensor, at::Tensor> diff_proj_block_fc1(
    const at::Tensor& x, const at::Tensor& in_weight, const at::Tensor& in_bias, int64_t rows,
    const DiffBlockWeights& w, const at::Tensor& shift, const at::Tensor& scale1,
    KernelPath path = KernelPath::Auto, const KernelPolicy& policy = {});
// a, h (M, W), gate (M, W): h + gate * fc2(a) (in place into h on CUDA); keep: see DiffKeep.
at::Tensor diff_block_fc2(const at::Tensor& a, const DiffBlockWeights& w, const at::Tensor& gate,
                          const at::Tensor& h, KernelPath path = KernelPath::Auto,
                          const DiffKeep& keep = {}, const KernelPolicy& policy = {});
// h (M, W) after the kept blocks, in order (in place on CUDA). At most 16 blocks.
at::Tensor diff_apply_kept(const at::Tensor& h, const std::vector<DiffKeptBlock>& blocks,
                           KernelPath path = KernelPath::Auto, const KernelPolicy& policy = {});
// h (M, W), x (N, C) latents, noise (N, C) rows (row stride free; ignored when last),
// cfg_scale 0-dim float32 on the device (undefined for None), delta (N, C) for FullKeep/Cached.
// Returns the next x (in place on CUDA; the reference also fills delta in place for FullKeep).
at::Tensor diff_final_step(const at::Tensor& h, const at::Tensor& shift, const at::Tensor& scale1,
                           const at::Tensor& weight, const at::Tensor& bias, double ln_eps,
                           const at::Tensor& x, const at::Tensor& noise,
                           const at::Tensor& cfg_scale, DiffCfgMode mode, const at::Tensor& delta,
                           const DiffStepCoefs& coefs, KernelPath path = KernelPath::Auto,
                           const KernelPolicy& policy = {});

// diff_input_proj (rows rows), diff_apply_kept, then diff_final_step on the result, as one
// kernel on CUDA (latent width C of 8 or 16). x is only read: the next x is a new tensor.
at::Tensor diff_cached_step(const at::Tensor& x, const at::Tensor& in_weight,
                            const at::Tensor& in_bias, int64_t rows,
                            const std::vector<DiffKeptBlock>& blocks, const at::Tensor& shift,
                            const at::Tensor& scale1, const at::Tensor& weight,
                            const at::Tensor& bias, double ln_eps, const at::Tensor& noise,
                            const at::Tensor& cfg_scale, DiffCfgMode mode, const at::Tensor& delta,
                            const DiffStepCoefs& coefs, KernelPath path = KernelPath::Auto,
                            const KernelPolicy& policy = {});

// Whether the fused CUDA kernels would run for a head of width `width` on `rows` rows with
// tensors like `like` (device, dtype, build, policy, sizes).
bool diff_head_cuda_supported(const at::Tensor& like, int64_t rows, int64_t width,
                              const KernelPolicy& policy = {}, std::string* why_not = nullptr);
// ... for diff_cached_step, which in the Rows layout (DiffCachedLayout) takes up to 2048 rows.
bool diff_cached_step_cuda_supported(const at::Tensor& like, int64_t rows, int64_t width,
                                     const KernelPolicy& policy = {},
                                     std::string* why_not = nullptr);
// The layout diff_cached_step takes for `rows` rows under `chosen` (Auto resolved).
DiffCachedLayout diff_cached_layout_for(DiffCachedLayout chosen, int64_t rows);

namespace reference {
at::Tensor diff_input_proj(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                           int64_t rows);
at::Tensor diff_block_fc1(const at::Tensor& h, const DiffBlockWeights& w, const at::Tensor& shift,
                          const at::Tensor& scale1);
at::Tensor diff_block_fc2(const at::Tensor& a, const DiffBlockWeights& w, const at::Tensor& gate,
                          const at::Tensor& h, const DiffKeep& keep = {});
at::Tensor diff_apply_kept(const at::Tensor& h, const std::vector<DiffKeptBlock>& blocks);
at::Tensor diff_cached_step(const at::Tensor& x, const at::Tensor& in_weight,
                            const at::Tensor& in_bias, int64_t rows,
                            const std::vector<DiffKeptBlock>& blocks, const at::Tensor& shift,
                            const at::Tensor& scale1, const at::Tensor& weight,
                            const at::Tensor& bias, double ln_eps, const at::Tensor& noise,
                            const at::Tensor& cfg_scale, DiffCfgMode mode, const at::Tensor& delta,
                            const DiffStepCoefs& coefs);
at::Tensor diff_final_step(const at::Tensor& h, const at::Tensor& shift, const at::Tensor& scale1,
                           const at::Tensor& weight, const at::Tensor& bias, double ln_eps,
                           const at::Tensor& x, const at::Tensor& noise,
                           const at::Tensor& cfg_scale, DiffCfgMode mode, const at::Tensor& delta,
                           const DiffStepCoefs& coefs);
}  // namespace reference

}  // namespace varscope::kernels
