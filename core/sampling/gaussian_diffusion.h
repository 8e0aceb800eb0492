// The Gaussian diffusion MAR's DiffLoss samples with (the ADM/IDDPM/DiT code base it adopts):
// cosine noise schedule over 1000 steps, respaced to a few (num_sampling_steps, "100"),
// epsilon prediction with a learned-range variance, ancestral sampling with a temperature.
// The schedule is computed in double precision like the numpy original; each coefficient is
// rounded to float32 where it meets a tensor (as the original's _extract_into_tensor does).
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <vector>

#include "core/exec_policy.h"

namespace varscope {

class SimpleMlpAdaLNImpl;
struct DiffModulation;

// betas of the cosine schedule (alpha_bar(t) = cos((t + 0.008) / 1.008 * pi / 2)^2), capped at
// 0.999.
std::vector<double> cosine_betas(int64_t num_steps);
// The retained timesteps (ascending) of a respacing spec: "100" = 100 evenly strided steps of
// the whole process, "10,15,20" = that many per equal section, "ddimN" = DDIM's integer
// stride. Throws std::invalid_argument for specs that cannot be met.
std::vector<int64_t> space_timesteps(int64_t num_steps, const std::string& spec);

// Per-step coefficients of one (respaced) process, index = respaced step.
struct DiffusionSchedule {
    std::vector<int64_t> timestep_map;  // respaced step -> original timestep (the model's input)
    std::vector<double> betas, alphas_cumprod, alphas_cumprod_prev;
    std::vector<double> sqrt_recip_alphas_cumprod, sqrt_recipm1_alphas_cumprod;
    std::vector<double> posterior_variance, posterior_log_variance_clipped;
    std::vector<double> posterior_mean_coef1, posterior_mean_coef2;
    std::vector<double> log_betas;
    int64_t num_steps() const { return static_cast<int64_t>(betas.size()); }

    // The original's SpacedDiffusion: betas re-derived from alphas_cumprod at the retained
    // timesteps of the `base_steps` cosine process.
    static DiffusionSchedule respaced(const std::string& spec, int64_t base_steps = 1000);
    // A process with the given betas (all coefficients derived from them).
    static DiffusionSchedule from_betas(std::vector<double> betas);
};

// How the reverse diffusion runs the DiffLoss head.
//  Auto: the fused kernels (kernels/diffloss_ops.h: one kernel per linear layer plus one for the
//        final layer, CFG and the posterior update) on CUDA for float16/bfloat16 heads whose
//        widths they take, at most ExecPolicy::mar_fused_head_max_rows() rows (where they beat
//        the module path), unless the policy turns them off (mar_fused_head) or forces the
//        reference kernels; the module path otherwise (CPU, float32, many rows).
//  Modules: the LibTorch module path (forward_modulated and the posterior as tensor ops).
//  FusedReference / FusedCuda: the fused loop with the LibTorch references / the CUDA kernels
//        (throws where they cannot run). For tests and benchmarks.
enum class HeadPath { Auto, Modules, FusedReference, FusedCuda };

// LazyMAR's head MLP cache (the released code's models/diffloss_cached.py, cache_threshold 7):
// what the DiffLoss head computes at respaced step i of S (steps run i = S-1 down to 0) under
// a period p > 0.
//  Refresh (i == S-1 or i % p == 0): every block computes; the MLP term mlp(mod(ln x)) of each
//          computed block and the output change of the skipped blocks are kept.
//  Warmup  (other steps with i > 0.9 S): the skipped blocks add their kept change; the others
//          compute (and keep) their MLP term.
//  Reuse   (the rest): the skipped blocks add their kept change; the others compute only their
//          AdaLN gate and add gate * the kept MLP term. (The module path computes every
//          block's modulations for a window of steps at once anyway; FLOP counts follow the
//          released code, core/accel/mar_flops.h.)
//  Off     (p <= 0): no cache.
// Skipped blocks: 1..4 (hard-coded in the released code for every head depth).
enum class HeadMlpStep { Off, Refresh, Warmup, Reuse };

// How far the head caches' kept tensors moved while they were reused (for the inspector): at
// each refresh after the first, ||new - kept|| / ||new|| (for the MLP cache averaged over the
// blocks, the kept rows matched to the new ones as the cache matches them). Measuring reads the
// device (a sync per refresh): only when a caller asks for it.
struct HeadCacheStats {
    int64_t mlp_refreshes = 0, cfg_refreshes = 0;  // refresh steps of each cache
    double mlp_drift_sum = 0.0, cfg_drift_sum = 0.0;
    int64_t mlp_drift_count = 0, cfg_drift_count = 0;  // refreshes with a kept tensor before
    double mlp_drift() const { return mlp_drift_count ? mlp_drift_sum / mlp_drift_count : 0.0; }
    // One refresh of the MLP cache: drift_sum over the `measured` blocks that had a kept term.
    void add_mlp_refresh(double drift_sum, int64_t measured) {
        ++mlp_refreshes;
        if (measured > 0) {
            mlp_drift_sum += drift_sum / double(measured);
            ++mlp_drift_count;
        }
    }
    double cfg_drift() const { return cfg_drift_count ? cfg_drift_sum / cfg_drift_count : 0.0; }
};

// Ancestral sampling of token latents with the DiffLoss MLP. One call = the full reverse
// process for a batch of conditions; shapes are static across its steps and it never
// synchronises, so a CUDA graph can wrap it.
class DiffusionSampler {
  public:
    // exec: the head's switches (ExecPolicy's mar_* head settings) and the kernel policy.
    explicit DiffusionSampler(DiffusionSchedule schedule, ExecPolicy exec = {})
        : schedule_(std::move(schedule)), exec_(std::move(exec)) {}
    const DiffusionSchedule& schedule() const { return schedule_; }
    const ExecPolicy& exec_policy() const { return exec_; }
    void set_exec_policy(const ExecPolicy& exec) { exec_ = exec; }

    // z: (N, Cz) conditions, or with CFG (2N, Cz): N conditional rows then their N
    // unconditional rows. cfg_scale: 0-dim float tensor on z's device (guided eps = uncond +
    // cfg * (cond - uncond)); undefined = no guidance. Returns (N, C) latents.
    //
    // Random draws follow the original call order so that a seeded generator reproduces it:
    // the start noise (N, C), then per step noise shaped like the original's running sample
    // ((2N, C) with CFG, whose unconditional half it discards).
    //
    // cfg_cache_period > 0 (with CFG): the head-side condition cache of LazyMAR's released
    // code. Diffusion steps i == S - 1 and i % period == 0 run both halves and keep
    // delta = eps_cond - eps_uncond; the steps between run the conditional rows only, with
    // eps_uncond = eps_cond - delta. 0 = off (every step runs both halves).
    //
    // mlp_cache_period > 0: the head MLP cache (HeadMlpStep), with or without CFG. Its kept
    // tensors have the rows of the step that kept them; a step with fewer rows (the
    // conditional half under the condition cache) uses their first rows, one with twice as
    // many uses them twice, as the released code. The fused paths run it too (a step that
    // replays every block is one kernel, kernels::diff_cached_step). 0 = off (exactly the
    // uncached result).
    //
    // stats: when set, receives how far the caches' kept tensors drifted (HeadCacheStats).
    at::Tensor sample(const SimpleMlpAdaLNImpl& net, const at::Tensor& z,
                      const at::Tensor& cfg_scale, double temperature,
                      std::optional<at::Generator> gen, int64_t cfg_cache_period = 0,
                      HeadPath head = HeadPath::Auto, int64_t mlp_cache_period = 0,
                      HeadCacheStats* stats = nullptr) const;

    // Same, from given noise: start (N, C) and steps (num_steps, rows, C) (rows = N, or 2N
    // with CFG; only the first N rows are read). For tests, parity and CUDA graphs. t_all:
    // time_embeddings() held by the caller (a graph reads it at a fixed address); undefined =
    // looked up here.
    at::Tensor sample_with_noise(const SimpleMlpAdaLNImpl& net, const at::Tensor& z,
                                 const at::Tensor& cfg_scale, double temperature,
                                 const at::Tensor& start, const at::Tensor& step_noise,
                                 const at::Tensor& t_all = {}, int64_t cfg_cache_period = 0,
                                 HeadPath head = HeadPath::Auto, int64_t mlp_cache_period = 0,
                                 HeadCacheStats* stats = nullptr) const;
    // Whether `head` resolves to the fused loop for conditions z (rows as in sample()) under
    // this sampler's policy; why_not receives the reason when it does not. With
    // mlp_cache_period > 0 the fused CUDA kernels also need a latent width of 8 or 16 and at most
    // 16 blocks.
    bool uses_fused_head(const SimpleMlpAdaLNImpl& net, const at::Tensor& z, bool guided,
                         HeadPath head, std::string* why_not = nullptr,
                         int64_t mlp_cache_period = 0) const;
    // With HeadPath::Auto falling back to the module path (e.g. more rows than
    // mar_fused_head_max_rows), the head MLP cache's reuse steps (every block replayed) may run
    // as kernels::diff_cached_step's one kernel (ExecPolicy::mar_hybrid_cached_step, default on).
    // Tested on a GPU (within 2x the module path's bf16 error); the MAR-B head at 16 tokens
    // 89.4 -> 55.3 us per diffusion step, the whole lazymar-released loop at batch 16 869 -> 784
    // ms (MAR-B), 1975 -> 1805 ms (MAR-H) (H200, bench/results/2026-11-26-h200/session9_mar.md).
    // hybrid_cached_step_runs: whether the kernel takes this head and these conditions (CUDA,
    // 16-bit, latent width 8 or 16, at most 16 blocks; up to 2048 rows in the Rows layout,
    // kernels::diff_cached_step_cuda_supported).
    bool hybrid_cached_step_runs(const SimpleMlpAdaLNImpl& net, const at::Tensor& z,
                                 bool guided) const;
    // Whether diffusion step i runs both CFG halves under cfg_cache_period (see sample()).
    static bool full_cfg_step(int64_t i, int64_t num_steps, int64_t cfg_cache_period);
    // What diffusion step i computes under the head MLP cache, and whether it skips block b.
    static HeadMlpStep head_mlp_step(int64_t i, int64_t num_steps, int64_t mlp_cache_period);
    static bool head_mlp_skips_block(int64_t b) { return b >= 1 && b <= 4; }
    // Fills start and each step_noise[i] from gen with the values sample() would draw (same
    // order and shapes: randn is empty + normal_).
    static void draw_noise(at::Tensor& start, at::Tensor& step_noise,
                           std::optional<at::Generator> gen);
    // Timestep embeddings of every respaced step (S, W): weights-only, so computed once per
    // weight tensor (no host-to-device copies inside a sampling loop after the first call).
    at::Tensor time_embeddings(const SimpleMlpAdaLNImpl& net, const at::Device& device) const;

    // One reverse step (respaced index i) from x (N, C): the mean and log-variance inputs.
    // Exposed for tests (equal to the original's p_mean_variance for epsilon/learned range).
    struct StepOutput {
        at::Tensor mean, log_variance, eps;
    };
    StepOutput step(const SimpleMlpAdaLNImpl& net, const at::Tensor& x, int64_t i,
                    const at::Tensor& t_emb, const at::Tensor& c_emb,
                    const at::Tensor& cfg_scale) const;

  private:
    // The head MLP cache's kept tensors of one sample() call (per block; undefined where unused).
    struct HeadMlpCache {
        HeadMlpStep step = HeadMlpStep::Off;  // what the current step does
        std::vector<at::Tensor> mlp;          // MLP term of the computed blocks
        std::vector<at::Tensor> change;       // output - input of the skipped blocks
        HeadCacheStats* stats = nullptr;      // measures the kept terms' drift when set
    };
    // net.forward_modulated(x, m) under the head MLP cache's current step.
    static at::Tensor forward_mlp_cached(const SimpleMlpAdaLNImpl& net, const at::Tensor& x,
                                         const DiffModulation& m, HeadMlpCache& cache);
    // cached_delta defined: conditional rows only, eps_uncond = eps_cond - cached_delta.
    // delta_out: receives eps_cond - eps_uncond of a full guided step.
    // mlp_cache: the head MLP cache (null or step Off = net.forward_modulated).
    StepOutput step_modulated(const SimpleMlpAdaLNImpl& net, const at::Tensor& x, int64_t i,
                              const DiffModulation& mod, const at::Tensor& cfg_scale,
                              const at::Tensor& cached_delta = {}, at::Tensor* delta_out = nullptr,
                              HeadMlpCache* mlp_cache = nullptr) const;
    at::Tensor run(const SimpleMlpAdaLNImpl& net, const at::Tensor& z, const at::Tensor& cfg_scale,
                   double temperature, std::optional<at::Generator> gen, const at::Tensor& start,
                   const at::Tensor& step_noise, const at::Tensor& t_all, int64_t cfg_cache_period,
                   HeadPath head, int64_t mlp_cache_period, HeadCacheStats* stats) const;
    DiffusionSchedule schedule_;
    ExecPolicy exec_;
    mutable at::Tensor t_emb_cache_;
    mutable const void* t_emb_key_ = nullptr;
    mutable int64_t t_emb_version_ = -1;
};

}  // namespace varscope
