// `varscope-cli generate`: class-conditional sampling with per-scale progress and timings.
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "app/cli/image_io.h"
#include "app/cli/mar_cli_common.h"
#include "app/cli/model_options.h"
#include "app/cli/run_report.h"
#include "app/cli/sampling_args.h"
#include "core/io/checkpoint.h"

namespace varscope::cli {
namespace {

struct GenerateArgs {
    ModelOptions model;
    SamplingArgs sampling;
    std::string accel;
    std::string out;
    bool force = false;
    std::string timings_json, tokens_out;
    int64_t repeat = 1, warmup = 0;
    bool quiet = false;
};

// Progress sink: one line per scale as it finishes.
class ProgressPrinter : public ProbeSink {
  public:
    explicit ProgressPrinter(int64_t scales) : scales_(scales) {}
    void on_scale(ScaleRecord r) override {
        std::cerr << "  scale " << std::setw(2) << r.scale + 1 << "/" << scales_ << "  "
                  << std::setw(3) << r.patch_num << "x" << std::left << std::setw(3) << r.patch_num
                  << std::right << std::fixed << std::setprecision(2) << std::setw(9) << r.millis
                  << " ms\n";
    }

  private:
    int64_t scales_;
};

int run(GenerateArgs& a) {
    if (a.out.empty() && a.timings_json.empty() && a.tokens_out.empty())
        throw std::invalid_argument("nothing to write: pass --out, --timings-json or --tokens-out");
    const AccelConfig accel = parse_accel_argument(a.accel);  // fail before loading models
    // Output paths too: a bad one must fail in a second, not after the runs (batch images get
    // _<i> suffixes, so only their folder and format are checked here; their names once the
    // batch is known).
    check_output_file(a.out, true, "--out", true);
    check_output_file(a.tokens_out, a.force, "--tokens-out");
    check_output_file(a.timings_json, a.force, "--timings-json");
    VarPipeline pipe = a.model.build();
    const VarSampleOptions opt = a.sampling.resolve(pipe, a.model);
    // The batch is known now: existing or colliding outputs refuse before sampling.
    check_generate_outputs(a.out, opt.images(), a.tokens_out, a.timings_json, a.force);
    const auto hooks = build_accelerators(accel, pipe.var_config());
    if (hooks) std::cerr << "accelerators: " << accel.summary() << "\n";
    std::cerr << pipe.describe() << "\n";
    for (int64_t i = 0; i < a.warmup; ++i) pipe.generate(opt, hooks.get());

    std::vector<VarSampleResult> runs;
    for (int64_t r = 0; r < a.repeat; ++r) {
        std::cerr << "run " << r + 1 << "/" << a.repeat << " on " << pipe.device() << "\n";
        ProgressPrinter progress(pipe.var_config().num_scales());
        runs.push_back(pipe.generate(opt, hooks.get(), a.quiet ? nullptr : &progress));
        std::cerr << "  decode " << runs.back().decode_millis << " ms, total "
                  << runs.back().total_millis << " ms\n";
    }
    const VarSampleResult& res = runs.back();
    std::vector<double> totals;
    for (const auto& r : runs) totals.push_back(r.total_millis);
    std::cerr << "median total over " << runs.size() << " run(s): " << median(totals) << " ms\n";

    if (!a.out.empty()) {
        const int64_t n = res.images.size(0);
        for (int64_t i = 0; i < n; ++i) {
            const auto path = numbered_path(a.out, i, n);
            write_image(res.images[i], path, a.force);
            std::cerr << "wrote " << path << " (class " << res.labels[i].item<int64_t>() << ")\n";
        }
    }
    if (!a.tokens_out.empty()) {
        StateDict t{{"labels", res.labels.cpu()}};
        for (size_t si = 0; si < res.tokens.size(); ++si)
            t["tokens." + std::to_string(si)] = res.tokens[si].cpu();
        save_safetensors(t, a.tokens_out,
                         {{"seed", std::to_string(a.sampling.seed)}, {"accel", accel.summary()}});
    }
    if (!a.timings_json.empty()) {
        const auto& c = pipe.var_config();
        nlohmann::json scales = nlohmann::json::array();
        for (size_t si = 0; si < res.scale_millis.size(); ++si) {
            std::vector<double> per_run;
            for (const auto& r : runs) per_run.push_back(r.scale_millis[si]);
            scales.push_back(
                {{"scale", si}, {"patch_num", c.patch_nums[si]}, {"median_ms", median(per_run)}});
        }
        std::vector<double> decodes;
        for (const auto& r : runs) decodes.push_back(r.decode_millis);
        nlohmann::json j = {{"date", now_utc()},
                            {"device", pipe.device().str()},
                            {"cuda", cuda_available()},
                            {"model", pipe.describe()},
                            {"config", c.to_json()},
                            {"precision", a.model.precision},
                            {"batch", res.labels.size(0)},
                            {"cfg", a.sampling.cfg},
                            {"top_k", a.sampling.top_k},
                            {"top_p", a.sampling.top_p},
                            {"accel", accel.to_json()},
                            {"accel_summary", accel.summary()},
                            {"exec_policy", to_json(exec_policy())},
                            {"warmup_runs", a.warmup},
                            {"runs", runs.size()},
                            {"total_ms_each", totals},
                            {"median_total_ms", median(totals)},
                            {"median_decode_ms", median(decodes)},
                            {"kv_bytes", res.kv_bytes},
                            {"scales", scales}};
        std::ofstream f(a.timings_json);
        f << j.dump(2) << "\n";
        if (!f) throw std::runtime_error("could not write '" + a.timings_json + "'");
    }
    return 0;
}

}  // namespace

Runner add_generate(CLI::App& app) {
    auto a = std::make_shared<GenerateArgs>();
    auto* cmd = app.add_subcommand("generate", "generate class-conditional images");
    a->model.add_to(*cmd);
    a->sampling.add_to(*cmd);
    cmd->add_option(
        "--accel", a->accel,
        "accelerators: a JSON config file, inline JSON, or a preset (" + preset_names() + ")");
    cmd->add_option(
        "-o,--out", a->out,
        "output image; batches get _<i> suffixes. Formats: " + supported_image_formats());
    cmd->add_flag("--force", a->force, "overwrite existing output files");
    cmd->add_option("--timings-json", a->timings_json,
                    "write per-scale timings (median over --repeat runs) as JSON");
    cmd->add_option("--tokens-out", a->tokens_out, "write the sampled token maps as .safetensors");
    cmd->add_option("--repeat", a->repeat, "timed runs")->check(CLI::Range(1, 1000));
    cmd->add_option("--warmup", a->warmup, "untimed runs first")->check(CLI::Range(0, 100));
    cmd->add_flag("-q,--quiet", a->quiet, "no per-scale progress lines");
    return [a]() { return run(*a); };
}

}  // namespace varscope::cli
