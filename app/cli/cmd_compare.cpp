// `varscope-cli compare`: the baseline and an accelerated run with the same seed, side by side:
// both images, a diff map, per-scale timings, token agreement, PSNR/SSIM and KV bytes.
#include <ATen/ATen.h>

#include <filesystem>
#include <iomanip>
#include <iostream>

#include "app/cli/commands.h"
#include "app/cli/compare_args.h"
#include "app/cli/image_io.h"
#include "app/cli/mar_cli_common.h"  // prepare_output_dir
#include "app/cli/model_options.h"
#include "app/cli/run_report.h"
#include "app/cli/sampling_args.h"
#include "core/metrics/image_metrics.h"

namespace varscope::cli {
namespace {

struct CompareArgs : CompareArgsCommon {
    ModelOptions model;
    SamplingArgs sampling;
};

struct Timed {
    VarSampleResult last;
    std::vector<std::vector<double>> scale_ms;  // per run
    std::vector<double> total_ms;
};

nlohmann::json side_json(const Timed& t) {
    std::vector<double> per_scale;
    for (size_t si = 0; si < t.last.scale_millis.size(); ++si) {
        std::vector<double> v;
        for (const auto& r : t.scale_ms) v.push_back(r[si]);
        per_scale.push_back(median(v));
    }
    return {{"median_total_ms", median(t.total_ms)}, {"total_ms_each", t.total_ms},
            {"median_scale_ms", per_scale},          {"decode_ms", t.last.decode_millis},
            {"kv_bytes", t.last.kv_bytes},           {"cuda_graphs", t.last.cuda_graphs}};
}

int run(const CompareArgs& a) {
    if (a.accel.empty())
        throw std::invalid_argument(
            "compare needs --accel (a config file, inline JSON or a preset)");
    const AccelConfig accel = parse_accel_argument(a.accel);
    namespace fs = std::filesystem;
    prepare_output_dir(a.out_dir, "--out");  // fails before the model loads
    VarPipeline pipe = a.model.build();
    VarSampleOptions opt = a.sampling.resolve(pipe, a.model);
    a.check_outputs(opt.images(), true);  // existing files: refuse before sampling, not after
    const auto hooks = build_accelerators(accel, pipe.var_config());
    std::cerr << pipe.describe() << "\naccelerated side: " << accel.summary() << "\n";
    // Times compare only alike: where the accelerated side cannot replay CUDA graphs (AMS-KV),
    // the baseline runs eagerly too.
    const bool cuda = pipe.device().is_cuda();
    if (cuda && opt.cuda_graphs && hooks && !hooks->graph_signature(pipe.var_config())) {
        opt.cuda_graphs = false;
        std::cerr << "the accelerated side has no CUDA-graph form: both sides run eagerly\n";
    }
    const int64_t warmup = a.warmup_runs(cuda);

    // Alternate the two sides so drift of the machine affects both alike.
    Timed base, fast;
    for (int64_t i = 0; i < warmup; ++i) {
        pipe.generate(opt);
        pipe.generate(opt, hooks.get());
    }
    for (int64_t r = 0; r < a.repeat; ++r) {
        for (auto* side : {&base, &fast}) {
            side->last = pipe.generate(opt, side == &fast ? hooks.get() : nullptr);
            side->scale_ms.push_back(side->last.scale_millis);
            side->total_ms.push_back(side->last.total_millis - side->last.decode_millis);
        }
    }

    const auto agreement = token_agreement(base.last.tokens, fast.last.tokens);
    const auto p = psnr(base.last.images, fast.last.images);
    const auto s = ssim(base.last.images, fast.last.images);
    const double t_base = median(base.total_ms), t_fast = median(fast.total_ms);

    const auto& c = pipe.var_config();
    std::cerr << "\n scale  size   baseline ms  accel ms  identical tokens\n";
    nlohmann::json scales = nlohmann::json::array();
    for (size_t si = 0; si < agreement.size(); ++si) {
        std::vector<double> vb, vf;
        for (const auto& r : base.scale_ms) vb.push_back(r[si]);
        for (const auto& r : fast.scale_ms) vf.push_back(r[si]);
        const auto& ag = agreement[si];
        std::cerr << std::setw(6) << si << std::setw(4) << c.patch_nums[si] << "x" << std::left
                  << std::setw(3) << c.patch_nums[si] << std::right << std::fixed
                  << std::setprecision(2) << std::setw(12) << median(vb) << std::setw(10)
                  << median(vf) << std::setw(10) << std::setprecision(1) << 100.0 * ag.fraction()
                  << " %"
                  << (ag.undecoded ? "  (" + std::to_string(ag.undecoded) + " not decoded)" : "")
                  << "\n";
        scales.push_back({{"scale", si},
                          {"patch_num", c.patch_nums[si]},
                          {"baseline_ms", median(vb)},
                          {"accelerated_ms", median(vf)},
                          {"identical_tokens", ag.fraction()},
                          {"undecoded_tokens", ag.undecoded}});
    }
    std::cerr << std::setprecision(2) << "transformer time: baseline " << t_base
              << " ms, accelerated " << t_fast << " ms, speedup "
              << (t_fast > 0 ? t_base / t_fast : 0.0) << "x\n";
    for (size_t i = 0; i < p.size(); ++i)
        std::cerr << "image " << i << ": PSNR " << p[i] << " dB, SSIM " << std::setprecision(4)
                  << s[i] << "\n";
    std::cerr << "KV bytes: baseline " << base.last.kv_bytes << ", accelerated "
              << fast.last.kv_bytes << "\n";

    if (!a.out_dir.empty()) {
        fs::create_directories(a.out_dir);
        a.write_images(base.last.images, fast.last.images);
        const int64_t n = base.last.images.size(0);
        nlohmann::json j = environment_json(pipe.device().str());
        j.update({{"model", pipe.describe()},
                  {"config", c.to_json()},
                  {"precision", a.model.precision},
                  {"labels", std::vector<int64_t>(base.last.labels.cpu().data_ptr<int64_t>(),
                                                  base.last.labels.cpu().data_ptr<int64_t>() + n)},
                  {"seed", a.sampling.seed},
                  {"cfg", a.sampling.cfg},
                  {"top_k", a.sampling.top_k},
                  {"top_p", a.sampling.top_p},
                  {"accel", accel.to_json()},
                  {"accel_summary", accel.summary()},
                  {"runs", a.repeat},
                  {"warmup_runs", warmup},
                  {"baseline", side_json(base)},
                  {"accelerated", side_json(fast)},
                  {"speedup", t_fast > 0 ? t_base / t_fast : 0.0},
                  {"psnr_db", p},
                  {"ssim", s},
                  {"scales", scales}});
        // JSON has no infinity: identical images report psnr null.
        for (auto& v : j["psnr_db"])
            if (!std::isfinite(v.get<double>())) v = nullptr;
        write_json(j, (fs::path(a.out_dir) / "metrics.json").string(), a.force);
        std::cerr << "wrote baseline, accelerated and diff images and metrics.json to " << a.out_dir
                  << "\n";
    }
    return 0;
}

}  // namespace

Runner add_compare(CLI::App& app) {
    auto a = std::make_shared<CompareArgs>();
    auto* cmd = app.add_subcommand("compare",
                                   "baseline vs accelerated with the same seed: images, diff, "
                                   "timings, PSNR/SSIM, token agreement");
    a->model.add_to(*cmd);
    a->sampling.add_to(*cmd);
    a->CompareArgsCommon::add_to(*cmd, preset_names(),
                                 "directory for baseline/accelerated/diff images and metrics.json");
    return [a]() { return run(*a); };
}

}  // namespace varscope::cli
