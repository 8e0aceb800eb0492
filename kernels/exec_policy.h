// The execution switches of kernels/: which of several kernels that compute the same thing (bit
// for bit, or within rounding where a comment says so) a dispatcher runs. The defaults are what
// the project measured fastest; the other settings exist to time or test the difference. Every
// dispatcher takes a KernelPolicy argument (default: the defaults); core's ExecPolicy
// (core/exec_policy.h) holds the one a run uses, and app/exec_env fills it from the VARSCOPE_*
// environment variables named below (docs/exec-policy.md). Nothing in kernels/ reads the
// environment or keeps a switch of its own.
#pragma once

namespace varscope::kernels {

// How diff_cached_step (diffloss_ops.h) spreads its rows over CTAs; every layout gives the same
// bits (tested).
//  Channels: one CTA per latent channel, each building every row (projection, kept blocks,
//            LayerNorm) again.
//  Split:    as Channels with the rows also split over blockIdx.y, 8 rows a CTA (MAR-B head
//            with the MLP cache at 7 tokens 36.8 -> 29.2 us per diffusion step, H200,
//            bench/results/2026-11-25-h200/session8_split_hybrid.md).
//  Rows:     one CTA per latent (and its unconditional row) computing every channel, so each
//            row is built once. MAR-B head with the MLP cache (H200, same call, us per diffusion
//            step, Split -> Rows): 7 tokens 29.1 -> 23.4, 48 tokens (module path + one-kernel
//            reuse steps) 81.1 -> 60.9, 112 tokens 125.3 -> 77.3; 1 token 16.0 -> 16.8.
//            bench/results/2026-11-26-h200/session9_mar.md.
//  Auto:     Split at 1 latent (2 rows with CFG), Rows above.
enum class DiffCachedLayout { Auto, Channels, Split, Rows };

// The fused DiffLoss-head kernels (diffloss_ops.h). Every setting gives the same bits except
// row_split (within one 16-bit ulp beyond 8 rows).
struct DiffLossPolicy {
    // Programmatic dependent launch between the kernels. VARSCOPE_DIFF_PDL.
    bool pdl = true;
    // Linear layers with more than 8 rows: 8-row tiles in separate CTAs (blockIdx.y) instead of
    // 16/32-row tiles per CTA (H100, MAR-B b1: 500 vs 567 ms). VARSCOPE_DIFF_ROW_SPLIT.
    bool row_split = true;
    // diff_proj_block_fc1 as one kernel (the input projection folded into fc1's prologue).
    // VARSCOPE_DIFF_FOLD_PROJ.
    bool fold_proj = true;
    // The lean linear-layer kernels (the LayerNorm affine staged in shared memory before the
    // wait, empty tile rows skipped). VARSCOPE_DIFF_LEAN.
    bool lean = true;
    // diff_cached_step's layout. VARSCOPE_DIFF_CACHED_LAYOUT.
    DiffCachedLayout cached_layout = DiffCachedLayout::Auto;

    bool operator==(const DiffLossPolicy& o) const {
        return pdl == o.pdl && row_split == o.row_split && fold_proj == o.fold_proj &&
               lean == o.lean && cached_layout == o.cached_layout;
    }
    bool operator!=(const DiffLossPolicy& o) const { return !(*this == o); }
};

struct KernelPolicy {
    // Every dispatcher runs its LibTorch reference (a debugging switch: KernelPath::Auto resolves
    // to the reference, KernelPath::Cuda throws, the *_supported checks say "forced").
    // VARSCOPE_REFERENCE_KERNELS.
    bool reference = false;
    // Block-sparse and gathered bf16 attention at head dim 64/128 on Hopper run the sm_90a
    // kernels (kernels/cuda/csla_attention_sm90.cuh); false: the sm_80 kernels there too (as on
    // every other GPU). No variable: `bench attention` / `bench cs4a` and the tests set it.
    bool sm90_attention = true;
    // Infinity's q/k RoPE and their cast to bf16 as one kernel (kernels/rope.h) instead of ~18
    // ATen kernels; same bits. VARSCOPE_FUSED_ROPE.
    bool fused_rope = true;
    // The bf16-autocast blocks' element-wise steps (VAR and Infinity) as one kernel each:
    // AdaLN's LayerNorm and modulation with the bf16 cast of the product after it
    // (kernels/modulate.h), a gated branch summed into the fp32 stream (kernels/gated_residual.h)
    // and VAR's q/k normalisation writing the keys and values into the KV cache
    // (kernels/qk_norm.h); false: the ATen compositions (same bits). VARSCOPE_FUSED_ELEMENTWISE.
    bool fused_elementwise = true;
    DiffLossPolicy diff;

    bool operator==(const KernelPolicy& o) const {
        return reference == o.reference && sm90_attention == o.sm90_attention &&
               fused_rope == o.fused_rope && fused_elementwise == o.fused_elementwise &&
               diff == o.diff;
    }
    bool operator!=(const KernelPolicy& o) const { return !(*this == o); }
};

}  // namespace varscope::kernels
