// Fused DiffLoss-head kernels (kernels/diffloss_ops.h) on the GPU against float64 ground truth
// (the LibTorch reference evaluated in double on the CPU): each kernel's relative L2 error must
// stay within 2x the framework's own error (the reference's ops in the same 16-bit dtype on
// the GPU) plus a small floor. Fresh random inputs per check, row counts with tails of every
// tile (1..45), widths 256/1024/1280, strided modulation views, outputs poisoned with NaN.
// Then the whole reverse diffusion and the MAR loop: fused vs module path within the same
// bound, CUDA graphs of the fused path == its eager run, PDL on == off, row-split tiles ==
// per-CTA tiles (bit for bit up to 8 rows, within one 16-bit ulp beyond), the input projection
// folded into block 0's fc1 kernel and the lean kernels == the separate/plain kernels bit for
// bit; the head MLP cache's kernels (kept terms, replayed blocks, the one-kernel cached step).
// Skips without CUDA.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/mar_pipeline.h"
#include "core/sampling/token_sampling.h"
#include "kernels/diffloss_ops.h"
#include "tests/tiny_mar.h"

namespace vk = varscope::kernels;
using namespace varscope;

namespace {

bool fused_runnable(at::ScalarType t, std::string* why) {
    if (!torch::cuda::is_available()) {
        *why = "no CUDA device";
        return false;
    }
    return vk::diff_head_cuda_supported(at::zeros({8}, at::TensorOptions(at::kCUDA).dtype(t)), 8,
                                        256, {}, why);
}

#define REQUIRE_FUSED(t)                                     \
    do {                                                     \
        std::string why_;                                    \
        if (!fused_runnable(t, &why_)) GTEST_SKIP() << why_; \
    } while (0)

// NaN-filled blocks left in the caching allocator, so unwritten outputs show.
void poison(int64_t elems) {
    std::vector<at::Tensor> held;
    for (int i = 0; i < 8; ++i)
        held.push_back(at::full({elems}, std::numeric_limits<float>::quiet_NaN(),
                                at::TensorOptions(at::kCUDA).dtype(at::kBFloat16)));
    torch::cuda::synchronize();
}

at::Tensor d64(const at::Tensor& t) {
    return t.defined() ? t.to(at::kCPU, at::kDouble) : t;
}

double rel(const at::Tensor& out, const at::Tensor& truth) {
    const auto o = out.to(at::kCPU, at::kDouble);
    EXPECT_TRUE(o.isfinite().all().item<bool>()) << "non-finite (unwritten?) outputs";
    return (o - truth).norm().item<double>() / std::max(truth.norm().item<double>(), 1e-30);
}

// err(kernel) <= 2 err(framework's 16-bit path) + floor.
void expect_within(double kernel, double framework, const std::string& what) {
    EXPECT_LE(kernel, 2.0 * framework + 2e-4)
        << what << ": kernel rel err " << kernel << " vs framework " << framework;
    EXPECT_LT(kernel, 3e-2) << what;
}

struct Inputs {
    at::Tensor h, shift, scale1, gate, mod;  // shift/scale1/gate: views of one (M, 3W) tensor
    vk::DiffBlockWeights w;
};

Inputs block_inputs(int64_t M, int64_t W, at::ScalarType t) {
    const auto o = at::TensorOptions(at::kCUDA).dtype(at::kFloat);
    Inputs in;
    in.h = (at::randn({M, W}, o) * 1.5 + 0.3).to(t);
    // Like DiffResBlock::modulation: chunks of one linear output (strided rows), 1 + scale.
    in.mod = (at::randn({M, 3 * W}, o) * 0.2).to(t);
    in.shift = in.mod.narrow(1, 0, W);
    in.scale1 = (1 + in.mod.narrow(1, W, W)).to(t);
    in.gate = in.mod.narrow(1, 2 * W, W);
    in.w.ln_weight = (1 + 0.1 * at::randn({W}, o)).to(t);
    in.w.ln_bias = (0.1 * at::randn({W}, o)).to(t);
    in.w.ln_eps = 1e-6;
    const double s = 1.0 / std::sqrt(double(W));
    in.w.fc1_weight = (at::randn({W, W}, o) * s).to(t);
    in.w.fc1_bias = (at::randn({W}, o) * 0.1).to(t);
    in.w.fc2_weight = (at::randn({W, W}, o) * s).to(t);
    in.w.fc2_bias = (at::randn({W}, o) * 0.1).to(t);
    return in;
}

vk::DiffBlockWeights weights64(const vk::DiffBlockWeights& w) {
    return {d64(w.ln_weight), d64(w.ln_bias),    w.ln_eps,       d64(w.fc1_weight),
            d64(w.fc1_bias),  d64(w.fc2_weight), d64(w.fc2_bias)};
}

// Bit-identical when `exact`, else within one 16-bit ulp (relative 2^-7 for bf16) elementwise.
void expect_same_up_to_ulp(const at::Tensor& a, const at::Tensor& b, bool exact,
                           const std::string& what) {
    if (exact) {
        EXPECT_TRUE(at::equal(a, b)) << what << ": not bit-identical";
        return;
    }
    const auto af = a.to(at::kFloat), bf = b.to(at::kFloat);
    const double ulp = a.scalar_type() == at::kBFloat16 ? 1.0 / 128 : 1.0 / 1024;
    const auto over = ((af - bf).abs() - ulp * bf.abs() - 1e-6).gt(0).sum().item<int64_t>();
    EXPECT_EQ(over, 0) << what << ": " << over << " elements differ by more than one ulp";
}

// Coefficients of a mid-schedule reverse step (a cosine schedule's magnitudes).
vk::DiffStepCoefs step_coefs(bool last) {
    vk::DiffStepCoefs k;
    k.sqrt_recip_ac = 1.37f;
    k.sqrt_recipm1_ac = 0.94f;
    k.coef1 = 0.61f;
    k.coef2 = 0.45f;
    k.log_beta = -3.1f;
    k.log_var_clipped = -3.6f;
    k.temperature = 0.95f;
    k.last = last;
    return k;
}

const std::vector<int64_t> kRows{1, 3, 8, 13, 16, 17, 32, 45};
const std::vector<int64_t> kWidths{256, 1024, 1280};

// The kernels with the row split on or off (DiffLossPolicy::row_split; the tests compare the
// split against the 16/32-row tiling).
vk::KernelPolicy row_split(bool on) {
    vk::KernelPolicy p;
    p.diff.row_split = on;
    return p;
}

}  // namespace

TEST(KernelsDiffLossGpu, BlockLayersMatchFloat64WithinTwiceTheFrameworkError) {
    const vk::KernelPolicy tiles = row_split(false), split = row_split(true);
    for (auto t : {at::kBFloat16, at::kHalf}) {
        REQUIRE_FUSED(t);
        c10::InferenceMode guard;
        for (int64_t W : kWidths)
            for (int64_t M : kRows) {
                SCOPED_TRACE("W " + std::to_string(W) + " M " + std::to_string(M) +
                             (t == at::kHalf ? " fp16" : " bf16"));
                const auto in = block_inputs(M, W, t);
                const auto w64 = weights64(in.w);
                // fc1: silu(linear(LN(h) * scale1 + shift))
                const auto truth1 =
                    vk::reference::diff_block_fc1(d64(in.h), w64, d64(in.shift), d64(in.scale1));
                const auto fw1 = vk::reference::diff_block_fc1(in.h, in.w, in.shift, in.scale1);
                poison(M * W);
                const auto k1 = vk::diff_block_fc1(in.h, in.w, in.shift, in.scale1,
                                                   vk::KernelPath::Cuda, tiles);
                expect_within(rel(k1, truth1), rel(fw1, truth1), "fc1");
                // fc2: h + gate * linear(a), in place into (a copy of) h
                const auto a = k1.clone();
                const auto truth2 =
                    vk::reference::diff_block_fc2(d64(a), w64, d64(in.gate), d64(in.h));
                const auto fw2 = vk::reference::diff_block_fc2(a, in.w, in.gate, in.h);
                auto h2 = in.h.clone();
                const auto k2 =
                    vk::diff_block_fc2(a, in.w, in.gate, h2, vk::KernelPath::Cuda, {}, tiles);
                EXPECT_EQ(k2.data_ptr(), h2.data_ptr()) << "fc2 writes h in place";
                expect_within(rel(k2, truth2), rel(fw2, truth2), "fc2");
                // 8-row tiles in separate CTAs: the same sums, reduced across lanes in another
                // order for tiles of more than 8 rows (float32 reassociation, then one 16-bit
                // rounding): bit-identical up to 8 rows, within one 16-bit ulp beyond.
                poison(M * W);
                const auto k1s = vk::diff_block_fc1(in.h, in.w, in.shift, in.scale1,
                                                    vk::KernelPath::Cuda, split);
                auto h2s = in.h.clone();
                const auto k2s =
                    vk::diff_block_fc2(a, in.w, in.gate, h2s, vk::KernelPath::Cuda, {}, split);
                expect_same_up_to_ulp(k1s, k1, M <= 8, "row split, fc1");
                expect_same_up_to_ulp(k2s, k2, M <= 8, "row split, fc2");
                // Input projection with repeated rows (CFG): x (n, 16) -> (M, W), M = 2n.
                if (M % 2 == 0 || M == 1) {
                    const int64_t n = M == 1 ? 1 : M / 2;
                    const auto o = at::TensorOptions(at::kCUDA).dtype(at::kFloat);
                    const auto x = at::randn({n, 16}, o).to(t);
                    const auto wi = (at::randn({W, 16}, o) * 0.25).to(t);
                    const auto bi = (at::randn({W}, o) * 0.1).to(t);
                    const auto truth3 = vk::reference::diff_input_proj(d64(x), d64(wi), d64(bi), M);
                    const auto fw3 = vk::reference::diff_input_proj(x, wi, bi, M);
                    poison(M * W);
                    const auto k3 = vk::diff_input_proj(x, wi, bi, M, vk::KernelPath::Cuda, tiles);
                    expect_within(rel(k3, truth3), rel(fw3, truth3), "input_proj");
                    const auto k3s = vk::diff_input_proj(x, wi, bi, M, vk::KernelPath::Cuda, split);
                    expect_same_up_to_ulp(k3s, k3, M <= 8, "row split, input projection");
                }
            }
    }
}

// diff_proj_block_fc1 as one kernel (the projection folded into fc1's prologue) gives the two
// separate kernels' a and h bit for bit, under both tilings, latent widths 8 and 16, CFG-style
// repeated rows with tails; within 2x the framework's bf16/fp16 error of float64; outputs
// poisoned first. The lean kernels (LN affine staged in shared memory, empty rows skipped) ==
// the plain ones bit for bit.
TEST(KernelsDiffLossGpu, FoldedProjectionAndLeanKernelsAreBitIdentical) {
    for (auto t : {at::kBFloat16, at::kHalf}) {
        REQUIRE_FUSED(t);
        c10::InferenceMode guard;
        const auto o = at::TensorOptions(at::kCUDA).dtype(at::kFloat);
        for (bool split : {true, false})
            for (int64_t W : kWidths)
                for (int64_t M : kRows)
                    for (int64_t lat : {16, 8}) {
                        const int64_t n = M % 2 == 0 ? M / 2 : M;
                        SCOPED_TRACE("W " + std::to_string(W) + " M " + std::to_string(M) +
                                     " latent " + std::to_string(lat) +
                                     (split ? " split" : " 16/32-row tiles") +
                                     (t == at::kHalf ? " fp16" : " bf16"));
                        // The plain kernels (not lean), the lean ones unfolded, and folded.
                        vk::KernelPolicy plain = row_split(split), lean = row_split(split);
                        const vk::KernelPolicy folded = row_split(split);
                        plain.diff.lean = false;
                        lean.diff.fold_proj = false;
                        const auto in = block_inputs(M, W, t);
                        const auto x = at::randn({n, lat}, o).to(t);
                        const auto wi = (at::randn({W, lat}, o) * 0.25).to(t);
                        const auto bi = (at::randn({W}, o) * 0.1).to(t);
                        const auto h_sep =
                            vk::diff_input_proj(x, wi, bi, M, vk::KernelPath::Cuda, plain);
                        const auto a_sep = vk::diff_block_fc1(h_sep, in.w, in.shift, in.scale1,
                                                              vk::KernelPath::Cuda, plain);
                        auto r_sep = h_sep.clone();
                        vk::diff_block_fc2(a_sep, in.w, in.gate, r_sep, vk::KernelPath::Cuda, {},
                                           plain);
                        // The lean kernels, unfolded.
                        poison(M * W);
                        const auto [a_lean, h_lean] = vk::diff_proj_block_fc1(
                            x, wi, bi, M, in.w, in.shift, in.scale1, vk::KernelPath::Cuda, lean);
                        auto r_lean = h_lean.clone();
                        vk::diff_block_fc2(a_lean, in.w, in.gate, r_lean, vk::KernelPath::Cuda, {},
                                           lean);
                        EXPECT_TRUE(at::equal(a_lean, a_sep)) << "lean fc1";
                        EXPECT_TRUE(at::equal(h_lean, h_sep)) << "lean input projection";
                        EXPECT_TRUE(at::equal(r_lean, r_sep)) << "lean fc2";
                        // Folded.
                        poison(M * W);
                        const auto [a_fold, h_fold] = vk::diff_proj_block_fc1(
                            x, wi, bi, M, in.w, in.shift, in.scale1, vk::KernelPath::Cuda, folded);
                        EXPECT_TRUE(at::equal(a_fold, a_sep))
                            << "folded fc1, max diff "
                            << (a_fold.to(at::kFloat) - a_sep.to(at::kFloat))
                                   .abs()
                                   .max()
                                   .item<double>();
                        EXPECT_TRUE(at::equal(h_fold, h_sep))
                            << "folded projection (the residual), max diff "
                            << (h_fold.to(at::kFloat) - h_sep.to(at::kFloat))
                                   .abs()
                                   .max()
                                   .item<double>();
                        // Against float64 (the references in double on the CPU).
                        const auto h64 =
                            vk::reference::diff_input_proj(d64(x), d64(wi), d64(bi), M);
                        const auto w64 = weights64(in.w);
                        const auto truth =
                            vk::reference::diff_block_fc1(h64, w64, d64(in.shift), d64(in.scale1));
                        const auto fw = vk::reference::diff_block_fc1(
                            vk::reference::diff_input_proj(x, wi, bi, M), in.w, in.shift,
                            in.scale1);
                        expect_within(rel(a_fold, truth), rel(fw, truth), "folded fc1");
                        expect_within(rel(h_fold, h64),
                                      rel(vk::reference::diff_input_proj(x, wi, bi, M), h64),
                                      "folded projection");
                    }
    }
}

TEST(KernelsDiffLossGpu, FinalStepMatchesFloat64InEveryCfgMode) {
    for (auto t : {at::kBFloat16, at::kHalf}) {
        REQUIRE_FUSED(t);
        c10::InferenceMode guard;
        const auto o = at::TensorOptions(at::kCUDA).dtype(at::kFloat);
        const int64_t C = 16;
        for (int64_t W : kWidths)
            for (int64_t N : {1, 3, 8, 13, 20})
                for (auto mode : {vk::DiffCfgMode::None, vk::DiffCfgMode::Full,
                                  vk::DiffCfgMode::FullKeep, vk::DiffCfgMode::Cached})
                    for (bool last : {false, true}) {
                        const bool both =
                            mode == vk::DiffCfgMode::Full || mode == vk::DiffCfgMode::FullKeep;
                        const int64_t M = both ? 2 * N : N;
                        SCOPED_TRACE("W " + std::to_string(W) + " N " + std::to_string(N) +
                                     " mode " + std::to_string(int(mode)) + (last ? " last" : ""));
                        const auto h = (at::randn({M, W}, o) * 2).to(t);
                        const auto mod = (at::randn({M, 2 * W}, o) * 0.2).to(t);
                        const auto shift = mod.narrow(1, 0, W);
                        const auto scale1 = (1 + mod.narrow(1, W, W)).to(t);
                        const auto wf =
                            (at::randn({2 * C, W}, o) * (0.5 / std::sqrt(double(W)))).to(t);
                        const auto bf = (at::randn({2 * C}, o) * 0.1).to(t);
                        const auto x = at::randn({N, C}, o).to(t);
                        const auto noise_all = at::randn({2 * N, C}, o).to(t);
                        const auto noise = noise_all.narrow(0, 0, N);
                        const auto cfg = at::full({}, 2.75, o);
                        const auto delta0 = (at::randn({N, C}, o) * 0.3).to(t);
                        const vk::DiffStepCoefs k = step_coefs(last);
                        auto d_truth = d64(delta0), d_fw = delta0.clone(), d_k = delta0.clone();
                        const auto truth = vk::reference::diff_final_step(
                            d64(h), d64(shift), d64(scale1), d64(wf), d64(bf), 1e-6, d64(x),
                            d64(noise), cfg.to(at::kCPU, at::kDouble), mode, d_truth, k);
                        const auto fw = vk::reference::diff_final_step(
                            h, shift, scale1, wf, bf, 1e-6, x, noise, cfg, mode, d_fw, k);
                        auto xk = x.clone();
                        xk.fill_(std::numeric_limits<float>::quiet_NaN());
                        xk.copy_(x);
                        const auto out =
                            vk::diff_final_step(h, shift, scale1, wf, bf, 1e-6, xk, noise, cfg,
                                                mode, d_k, k, vk::KernelPath::Cuda);
                        EXPECT_EQ(out.data_ptr(), xk.data_ptr()) << "x is updated in place";
                        expect_within(rel(out, truth), rel(fw, truth), "final step");
                        if (mode == vk::DiffCfgMode::FullKeep)
                            expect_within(rel(d_k, d_truth), rel(d_fw, d_truth), "delta");
                        else
                            EXPECT_TRUE(at::equal(d_k, delta0)) << "delta must stay untouched";
                    }
    }
}

namespace {

// The kept blocks of a cached step of M rows over N latents, kept at a step with more rows (cut),
// with half the rows (repeated when M is 2N, else the same) and with M rows: gated, ungated,
// gated; and the step's shift and scale1.
struct KeptBlocks {
    at::Tensor shift, scale1;
    std::vector<vk::DiffKeptBlock> kept, kept64;
};

KeptBlocks kept_blocks(int64_t N, int64_t M, int64_t W, at::ScalarType t) {
    const auto o = at::TensorOptions(at::kCUDA).dtype(at::kFloat);
    const auto mod = (at::randn({M, 4 * W}, o) * 0.2).to(t);
    KeptBlocks kb;
    kb.shift = mod.narrow(1, 2 * W, W);
    kb.scale1 = (1 + mod.narrow(1, 3 * W, W)).to(t);
    kb.kept = {{(at::randn({2 * N, W}, o) * 0.7).to(t), mod.narrow(1, 0, W)},
               {(at::randn({N, W}, o) * 0.3).to(t), {}},
               {(at::randn({M, W}, o) * 0.7).to(t), mod.narrow(1, W, W)}};
    for (const auto& b : kb.kept) kb.kept64.push_back({d64(b.term), d64(b.gate)});
    return kb;
}

// The whole cached step against float64 within 2x the framework's 16-bit error; x only read;
// delta written by FullKeep only; up to kDiffMaxRows rows (where every layout runs), the same
// bits in every layout (each builds a row by the same ops and sums an output in the same order).
void check_cached_step(const KeptBlocks& kb, int64_t N, int64_t M, int64_t W, int64_t C,
                       vk::DiffCfgMode mode, at::ScalarType t) {
    const auto o = at::TensorOptions(at::kCUDA).dtype(at::kFloat);
    const auto& kept = kb.kept;
    const auto &shift = kb.shift, &scale1 = kb.scale1;
    const auto x = at::randn({N, C}, o).to(t);
    const auto x_before = x.clone();
    const auto wi = (at::randn({W, C}, o) * 0.25).to(t);
    const auto bi = (at::randn({W}, o) * 0.1).to(t);
    const auto wf = (at::randn({2 * C, W}, o) * (0.5 / std::sqrt(double(W)))).to(t);
    const auto bf = (at::randn({2 * C}, o) * 0.1).to(t);
    const auto noise = at::randn({N, C}, o).to(t);
    const auto cfg = at::full({}, 2.75, o);
    const auto delta0 = (at::randn({N, C}, o) * 0.3).to(t);
    const vk::DiffStepCoefs k = step_coefs(false);
    auto d_truth = d64(delta0), d_fw = delta0.clone(), d_k = delta0.clone();
    const auto truth = vk::reference::diff_cached_step(
        d64(x), d64(wi), d64(bi), M, kb.kept64, d64(shift), d64(scale1), d64(wf), d64(bf), 1e-6,
        d64(noise), cfg.to(at::kCPU, at::kDouble), mode, d_truth, k);
    const auto fw = vk::reference::diff_cached_step(x, wi, bi, M, kept, shift, scale1, wf, bf, 1e-6,
                                                    noise, cfg, mode, d_fw, k);
    poison(4 * M * W);
    const auto out = vk::diff_cached_step(x, wi, bi, M, kept, shift, scale1, wf, bf, 1e-6, noise,
                                          cfg, mode, d_k, k, vk::KernelPath::Cuda);
    EXPECT_NE(out.data_ptr(), x.data_ptr());
    EXPECT_TRUE(at::equal(x, x_before)) << "the cached step must not write x";
    expect_within(rel(out, truth), rel(fw, truth), "cached step");
    if (M <= 256) {  // kDiffMaxRows
        auto run = [&](vk::DiffCachedLayout layout, at::Tensor& d) {
            vk::KernelPolicy policy;
            policy.diff.cached_layout = layout;
            d = delta0.clone();
            return vk::diff_cached_step(x, wi, bi, M, kept, shift, scale1, wf, bf, 1e-6, noise, cfg,
                                        mode, d, k, vk::KernelPath::Cuda, policy);
        };
        at::Tensor d_1, d_l;
        const auto out_1 = run(vk::DiffCachedLayout::Channels, d_1);
        for (auto layout : {vk::DiffCachedLayout::Split, vk::DiffCachedLayout::Rows}) {
            const auto out_l = run(layout, d_l);
            EXPECT_TRUE(at::equal(out_l, out_1)) << "layout " << int(layout) << ": other values";
            EXPECT_TRUE(at::equal(d_l, d_1)) << "layout " << int(layout) << ": other delta";
        }
    }
    if (mode == vk::DiffCfgMode::FullKeep)
        expect_within(rel(d_k, d_truth), rel(d_fw, d_truth), "cached step delta");
    else
        EXPECT_TRUE(at::equal(d_k, delta0)) << "delta must stay untouched";
}

}  // namespace

// LazyMAR's head MLP cache in the fused chain: fc2 also writing the block's MLP term and output
// change, the replayed blocks (kept rows cut or repeated), and the one-kernel cached step in
// every CFG mode, each within 2x the framework's 16-bit error of float64; x is only read by the
// cached step; kept outputs poisoned first; the cached step gives the same bits in every layout
// (DiffCachedLayout), up to 200 rows.
TEST(KernelsDiffLossGpu, HeadMlpCacheKernelsMatchFloat64WithinTwiceTheFrameworkError) {
    for (auto t : {at::kBFloat16, at::kHalf}) {
        REQUIRE_FUSED(t);
        c10::InferenceMode guard;
        const auto o = at::TensorOptions(at::kCUDA).dtype(at::kFloat);
        const int64_t C = 16;
        for (int64_t W : kWidths)
            for (int64_t N : {1, 3, 8, 13, 100}) {  // 100: 200 rows, the hybrid's batch-16 range
                SCOPED_TRACE("W " + std::to_string(W) + " N " + std::to_string(N) +
                             (t == at::kHalf ? " fp16" : " bf16"));
                // fc2 keeping its terms (a step that refreshes the cache), 2N rows.
                const int64_t M2 = 2 * N;
                const auto in = block_inputs(M2, W, t);
                const auto a = (at::randn({M2, W}, o) * 0.5).to(t);
                const auto w64 = weights64(in.w);
                auto nan = [&](int64_t rows) {
                    return at::full({rows, W}, std::numeric_limits<float>::quiet_NaN(), o).to(t);
                };
                vk::DiffKeep truth_keep{at::zeros({M2, W}, at::kDouble),
                                        at::zeros({M2, W}, at::kDouble)};
                vk::DiffKeep fw_keep{at::zeros({M2, W}, o.dtype(t)),
                                     at::zeros({M2, W}, o.dtype(t))};
                vk::DiffKeep k_keep{nan(M2), nan(M2)};
                const auto truth2 =
                    vk::reference::diff_block_fc2(d64(a), w64, d64(in.gate), d64(in.h), truth_keep);
                const auto fw2 = vk::reference::diff_block_fc2(a, in.w, in.gate, in.h, fw_keep);
                auto h2 = in.h.clone();
                const auto k2 =
                    vk::diff_block_fc2(a, in.w, in.gate, h2, vk::KernelPath::Cuda, k_keep);
                expect_within(rel(k2, truth2), rel(fw2, truth2), "fc2 keeping");
                expect_within(rel(k_keep.mlp, truth_keep.mlp), rel(fw_keep.mlp, truth_keep.mlp),
                              "kept MLP term");
                // The change is a difference of two rounded rows: only the 2x bound applies.
                const double e_change = rel(k_keep.change, truth_keep.change);
                const double f_change = rel(fw_keep.change, truth_keep.change);
                EXPECT_LE(e_change, 2.0 * f_change + 2e-4)
                    << "kept change: kernel " << e_change << " vs framework " << f_change;

                for (auto mode : {vk::DiffCfgMode::None, vk::DiffCfgMode::Full,
                                  vk::DiffCfgMode::FullKeep, vk::DiffCfgMode::Cached}) {
                    SCOPED_TRACE("mode " + std::to_string(int(mode)));
                    const bool both =
                        mode == vk::DiffCfgMode::Full || mode == vk::DiffCfgMode::FullKeep;
                    const int64_t M = both ? 2 * N : N;
                    const KeptBlocks kb = kept_blocks(N, M, W, t);
                    const auto& kept = kb.kept;
                    const auto& kept64 = kb.kept64;
                    // The replayed blocks alone.
                    const auto h = (at::randn({M, W}, o) * 1.5).to(t);
                    const auto truth_h = vk::reference::diff_apply_kept(d64(h), kept64);
                    const auto fw_h = vk::reference::diff_apply_kept(h, kept);
                    auto hk = h.clone();
                    const auto k_h = vk::diff_apply_kept(hk, kept, vk::KernelPath::Cuda);
                    EXPECT_EQ(k_h.data_ptr(), hk.data_ptr()) << "h is updated in place";
                    expect_within(rel(k_h, truth_h), rel(fw_h, truth_h), "replayed blocks");
                    check_cached_step(kb, N, M, W, C, mode, t);
                }
            }
    }
}

// The Rows layout takes more rows than the per-channel layouts (the hybrid reuse steps at batch
// 64 and up): within 2x the framework's error at 300 latents; beyond its own limit, refused.
TEST(KernelsDiffLossGpu, CachedStepBeyondThePerChannelRowLimit) {
    REQUIRE_FUSED(at::kBFloat16);
    c10::InferenceMode guard;
    const int64_t N = 300, W = 1024, C = 16;
    for (auto mode : {vk::DiffCfgMode::None, vk::DiffCfgMode::Full, vk::DiffCfgMode::FullKeep,
                      vk::DiffCfgMode::Cached}) {
        SCOPED_TRACE("mode " + std::to_string(int(mode)));
        const bool both = mode == vk::DiffCfgMode::Full || mode == vk::DiffCfgMode::FullKeep;
        const int64_t M = both ? 2 * N : N;
        ASSERT_EQ(vk::diff_cached_layout_for(vk::DiffCachedLayout::Auto, M),
                  vk::DiffCachedLayout::Rows);
        check_cached_step(kept_blocks(N, M, W, at::kBFloat16), N, M, W, C, mode, at::kBFloat16);
    }
    const auto like = at::zeros({8}, at::TensorOptions(at::kCUDA).dtype(at::kBFloat16));
    std::string why;
    EXPECT_TRUE(vk::diff_cached_step_cuda_supported(like, 2048, W));
    EXPECT_FALSE(vk::diff_cached_step_cuda_supported(like, 2049, W, {}, &why));
    EXPECT_NE(why.find("2048"), std::string::npos) << why;
    vk::KernelPolicy split;
    split.diff.cached_layout = vk::DiffCachedLayout::Split;
    EXPECT_FALSE(vk::diff_cached_step_cuda_supported(like, 600, W, split))
        << "Split: 256 rows at most";
}

namespace {

MarConfig head_config(int64_t width, int64_t depth) {
    return varscope::testing::small_mar_with_head(width, depth, "25");
}

}  // namespace

// The whole reverse diffusion: fused kernels vs the module path, both in bf16, against the
// module path in float32 (same weights, same noise), for every CFG mode.
TEST(KernelsDiffLossGpu, ReverseDiffusionWithinTwiceTheModulePathError) {
    REQUIRE_FUSED(at::kBFloat16);
    for (int64_t width : {256, 1024}) {
        auto p32 = MarPipeline::random(head_config(width, 3), 4, {"cuda", Precision::Fp32});
        auto p16 = MarPipeline::random(head_config(width, 3), 4, {"cuda", Precision::Bf16});
        c10::InferenceMode guard;
        const auto& n32 = *p32.sampler().transformer()->diffloss->net;
        const auto& n16 = *p16.sampler().transformer()->diffloss->net;
        const auto& diffusion = p16.sampler().diffusion();
        const int64_t S = diffusion.schedule().num_steps(), C = 16;
        for (int64_t N : {1, 5, 16})
            for (int64_t period : {-1, 0, 4}) {  // -1: no CFG
                const bool guided = period >= 0;
                SCOPED_TRACE("W " + std::to_string(width) + " N " + std::to_string(N) + " period " +
                             std::to_string(period));
                const auto o = at::TensorOptions(at::kCUDA).dtype(at::kFloat);
                const auto z = at::randn({guided ? 2 * N : N, 64}, o);
                const auto cfg = guided ? at::full({}, 3.0, o) : at::Tensor();
                const auto start = at::randn({N, C}, o);
                const auto steps = at::randn({S, guided ? 2 * N : N, C}, o);
                const int64_t per = std::max<int64_t>(period, 0);
                const auto truth = diffusion.sample_with_noise(n32, z, cfg, 1.0, start, steps, {},
                                                               per, HeadPath::Modules);
                const auto zb = z.to(at::kBFloat16);
                const auto sb = start.to(at::kBFloat16), nb = steps.to(at::kBFloat16);
                const auto mod = diffusion.sample_with_noise(n16, zb, cfg, 1.0, sb, nb, {}, per,
                                                             HeadPath::Modules);
                poison(4 * N * width);
                const auto fused = diffusion.sample_with_noise(n16, zb, cfg, 1.0, sb, nb, {}, per,
                                                               HeadPath::FusedCuda);
                const auto t64 = d64(truth);
                const double e_mod = rel(mod, t64), e_fused = rel(fused, t64);
                std::cout << "  [diffusion W " << width << " N " << N << " period " << period
                          << "] rel err vs fp32: module bf16 " << e_mod << ", fused " << e_fused
                          << "\n";
                EXPECT_LE(e_fused, 2.0 * e_mod + 1e-3);
                // Same noise, same function: deterministic kernels give the same bits again.
                EXPECT_TRUE(
                    at::equal(fused, diffusion.sample_with_noise(n16, zb, cfg, 1.0, sb, nb, {}, per,
                                                                 HeadPath::FusedCuda)));
            }
    }
}

// The MAR loop: whole-step CUDA graphs and LazyMAR-style diffusion graphs of the fused path
// give the eager fused run's tokens exactly; PDL off gives the same tokens; the fused tokens
// are within bf16 rounding of the module path's.
TEST(KernelsDiffLossGpu, MarLoopGraphsAndPdlExact) {
    REQUIRE_FUSED(at::kBFloat16);
    // Every step through the fused kernels (Auto takes at most 8-16 rows by default), the
    // 16/32-row tiling (the row split is compared against it below).
    LoadOptions lo{"cuda", Precision::Bf16};
    lo.exec.mar_fused_max_rows = 256;
    lo.exec.kernels.diff.row_split = false;
    auto pipe = MarPipeline::random(head_config(256, 2), 3, lo);
    // The pipeline's policy: lo.exec with `edit` applied (a change drops the captured graphs).
    auto use = [&](const std::function<void(vk::DiffLossPolicy&)>& edit) {
        ExecPolicy p = lo.exec;
        edit(p.kernels.diff);
        pipe.sampler().set_exec_policy(p);
    };
    MarSampleOptions o;
    o.class_ids = {3, 7};
    o.seed = 11;
    o.num_iter = 8;
    o.cfg = 3.0;
    o.time_steps = false;
    o.cuda_graphs = false;
    const auto eager = pipe.generate(o);
    o.cuda_graphs = true;
    const auto graphed = pipe.generate(o);
    ASSERT_TRUE(graphed.cuda_graphs);
    EXPECT_EQ((eager.tokens - graphed.tokens).abs().max().item<double>(), 0.0);
    EXPECT_EQ((eager.tokens - pipe.generate(o).tokens).abs().max().item<double>(), 0.0);
    use([](vk::DiffLossPolicy& d) { d.pdl = false; });
    o.cuda_graphs = false;
    const auto no_pdl = pipe.generate(o);
    EXPECT_EQ((eager.tokens - no_pdl.tokens).abs().max().item<double>(), 0.0);
    use([](vk::DiffLossPolicy& d) { d.row_split = true; });
    const auto split = pipe.generate(o);
    o.cuda_graphs = true;
    const auto split_graphed = pipe.generate(o);
    o.cuda_graphs = false;
    // Row split: the graphed run equals its eager run exactly; against the default tiling the
    // tokens differ only by rounding (lane sums in another order for > 8 rows).
    EXPECT_EQ((split.tokens - split_graphed.tokens).abs().max().item<double>(), 0.0);
    const double split_rel =
        (split.tokens - eager.tokens).norm().item<double>() / eager.tokens.norm().item<double>();
    std::cout << "  [MAR loop] row split vs default tiling: rel L2 token diff " << split_rel
              << "\n";
    EXPECT_LT(split_rel, 0.05);
    // The folded input projection and the lean kernels give the same bits as without them
    // (row split on, where the fold applies to every row count), eager and graphed.
    {
        use([](vk::DiffLossPolicy& d) {
            d.row_split = true;
            d.fold_proj = false;
            d.lean = false;
        });
        const auto plain = pipe.generate(o);
        use([](vk::DiffLossPolicy& d) { d.row_split = true; });
        o.cuda_graphs = true;
        const auto folded_graphed = pipe.generate(o);
        o.cuda_graphs = false;
        EXPECT_EQ((plain.tokens - split.tokens).abs().max().item<double>(), 0.0);
        EXPECT_EQ((plain.tokens - folded_graphed.tokens).abs().max().item<double>(), 0.0);
    }
    use([](vk::DiffLossPolicy&) {});
    o.fused_head = false;
    const auto modules = pipe.generate(o);
    const double diff = (eager.tokens - modules.tokens).abs().max().item<double>();
    const double scale = modules.tokens.abs().max().item<double>();
    std::cout << "  [MAR loop] max |fused - module| token diff " << diff << " (max |token| "
              << scale << ")\n";
    EXPECT_GT(diff, 0.0);  // a different path: rounding differs
    EXPECT_TRUE(eager.tokens.isfinite().all().item<bool>());
}
