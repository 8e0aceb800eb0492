// `varscope-cli eval MANIFEST` and `varscope-cli sweep MANIFEST --param m.k=v1,v2`: the
// resumable, sharded evaluation job of core/eval (issue #34) for a model of any family. Under
// torchrun (`torchrun --no-python --nproc-per-node N varscope-cli eval m.json`) each process
// takes its shards and rank 0 writes the result; the launcher's variables are read here (core
// reads no environment).
#include <cstdlib>
#include <iomanip>
#include <iostream>

#include "app/cli/commands.h"
#include "app/cli/run_report.h"  // exec_policy
#include "core/eval/eval_job.h"
#include "core/eval/sweep.h"

namespace varscope::cli {
namespace {

struct EvalArgs {
    std::string manifest;
    std::string out;     // overrides output_dir
    std::string device;  // overrides device
    bool quiet = false;
    // sweep
    std::vector<std::string> params;
    bool list = false;
    std::string quality = "ssim";
};

std::string clock_text(double s) {
    if (s < 0) return "--:--";
    const auto t = static_cast<int64_t>(s + 0.5);
    std::ostringstream o;
    o << std::setfill('0');
    if (t >= 3600) o << t / 3600 << ":";
    o << std::setw(2) << (t / 60) % 60 << ":" << std::setw(2) << t % 60;
    return o.str();
}

// One line per shard on stderr (a log file under torchrun stays readable).
void print_progress(const EvalProgress& p) {
    std::cerr << "[eval] rank " << p.rank << ": shard " << p.done << "/" << p.total
              << (p.resumed ? " (" + std::to_string(p.resumed) + " found finished)" : "")
              << ", elapsed " << clock_text(p.elapsed_s) << ", ETA " << clock_text(p.eta_s)
              << (p.graph_releases
                      ? ", " + std::to_string(p.graph_releases) +
                            " runs repeated after releasing CUDA graphs (out of memory)"
                      : "")
              << (p.graph_captures
                      ? ", " + std::to_string(p.graph_captures) + " runs captured CUDA graphs"
                      : "")
              << "\n";
}

struct Job {
    EvalManifest manifest;
    std::unique_ptr<ProcessGroup> group;
    std::unique_ptr<Runner> runner;
    EvalJobOptions options;
};

Job prepare(const EvalArgs& a) {
    Job job;
    job.manifest = read_manifest(a.manifest);
    if (!a.out.empty()) job.manifest.output_dir = a.out;
    if (!a.device.empty()) job.manifest.device = a.device;
    const auto spec = distributed_spec_from([](const char* name) { return std::getenv(name); });
    if (spec) {
        DistributedSpec s = *spec;
        s.timeout_s = job.manifest.rank_timeout_s;
        // One GPU per process: "cuda" becomes the local rank's device.
        const char* local = std::getenv("LOCAL_RANK");
        if (job.manifest.device == "cuda" && local)
            job.manifest.device = "cuda:" + std::string(local);
        job.group = tcp_store_group(s);
        std::cerr << "[eval] rank " << s.rank << " of " << s.world_size << " (rendezvous "
                  << s.master_addr << ":" << s.master_port << "), device " << job.manifest.device
                  << "\n";
    }
    LoadOptions lo = load_options(job.manifest.device, job.manifest.precision);
    lo.exec = exec_policy();
    job.runner = open_eval_runner(job.manifest, lo);
    if (!a.quiet) std::cerr << job.runner->describe() << "\n";
    job.options.group = job.group.get();
    if (!a.quiet) job.options.progress = print_progress;
    return job;
}

// A damaged shard file is bad input (exit 2), as a bad manifest is.
template <class F>
auto bad_input_on_shard_errors(F f) {
    try {
        return f();
    } catch (const ShardFileError& e) {
        throw std::invalid_argument(e.what());
    }
}

int run_eval(const EvalArgs& a) {
    Job job = prepare(a);
    const auto r = bad_input_on_shard_errors(
        [&] { return run_eval_job(job.manifest, *job.runner, job.options); });
    if (!r.root) return 0;
    for (const auto& c : r.result["configs"]) {
        std::cerr << std::fixed << std::setprecision(2) << c["name"].get<std::string>() << ": "
                  << c["images"] << " images, " << c["images_per_s"].get<double>()
                  << " images/s, speedup " << c["speedup"].get<double>() << "x";
        if (c.contains("ssim") && !c["ssim"]["mean"].is_null())
            std::cerr << ", SSIM " << std::setprecision(4) << c["ssim"]["mean"].get<double>();
        if (c.contains("psnr_db") && !c["psnr_db"]["mean"].is_null())
            std::cerr << ", PSNR " << std::setprecision(2) << c["psnr_db"]["mean"].get<double>()
                      << " dB";
        if (c.contains("psnr_db") && c["psnr_db"]["identical"].get<int64_t>() > 0)
            std::cerr << " (" << c["psnr_db"]["identical"] << " identical)";
        if (c.contains("quality") && c["quality"].is_object()) {  // manifest "metrics"
            const auto& q = c["quality"];
            if (q.contains("fid"))
                for (const char* against : {"reference", "baseline"})
                    if (q["fid"][against].is_number())
                        std::cerr << ", FID vs " << against << " " << std::setprecision(3)
                                  << q["fid"][against].get<double>();
            if (q.contains("inception_score") && q["inception_score"].is_object())
                std::cerr << ", IS " << std::setprecision(3)
                          << q["inception_score"]["mean"].get<double>();
            if (q.contains("emoji") && q["emoji"].is_object()) {  // metrics.emoji
                const auto& e = q["emoji"];
                for (const char* against : {"dataset", "baseline"})
                    if (e["fid"][against].is_number())
                        std::cerr << ", emoji FID vs " << against << " " << std::setprecision(3)
                                  << e["fid"][against].get<double>();
                if (e["accuracy"].is_object())
                    std::cerr << ", emoji accuracy " << std::setprecision(3)
                              << e["accuracy"]["rate"].get<double>() << " of "
                              << e["accuracy"]["counted"];
            }
        }
        std::cerr << "\n";
    }
    const auto& total = r.result["job"];  // the configs' rates are per process; this one scales
    std::cerr << std::fixed << std::setprecision(2) << "job: " << total["images_generated"]
              << " images generated by " << total["processes"] << " process(es) in "
              << total["wall_s"].get<double>() << " s, " << total["images_per_s"].get<double>()
              << " images/s\n";
    std::cerr << "computed " << r.computed << " shards, found " << r.resumed << " finished; wrote "
              << r.result_path << ", summary.csv and images.csv\n";
    return 0;
}

int run_sweep_command(const EvalArgs& a) {
    SweepRequest request;
    for (const auto& p : a.params) request.axes.push_back(parse_sweep_axis(p));
    request.grid = !a.list;
    request.metric = a.quality;
    Job job = prepare(a);
    const auto s = bad_input_on_shard_errors(
        [&] { return run_sweep(job.manifest, *job.runner, request, job.options); });
    if (s.is_null()) return 0;
    for (const auto& p : s["points"])
        std::cerr << (p["pareto"].get<bool>() ? "* " : "  ") << p["name"].get<std::string>()
                  << ": speedup " << std::fixed << std::setprecision(2)
                  << p["speedup"].get<double>() << "x, " << a.quality << " " << p["quality"].dump()
                  << "\n";
    std::cerr << "(* on the Pareto front) wrote sweep.json and pareto.svg to "
              << job.manifest.output_dir << "\n";
    return 0;
}

CLI::App* add_common(CLI::App& app, const char* name, const char* help, EvalArgs& a) {
    auto* cmd = app.add_subcommand(name, help);
    cmd->add_option("manifest", a.manifest, "the job's manifest (JSON; docs/cli.md)")
        ->required()
        ->check(CLI::ExistingFile);
    cmd->add_option("--out", a.out, "output folder (instead of the manifest's output_dir)");
    cmd->add_option("--device", a.device, "device (instead of the manifest's device)");
    cmd->add_flag("--quiet", a.quiet, "no progress lines");
    return cmd;
}

}  // namespace

Command add_eval(CLI::App& app) {
    auto a = std::make_shared<EvalArgs>();
    add_common(app, "eval",
               "run an evaluation job: every image of the manifest under the baseline and each "
               "accelerator config, compared (PSNR, SSIM, token agreement) and timed; resumable "
               "(shard files), distributed under torchrun",
               *a);
    return [a] { return run_eval(*a); };
}

Command add_sweep(CLI::App& app) {
    auto a = std::make_shared<EvalArgs>();
    auto* cmd = add_common(app, "sweep",
                           "sweep one or two accelerator settings over the manifest's config "
                           "(an eval job per point) -> the speed/quality Pareto front "
                           "(sweep.json, pareto.svg)",
                           *a);
    cmd->add_option("--param", a->params,
                    "method.setting=v1,v2,... (names as `varscope-cli methods` lists them; a "
                    "JSON list for list settings); once or twice")
        ->required();
    cmd->add_flag("--list", a->list,
                  "pair the values of two settings (i-th with i-th) instead of the full grid");
    cmd->add_option(
           "--quality", a->quality,
           "quality axis: ssim, psnr_db, token_agreement, emoji_accuracy or emoji_agreement (the "
           "last two need \"metrics\": {\"emoji\": true})")
        ->check(CLI::IsMember({"ssim", "psnr_db", "token_agreement"}));
    return [a] { return run_sweep_command(*a); };
}

}  // namespace varscope::cli
