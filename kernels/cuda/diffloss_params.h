// Launch parameters of the fused DiffLoss-head kernels (diffloss_kernel.cuh, one .cu per element
// type). Plain C++ so the .cu files never include LibTorch. All row-major; strides in elements.
#pragma once

#include <cuda_runtime_api.h>

namespace varscope::kernels::cuda {

enum class DiffElem : int { Float16 = 1, BFloat16 = 2 };

// What a linear layer's kernel does before its GEMV (per row, redundantly in every CTA: the
// rows are few and each CTA needs all of them).
enum class DiffPrologue : int {
    Copy = 0,         // in[m % in_rows] (the input projection: CFG rows repeat the N latents)
    NormModulate = 1  // LayerNorm(in[m]) (optional affine) * scale1[m] + shift[m]
};
// ... and after it, per output element (m, j), with acc = in'[m] . W[j] in float32.
enum class DiffEpilogue : int {
    Bias = 0,          // out = acc + b
    BiasSilu = 1,      // out = silu(acc + b)
    BiasGateResid = 2  // out = resid + gate * (acc + b); resid may alias out (same element)
};

// Limits of the kernels (the dispatch checks them).
constexpr int kDiffMaxWidth = 2048;  // input features of a layer (16-byte chunks in registers)
constexpr int kDiffMaxRows = 256;    // rows of one call (the final kernel keeps two floats a row)
constexpr int kDiffThreads = 256;    // 8 warps; one output feature per warp per pass
constexpr int kDiffMaxKept = 16;     // replayed blocks of one step (MAR-H's head has 12)

// LazyMAR's head MLP cache (DiffusionSampler's HeadMlpStep) replays a block it does not
// compute from a kept (term_rows, K) tensor, as the module path's element-wise ops, each
// rounded to T: h = h + T(gate * term) (gate set: the block's kept MLP term) or h = h + term
// (gate null: its kept output change). Row m reads term row m % term_rows (the released code
// cuts kept rows to the step's, or repeats them twice).
struct DiffKeptTerm {
    const void* term = nullptr;
    int term_rows = 0;
    const void* gate = nullptr;  // (rows, K) with row stride gate_stride
    long long gate_stride = 0;
};
struct DiffKeptList {
    DiffKeptTerm block[kDiffMaxKept];
    int count = 0;
};

// diff_apply_kept: h (rows, K) updated in place by the kept blocks in order.
struct DiffApplyParams {
    void* h = nullptr;
    int rows = 0, K = 0;
    DiffKeptList kept;
    bool pdl = false;
};

struct DiffLinearParams {
    const void* in = nullptr;      // (in_rows, K)
    int in_rows = 0;               // rows of `in` (Copy: rows repeat modulo this)
    int rows = 0;                  // M: output rows
    int K = 0, N = 0;              // input / output features
    const void* weight = nullptr;  // (N, K)
    const void* bias = nullptr;    // (N)
    // NormModulate
    const void* ln_weight = nullptr;  // (K) or null (no affine)
    const void* ln_bias = nullptr;    // (K) or null
    float ln_eps = 1e-6f;
    const void* shift = nullptr;   // rows x K, row stride below
    const void* scale1 = nullptr;  // 1 + scale
    long long shift_stride = 0, scale1_stride = 0;
    // BiasGateResid
    const void* gate = nullptr;
    long long gate_stride = 0;
    const void* resid = nullptr;  // (rows, N)
    void* out = nullptr;          // (rows, N)
    DiffPrologue prologue = DiffPrologue::Copy;
    DiffEpilogue epilogue = DiffEpilogue::Bias;
    bool pdl = false;  // launched with programmatic dependent launch (overlaps the launch)
    // Row tiles of 8 spread over blockIdx.y instead of one CTA per feature group taking all
    // rows in 8/16/32-row tiles (same sums up to float32 reassociation; opt-in until measured,
    // see diffloss_ops.h).
    bool row_split = false;
    // Lean prologue/body (default on; bit-identical to off): the LayerNorm affine is staged in
    // shared memory before the wait for the previous kernel (no dependent L2 round trip after
    // the row statistics), and tile rows past `rows` are skipped in the dot products.
    bool lean = false;
    // Input projection folded into this (block 0 fc1) kernel: the input rows are
    // proj_in[m % in_rows] (proj_k features, 8 or 16) times proj_weight (K, proj_k) + proj_bias,
    // rounded to T and written to proj_out (rows, K) (the features this CTA owns), then
    // normalised as NormModulate. Needs N == K and 8-row tiles.
    const void* proj_weight = nullptr;
    const void* proj_bias = nullptr;
    int proj_k = 0;
    void* proj_out = nullptr;
    // BiasGateResid at a step that refreshes the head MLP cache (null = not kept): the block's
    // MLP term acc + b (rounded to T) and its output change T(out) - resid, both (rows, N).
    void* keep_mlp = nullptr;
    void* keep_change = nullptr;
};

// How the final kernel forms the guided noise prediction.
enum class DiffCfg : int {
    None = 0,      // rows = N: eps = out[n]
    Full = 1,      // rows = 2N: eps = u + s (c - u), c = out[n], u = out[N + n]
    FullKeep = 2,  // as Full, and delta[n] = c - u
    Cached = 3     // rows = N: u = c - delta[n]
};

// The final layer (LayerNorm without affine, modulation, linear to 2C) and the whole p_sample
// update of the latents x (N, C) in place: eps (with CFG), learned-range log variance, x0,
// posterior mean, plus exp(0.5 log var) * noise * temperature except at the last step.
struct DiffFinalParams {
    const void* in = nullptr;                 // (rows, K)
    int rows = 0, K = 0, C = 0, latents = 0;  // latents = N
    const void* weight = nullptr;             // (2C, K)
    const void* bias = nullptr;               // (2C)
    float ln_eps = 1e-6f;
    const void* shift = nullptr;
    const void* scale1 = nullptr;
    long long shift_stride = 0, scale1_stride = 0;
    void* x = nullptr;            // (N, C), updated in place
    const void* noise = nullptr;  // (N, C) rows with stride noise_stride; unused at the last step
    long long noise_stride = 0;
    void* delta = nullptr;       // (N, C): FullKeep writes it, Cached reads it
    const float* cfg = nullptr;  // device scalar: the guidance scale
    DiffCfg mode = DiffCfg::None;
    float sqrt_recip_ac = 0, sqrt_recipm1_ac = 0, coef1 = 0, coef2 = 0;
    float log_beta = 0, log_var_clipped = 0, temperature = 1;
    bool last = false;  // the final reverse step: x = mean
    bool pdl = false;
    // A step of the head MLP cache that replays every block (diff_cached_step): the rows are
    // built from the latents, not read from `in`: x[m % latents] times proj_weight (K, proj_k;
    // proj_k 8 or 16) + proj_bias, rounded to T, then the kept blocks applied. The next x goes
    // to x_out (other CTAs still read x for their projection).
    const void* proj_weight = nullptr;
    const void* proj_bias = nullptr;
    int proj_k = 0;
    DiffKeptList kept;
    void* x_out = nullptr;  // null: x in place
    // > 0: the rows are split over blockIdx.y, each CTA taking this many latents (and, with
    // both CFG halves, their unconditional rows), so no CTA builds every row; 0 = one CTA per
    // channel takes all rows.
    int latents_per_cta = 0;
    // With proj_* and latents_per_cta > 0 (at most 16 rows a CTA, C <= 16): one CTA per row
    // group computes every channel of its rows (grid 1 x groups) instead of one CTA per channel
    // building the same rows again; the same bits.
    bool all_channels = false;
};

cudaError_t launch_diff_linear_bf16(const DiffLinearParams& p, cudaStream_t stream);
cudaError_t launch_diff_linear_fp16(const DiffLinearParams& p, cudaStream_t stream);
cudaError_t launch_diff_final_bf16(const DiffFinalParams& p, cudaStream_t stream);
cudaError_t launch_diff_final_fp16(const DiffFinalParams& p, cudaStream_t stream);
cudaError_t launch_diff_apply_bf16(const DiffApplyParams& p, cudaStream_t stream);
cudaError_t launch_diff_apply_fp16(const DiffApplyParams& p, cudaStream_t stream);

}  // namespace varscope::kernels::cuda
