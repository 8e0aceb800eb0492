// `varscope-cli compare-mar`: a MAR baseline and a LazyMAR run with the same seed: step timings,
// FLOPs (blocks, attention, DiffLoss head), the positions LazyMAR computed, and PSNR/SSIM of the
// images, or of the latents (range of the baseline mapped to [0, 1]) when there is no VAE.
// Without --mar / --random: the embedded emoji MAR and its KL VAE, with the model file's
// recommended settings for the flags not given (MarRunArgs, shared with generate-mar).
#include <ATen/ATen.h>

#include <filesystem>
#include <iomanip>
#include <iostream>

#include "app/cli/commands.h"
#include "app/cli/compare_args.h"
#include "app/cli/image_io.h"
#include "app/cli/mar_cli_common.h"
#include "app/cli/run_report.h"
#include "core/accel/mar_accel_config.h"
#include "core/accel/mar_flops.h"
#include "core/io/checkpoint.h"
#include "core/metrics/image_metrics.h"

namespace varscope::cli {
namespace {

struct CompareMarArgs : CompareArgsCommon {
    MarRunArgs run;
};

struct Side {
    MarSampleResult last;
    std::vector<double> total_ms;
    MarFlops flops;
};

// Both latent maps in [0, 1] through the baseline's range, so PSNR/SSIM read like image ones.
std::pair<at::Tensor, at::Tensor> latents_as_images(const at::Tensor& base, const at::Tensor& acc) {
    const auto b = base.to(at::kFloat).cpu(), a = acc.to(at::kFloat).cpu();
    const double lo = b.min().item<double>(), hi = b.max().item<double>();
    const double span = std::max(hi - lo, 1e-12);
    return {(b - lo).div(span).clamp(0, 1), (a - lo).div(span).clamp(0, 1)};
}

nlohmann::json side_json(const Side& s) {
    return {{"median_total_ms", median(s.total_ms)},
            {"total_ms_each", s.total_ms},
            {"step_ms", s.last.step_millis},
            {"flops", s.flops.to_json()},
            {"cuda_graphs", s.last.cuda_graphs}};
}

int run(CompareMarArgs& a) {
    MarAccelConfig accel = MarAccelConfig::from_argument(a.accel);
    namespace fs = std::filesystem;
    prepare_output_dir(a.out_dir, "--out");  // fails before the model loads
    MarRunArgs& m = a.run;
    if (m.head_cfg_period_given()) {
        if (accel.lazymar.head_cfg_period != 0 &&
            accel.lazymar.head_cfg_period != m.head_cfg_period)
            std::cerr << "--head-cfg-period " << m.head_cfg_period
                      << " replaces the accelerator config's lazymar.head_cfg_period "
                      << accel.lazymar.head_cfg_period << "\n";
        accel.lazymar.head_cfg_period = m.head_cfg_period;
        if (m.head_cfg_period > 0 &&
            LazyMarHeadCache::from_config(accel.lazymar).head_cfg_cache_period() == 0)
            throw std::invalid_argument(
                "--head-cfg-period applies to LazyMAR's condition cache, which the accelerated "
                "side "
                "(" +
                accel.summary() + ") does not use; pass --accel lazymar or lazymar-condition");
    }
    m.resolve_model();
    MarPipeline pipe = m.build();
    const auto& c = pipe.config();
    MarSampleOptions opt = m.options(pipe);
    opt.time_steps = true;
    MarSampleOptions fast_opt = opt;
    // The baseline never caches; the accelerated side's head caches are LazyMAR's hooks.
    auto lazy = make_lazymar_hooks(accel.lazymar, c, nullptr);
    const int64_t head_cfg_period = lazy.head ? lazy.head->head_cfg_cache_period() : 0;
    const int64_t head_mlp_period = lazy.head ? lazy.head->head_mlp_cache_period() : 0;
    std::cerr << pipe.describe() << "\naccelerated side: " << accel.summary()
              << (head_cfg_period > 0 ? ", head condition cache every " +
                                            std::to_string(head_cfg_period) + " diffusion steps"
                                      : std::string())
              << (head_mlp_period > 0 ? ", head MLP cache every " +
                                            std::to_string(head_mlp_period) + " diffusion steps"
                                      : std::string())
              << "\n";
    const bool will_decode = pipe.sampler().has_decoder();
    // Existing files: refuse before sampling, not after.
    a.check_outputs(opt.images(), will_decode, {"tokens.safetensors"});

    const int64_t diffusion_steps = pipe.sampler().diffusion().schedule().num_steps();
    auto base_counter = std::make_shared<MarFlopCounter>(c, diffusion_steps);
    auto fast_counter = std::make_shared<MarFlopCounter>(c, diffusion_steps);
    auto base_hooks = chain_with_counter(base_counter, nullptr);
    auto fast_hooks = chain_with_counter(fast_counter, lazy.chain);

    // Alternate the sides so drift of the machine affects both alike.
    Side base, fast;
    const int64_t warmup = a.warmup_runs(pipe.device().is_cuda());
    for (int64_t i = 0; i < warmup; ++i) {
        pipe.generate(opt, base_hooks.get());
        pipe.generate(fast_opt, fast_hooks.get());
    }
    for (int64_t r = 0; r < a.repeat; ++r) {
        for (Side* s : {&base, &fast}) {
            auto& counter = s == &base ? base_counter : fast_counter;
            counter->reset();
            s->last = s == &base ? pipe.generate(opt, base_hooks.get())
                                 : pipe.generate(fast_opt, fast_hooks.get());
            s->total_ms.push_back(s->last.total_millis - s->last.decode_millis);
            s->flops = counter->flops(s->last.attention_flops);
        }
    }
    const bool images = base.last.images.defined() && fast.last.images.defined();
    at::Tensor ib = base.last.images, ia = fast.last.images;
    if (!images) std::tie(ib, ia) = latents_as_images(base.last.latents, fast.last.latents);
    const auto p = psnr(ib, ia);
    const auto s = ssim(ib, ia);
    const double rel = (fast.last.tokens - base.last.tokens).norm().item<double>() /
                       std::max(base.last.tokens.norm().item<double>(), 1e-12);
    const double t_base = median(base.total_ms), t_fast = median(fast.total_ms);
    const double f_ratio = fast.flops.total() > 0 ? base.flops.total() / fast.flops.total() : 0.0;

    // Share of block positions computed per step (token cache bookkeeping).
    nlohmann::json steps = nlohmann::json::array();
    const auto skipped = lazy.skipped_unconditional_steps();
    std::cerr << "\n step  baseline ms  accel ms  computed  uncond\n";
    for (size_t i = 0; i < base.last.step_millis.size(); ++i) {
        double computed = 1.0;
        bool refresh = true;
        if (i < lazy.token_stats().size()) {
            const auto& st = lazy.token_stats()[i];
            double num = 0, den = 0;
            for (size_t l = 0; l < st.computed.size(); ++l) {
                num += double(st.computed[l]);
                den += double(st.total[l]);
            }
            computed = den > 0 ? num / den : 1.0;
            refresh = st.refresh;
        }
        const bool skip = std::find(skipped.begin(), skipped.end(), int64_t(i)) != skipped.end();
        std::cerr << std::setw(5) << i << std::fixed << std::setprecision(2) << std::setw(13)
                  << base.last.step_millis[i] << std::setw(10) << fast.last.step_millis[i]
                  << std::setw(9) << std::setprecision(1) << 100.0 * computed << " %"
                  << (skip ? "  cached" : "  computed") << "\n";
        steps.push_back({{"step", i},
                         {"baseline_ms", base.last.step_millis[i]},
                         {"accelerated_ms", fast.last.step_millis[i]},
                         {"token_refresh", refresh},
                         {"computed_share", computed},
                         {"unconditional_skipped", skip}});
    }
    std::cerr << std::setprecision(2) << "transformer+head time: baseline " << t_base
              << " ms, accelerated " << t_fast << " ms, speedup "
              << (t_fast > 0 ? t_base / t_fast : 0.0) << "x\n"
              << "FLOPs: baseline " << base.flops.total() / 1e9 << " G, accelerated "
              << fast.flops.total() / 1e9 << " G, ratio " << f_ratio << "x\n"
              << "token latents: relative L2 difference " << std::setprecision(4) << rel << "\n";
    const std::string what = images ? "image" : "latent";
    for (size_t i = 0; i < p.size(); ++i)
        std::cerr << what << " " << i << ": PSNR " << std::setprecision(2) << p[i] << " dB, SSIM "
                  << std::setprecision(4) << s[i] << "\n";

    if (!a.out_dir.empty()) {
        if (images) a.write_images(ib, ia);
        const auto tokens_path = (fs::path(a.out_dir) / "tokens.safetensors").string();
        if (fs::exists(tokens_path) && !a.force)
            throw std::invalid_argument(tokens_path + " exists (use --force)");
        save_safetensors({{"baseline", base.last.tokens.cpu()},
                          {"accelerated", fast.last.tokens.cpu()},
                          {"labels", base.last.labels.cpu()}},
                         tokens_path, {{"seed", std::to_string(m.seed)}});
        const auto lab = base.last.labels.to(at::kLong).cpu().contiguous();
        const std::vector<int64_t> labels(lab.data_ptr<int64_t>(),
                                          lab.data_ptr<int64_t>() + lab.numel());
        nlohmann::json j = environment_json(pipe.device().str());
        j.update({{"model", pipe.describe()},
                  {"config", c.to_json()},
                  {"precision", m.precision},
                  {"batch", base.last.labels.size(0)},
                  {"labels", labels},
                  {"seed", m.seed},
                  {"num_iter", m.num_iter},
                  {"cfg", m.cfg},
                  {"cfg_schedule", m.cfg_schedule},
                  {"temperature", m.temperature},
                  {"num_sampling_steps", m.sampling_steps},
                  {"diffusion_steps", diffusion_steps},
                  {"head_cfg_cache_period", head_cfg_period},
                  {"head_mlp_cache_period", head_mlp_period},
                  {"cuda_graphs", base.last.cuda_graphs || fast.last.cuda_graphs},
                  {"accel", accel.to_json()},
                  {"accel_summary", accel.summary()},
                  {"runs", a.repeat},
                  {"warmup_runs", warmup},
                  {"baseline", side_json(base)},
                  {"accelerated", side_json(fast)},
                  {"speedup", t_fast > 0 ? t_base / t_fast : 0.0},
                  {"flops_ratio", f_ratio},
                  {"metrics_on", what},
                  {"psnr_db", p},
                  {"ssim", s},
                  {"latent_relative_l2", rel},
                  {"steps", steps}});
        for (auto& v : j["psnr_db"])  // JSON has no infinity: identical results report null
            if (!std::isfinite(v.get<double>())) v = nullptr;
        write_json(j, (fs::path(a.out_dir) / "metrics.json").string(), a.force);
        std::cerr << "wrote " << (images ? "baseline, accelerated and diff images, " : "")
                  << "metrics.json and tokens.safetensors to " << a.out_dir << "\n";
    }
    return 0;
}

}  // namespace

Runner add_compare_mar(CLI::App& app) {
    auto a = std::make_shared<CompareMarArgs>();
    auto* cmd = app.add_subcommand("compare-mar",
                                   "MAR baseline vs LazyMAR with the same seed: timings, FLOPs, "
                                   "computed positions, PSNR/SSIM");
    a->run.add_to(*cmd);
    a->CompareArgsCommon::add_to(*cmd, mar_preset_names(),
                                 "directory for metrics.json, tokens.safetensors (and "
                                 "baseline/accelerated/diff images with a VAE)");
    return [a]() { return run(*a); };
}

}  // namespace varscope::cli
