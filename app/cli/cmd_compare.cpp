// `varscope-cli compare`: the baseline and an accelerated run of any model family (core's
// Runner) with the same seed, side by side: images and a diff map, per-step timings and the
// family's per-step columns (VAR: identical tokens; MAR: LazyMAR's computed share), FLOPs,
// PSNR/SSIM of the images (of the latents, mapped to [0, 1], without a VAE), KV bytes.
// `compare-mar` is the same command with the embedded MAR as its default model.
#include <ATen/ATen.h>

#include <filesystem>
#include <iomanip>
#include <iostream>

#include "app/cli/commands.h"
#include "app/cli/compare_args.h"
#include "app/cli/image_io.h"
#include "app/cli/mar_cli_common.h"  // prepare_output_dir
#include "app/cli/run_args.h"
#include "app/cli/run_report.h"
#include "core/io/checkpoint.h"
#include "core/metrics/image_metrics.h"

namespace varscope::cli {
namespace {

struct CompareArgs : CompareArgsCommon {
    ModelArgs model;
    SampleArgs sampling;
    const char* alias_notice = nullptr;
};

struct Side {
    RunResult last;
    std::vector<std::vector<double>> step_ms;  // per run
    std::vector<double> total_ms;
};

std::vector<double> median_steps(const Side& s) {
    std::vector<double> out;
    for (size_t i = 0; i < s.last.step_millis.size(); ++i) {
        std::vector<double> v;
        for (const auto& r : s.step_ms) v.push_back(r[i]);
        out.push_back(median(v));
    }
    return out;
}

nlohmann::json side_json(const Side& s) {
    return {{"median_total_ms", median(s.total_ms)}, {"total_ms_each", s.total_ms},
            {"median_step_ms", median_steps(s)},     {"decode_ms", s.last.decode_millis},
            {"kv_bytes", s.last.kv_bytes},           {"flops", s.last.flops},
            {"cuda_graphs", s.last.cuda_graphs}};
}

// Both latent maps in [0, 1] through the baseline's range, so PSNR/SSIM read like image ones.
std::pair<at::Tensor, at::Tensor> latents_as_images(const at::Tensor& base, const at::Tensor& acc) {
    const auto b = base.to(at::kFloat).cpu(), a = acc.to(at::kFloat).cpu();
    const double lo = b.min().item<double>(), hi = b.max().item<double>();
    const double span = std::max(hi - lo, 1e-12);
    return {(b - lo).div(span).clamp(0, 1), (a - lo).div(span).clamp(0, 1)};
}

double flops_total(const RunResult& r) {
    return r.flops.is_object() ? r.flops.value("total", 0.0) : 0.0;
}

int run(CompareArgs& a) {
    namespace fs = std::filesystem;
    if (a.alias_notice) std::cerr << a.alias_notice << "\n";
    // Fail in a second: the accelerator config against the family the flags name, the folder.
    try {
        accel_plan(a.model.likely_family(), a.accel);
    } catch (const AccelConfigError& e) {
        throw std::invalid_argument(std::string("--accel: ") + e.what());
    }
    prepare_output_dir(a.out_dir, "--out");
    const auto runner = a.model.build();
    SampleSettings opt = a.sampling.resolve(*runner);
    opt.count_flops = true;
    a.sampling.check_memory(*runner, opt);
    const auto accel = a.sampling.accel(*runner, a.accel);
    std::cerr << runner->describe() << "\naccelerated side: " << accel->describe() << "\n";
    // Existing files: refuse before sampling, not after.
    a.check_outputs(opt.images(), runner->has_decoder(), {"tokens.safetensors"});
    // Times compare only alike: where the accelerated side cannot replay CUDA graphs, the
    // baseline runs eagerly too.
    const bool cuda = runner->device().is_cuda();
    if (cuda && opt.cuda_graphs && runner->graphs_possible(nullptr, opt) &&
        !runner->graphs_possible(accel.get(), opt)) {
        opt.cuda_graphs = false;
        std::cerr << "the accelerated side has no CUDA-graph form: both sides run eagerly\n";
    }
    const int64_t warmup = a.warmup_runs(cuda);

    // Alternate the two sides so drift of the machine affects both alike.
    Side base, fast;
    report_out_of_memory(*runner, opt, accel.get(), [&] {
        for (int64_t i = 0; i < warmup; ++i) {
            runner->generate(opt);
            runner->generate(opt, accel.get());
        }
        for (int64_t r = 0; r < a.repeat; ++r) {
            for (Side* s : {&base, &fast}) {
                s->last = runner->generate(opt, s == &fast ? accel.get() : nullptr);
                s->step_ms.push_back(s->last.step_millis);
                s->total_ms.push_back(s->last.total_millis - s->last.decode_millis);
            }
        }
    });

    for (const auto& n : base.last.notices) std::cerr << "notice: " << n << "\n";
    const bool images = base.last.images.defined() && fast.last.images.defined();
    at::Tensor ib = base.last.images, ia = fast.last.images;
    if (!images) std::tie(ib, ia) = latents_as_images(base.last.latents, fast.last.latents);
    const auto p = psnr(ib, ia);
    const auto s = ssim(ib, ia);
    const double t_base = median(base.total_ms), t_fast = median(fast.total_ms);
    const double f_base = flops_total(base.last), f_fast = flops_total(fast.last);
    const double f_ratio = f_fast > 0 ? f_base / f_fast : 0.0;

    // Per step: both times and the family's columns.
    const std::string noun = runner->step_noun();
    const auto columns = runner->compare_steps(base.last, fast.last);
    const auto mb = median_steps(base), mf = median_steps(fast);
    nlohmann::json steps = nlohmann::json::array();
    std::cerr << "\n" << std::setw(6) << noun << "  baseline ms  accel ms  details\n";
    for (size_t i = 0; i < mb.size(); ++i) {
        nlohmann::json row = {{noun, i}, {"baseline_ms", mb[i]}, {"accelerated_ms", mf[i]}};
        if (i < columns.size()) row.update(columns[i]);
        std::cerr << std::setw(6) << i << std::fixed << std::setprecision(2) << std::setw(13)
                  << mb[i] << std::setw(10) << mf[i] << " ";
        if (i < columns.size())
            for (const auto& [k, v] : columns[i].items()) std::cerr << " " << k << "=" << v.dump();
        std::cerr << "\n";
        steps.push_back(row);
    }
    const nlohmann::json summary = runner->compare_summary(base.last, fast.last);
    std::cerr << std::setprecision(2) << "model time: baseline " << t_base << " ms, accelerated "
              << t_fast << " ms, speedup " << (t_fast > 0 ? t_base / t_fast : 0.0) << "x\n";
    if (f_fast > 0)
        std::cerr << "FLOPs: baseline " << f_base / 1e9 << " G, accelerated " << f_fast / 1e9
                  << " G, ratio " << f_ratio << "x\n";
    for (const auto& [k, v] : summary.items()) std::cerr << k << ": " << v.dump() << "\n";
    const std::string what = images ? "image" : "latent";
    for (size_t i = 0; i < p.size(); ++i)
        std::cerr << what << " " << i << ": PSNR " << std::setprecision(2) << p[i] << " dB, SSIM "
                  << std::setprecision(4) << s[i] << "\n";
    std::cerr << "KV bytes: baseline " << base.last.kv_bytes << ", accelerated "
              << fast.last.kv_bytes << "\n";

    if (!a.out_dir.empty()) {
        fs::create_directories(a.out_dir);
        if (images) a.write_images(ib, ia);
        StateDict tensors;
        for (const auto& [k, v] : base.last.tensors) tensors["baseline." + k] = v;
        for (const auto& [k, v] : fast.last.tensors) tensors["accelerated." + k] = v;
        save_safetensors(tensors, a.out_file("tokens.safetensors"),
                         {{"seed", std::to_string(a.sampling.seed)}});
        const auto lab = base.last.labels.to(at::kLong).cpu().contiguous();
        const std::vector<int64_t> labels(lab.data_ptr<int64_t>(),
                                          lab.data_ptr<int64_t>() + lab.numel());
        nlohmann::json j = environment_json(runner->device().str());
        j.update({{"family", family_id(runner->family())},
                  {"model", runner->describe()},
                  {"config", runner->config_json()},
                  {"precision", a.model.precision},
                  {"exec_policy", to_json(exec_policy())},
                  {"batch", lab.numel()},
                  {"labels", labels},
                  {"seed", a.sampling.seed},
                  {"cuda_graphs", base.last.cuda_graphs || fast.last.cuda_graphs},
                  {"accel", accel->to_json()},
                  {"accel_summary", accel->summary()},
                  {"runs", a.repeat},
                  {"warmup_runs", warmup},
                  {"baseline", side_json(base)},
                  {"accelerated", side_json(fast)},
                  {"speedup", t_fast > 0 ? t_base / t_fast : 0.0},
                  {"flops_ratio", f_ratio},
                  {"metrics_on", what},
                  {"psnr_db", p},
                  {"ssim", s},
                  {noun + "s", steps}});
        j.update(runner->settings_json(opt));
        j.update(accel->report());
        j.update(summary);
        // JSON has no infinity: identical images report psnr null.
        for (auto& v : j["psnr_db"])
            if (!std::isfinite(v.get<double>())) v = nullptr;
        write_json(j, a.out_file("metrics.json"), a.force);
        std::cerr << "wrote " << (images ? "baseline, accelerated and diff images, " : "")
                  << "metrics.json and tokens.safetensors to " << a.out_dir << "\n";
    }
    return 0;
}

Command add(CLI::App& app, const char* name, const char* help, Family family,
            const char* alias_notice) {
    auto a = std::make_shared<CompareArgs>();
    a->alias_notice = alias_notice;
    auto* cmd = app.add_subcommand(name, help);
    a->model.add_to(*cmd, family);
    a->sampling.add_to(*cmd);
    a->CompareArgsCommon::add_to(*cmd, all_preset_names(),
                                 "directory for baseline/accelerated/diff images, "
                                 "tokens.safetensors and metrics.json");
    return [a]() { return run(*a); };
}

}  // namespace

Command add_compare(CLI::App& app) {
    return add(app, "compare",
               "baseline vs accelerated with the same seed (any model family): images, diff, "
               "timings, FLOPs, PSNR/SSIM, the family's per-step agreement",
               Family::Var, nullptr);
}

Command add_compare_mar(CLI::App& app) {
    return add(app, "compare-mar",
               "alias of `compare` whose default model is the embedded emoji MAR", Family::Mar,
               "note: compare-mar is an alias of `compare` (the family is read from the "
               "checkpoint; --family mar picks the embedded MAR)");
}

}  // namespace varscope::cli
