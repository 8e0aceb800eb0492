// `varscope-cli generate`: sampling with any model family (core's Runner) with per-step
// progress, images, token dumps and timings; `--forward-in` runs the teacher-forced forward on
// given inputs instead (what tools/parity compares). `generate-mar` is the same command with
// the embedded MAR as its default model (an alias kept for scripts; it says so).
#include <ATen/ATen.h>

#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "app/cli/image_io.h"
#include "app/cli/mar_cli_common.h"
#include "app/cli/run_args.h"
#include "app/cli/run_report.h"
#include "core/io/checkpoint.h"

namespace varscope::cli {
namespace {

struct GenerateArgs {
    ModelArgs model;
    SampleArgs sampling;
    std::string accel, out, timings_json, tokens_out, forward_in, forward_out;
    bool force = false, quiet = false;
    int64_t repeat = 1, warmup = 0;
    const char* alias_notice = nullptr;
};

// One line per step as it finishes. It takes no accelerator records, so it never keeps the
// steps from running as CUDA graphs.
class ProgressPrinter : public ProbeSink {
  public:
    ProgressPrinter(const Runner& runner, int64_t steps) : runner_(runner), steps_(steps) {}
    bool wants_accel(const std::string&, const std::string&) const override { return false; }
    void on_scale(ScaleRecord r) override {
        std::cerr << "  " << runner_.step_noun() << " " << std::setw(3) << r.scale + 1 << "/"
                  << steps_ << "  ";
        if (r.patch_num > 0)
            std::cerr << std::setw(3) << r.patch_num << "x" << std::left << std::setw(3)
                      << r.patch_num << std::right;
        else
            std::cerr << std::setw(4) << (r.tokens.defined() ? r.tokens.size(1) : 0) << " tokens";
        std::cerr << std::fixed << std::setprecision(2) << std::setw(10) << r.millis << " ms\n";
    }

  private:
    const Runner& runner_;
    int64_t steps_;
};

int run_forward(GenerateArgs& a) {
    if (a.forward_out.empty()) throw std::invalid_argument("--forward-in needs --forward-out");
    check_output_file(a.forward_out, true, "--forward-out");
    const auto runner = a.model.build();
    std::cerr << runner->describe() << "\n";
    const StateDict out = runner->teacher_forward(load_checkpoint(a.forward_in), a.forward_in,
                                                  a.sampling.attention == "eager");
    save_safetensors(out, a.forward_out);
    std::cerr << "wrote " << a.forward_out << " (" << out.size() << " tensors)\n";
    return 0;
}

int run(GenerateArgs& a) {
    if (a.alias_notice) std::cerr << a.alias_notice << "\n";
    if (!a.forward_in.empty()) return run_forward(a);
    if (a.out.empty() && a.timings_json.empty() && a.tokens_out.empty())
        throw std::invalid_argument("nothing to write: pass --out, --timings-json or --tokens-out");
    // Fail in a second, not after loading and sampling: the accelerator config against the
    // family the flags name, and the output paths (batch images get _<i> suffixes, so only their
    // folder and format are checked here; their names once the batch is known).
    try {
        accel_plan(a.model.likely_family(), a.accel);
    } catch (const AccelConfigError& e) {
        throw std::invalid_argument(std::string("--accel: ") + e.what());
    }
    check_output_file(a.out, true, "--out", true);
    check_output_file(a.tokens_out, a.force, "--tokens-out");
    check_output_file(a.timings_json, a.force, "--timings-json");

    const auto runner = a.model.build();
    const SampleSettings opt = a.sampling.resolve(*runner);
    const auto accel = a.sampling.accel(*runner, a.accel);
    a.sampling.check_memory(*runner, opt, accel.get());
    if (!a.out.empty() && !runner->has_decoder())
        throw std::invalid_argument(
            "--out needs a VAE to decode images; use --tokens-out for latents");
    // The batch is known now: existing or colliding outputs refuse before sampling.
    check_generate_outputs(a.out, opt.images(), a.tokens_out, a.timings_json, a.force);
    if (accel->enabled()) std::cerr << "accelerators: " << accel->summary() << "\n";
    std::cerr << runner->describe() << "\n";
    std::vector<RunResult> runs;
    report_out_of_memory(*runner, opt, accel.get(), [&] {
        for (int64_t i = 0; i < a.warmup; ++i) runner->generate(opt, accel.get());
        for (int64_t r = 0; r < a.repeat; ++r) {
            std::cerr << "run " << r + 1 << "/" << a.repeat << " on " << runner->device() << "\n";
            ProgressPrinter progress(*runner, runner->steps(opt));
            runs.push_back(runner->generate(opt, accel.get(), a.quiet ? nullptr : &progress));
            std::cerr << "  decode " << runs.back().decode_millis << " ms, total "
                      << runs.back().total_millis << " ms\n";
        }
    });
    const RunResult& res = runs.back();
    for (const auto& n : res.notices) std::cerr << "notice: " << n << "\n";
    std::vector<double> totals, decodes;
    for (const auto& r : runs) {
        totals.push_back(r.total_millis);
        decodes.push_back(r.decode_millis);
    }
    std::cerr << "median total over " << runs.size() << " run(s): " << median(totals) << " ms\n";

    if (!a.out.empty()) {
        const int64_t n = res.images.size(0);
        for (int64_t i = 0; i < n; ++i) {
            const auto path = numbered_path(a.out, i, n);
            write_image(res.images[i], path, a.force);
            const int64_t label = res.labels[i].item<int64_t>();  // -1: a text-to-image row
            std::cerr << "wrote " << path
                      << (label < 0 && !opt.prompts.empty()
                              ? " (prompt \"" + opt.prompts[static_cast<size_t>(i)] + "\")"
                              : " (class " + std::to_string(label) + ")")
                      << "\n";
        }
    }
    if (!a.tokens_out.empty())
        save_safetensors(res.tensors, a.tokens_out,
                         {{"seed", std::to_string(a.sampling.seed)},
                          {"family", family_id(runner->family())},
                          {"accel", accel->summary()}});
    if (!a.timings_json.empty()) {
        const auto sides = runner->shape().step_sides;
        nlohmann::json steps = nlohmann::json::array();
        for (size_t si = 0; si < res.step_millis.size(); ++si) {
            std::vector<double> per_run;
            for (const auto& r : runs) per_run.push_back(r.step_millis[si]);
            nlohmann::json step = {{runner->step_noun(), si}, {"median_ms", median(per_run)}};
            if (runner->family() == Family::Var && si < sides.size()) step["patch_num"] = sides[si];
            steps.push_back(step);
        }
        nlohmann::json j = environment_json(runner->device().str());
        j.update({{"date", now_utc()},
                  {"family", family_id(runner->family())},
                  {"model", runner->describe()},
                  {"config", runner->config_json()},
                  {"precision", a.model.precision},
                  {"exec_policy", to_json(exec_policy())},
                  {"batch", res.labels.size(0)},
                  {"seed", a.sampling.seed},
                  {"accel", accel->to_json()},
                  {"accel_summary", accel->summary()},
                  {"cuda_graphs", res.cuda_graphs},
                  {"warmup_runs", a.warmup},
                  {"runs", runs.size()},
                  {"total_ms_each", totals},
                  {"median_total_ms", median(totals)},
                  {"median_decode_ms", median(decodes)},
                  {"kv_bytes", res.kv_bytes},
                  {"step_ms", res.step_millis},
                  {std::string(runner->step_noun()) + "s", steps}});
        j.update(runner->settings_json(opt));
        j.update(accel->report());
        write_json(j, a.timings_json, a.force);
    }
    return 0;
}

Command add(CLI::App& app, const char* name, const char* help, Family family,
            const char* alias_notice) {
    auto a = std::make_shared<GenerateArgs>();
    a->alias_notice = alias_notice;
    auto* cmd = app.add_subcommand(name, help);
    a->model.add_to(*cmd, family);
    a->sampling.add_to(*cmd);
    cmd->add_option(
        "--accel", a->accel,
        "accelerators: a JSON config file, inline JSON, or a preset (" + all_preset_names() + ")");
    cmd->add_option("-o,--out", a->out,
                    "output image (needs a VAE); batches get _<i> suffixes. Formats: " +
                        supported_image_formats());
    cmd->add_flag("--force", a->force, "overwrite existing output files");
    cmd->add_option("--timings-json", a->timings_json,
                    "write per-step timings (median over --repeat runs) as JSON");
    cmd->add_option("--tokens-out", a->tokens_out,
                    "write what the run sampled as .safetensors (VAR: labels and tokens.<scale>; "
                    "MAR: labels, orders, tokens, latents and decoded.<step>)");
    cmd->add_option("--forward-in", a->forward_in,
                    "run the teacher-forced forward on the tensors of this .safetensors instead "
                    "of sampling (parity checks; see teacher-forward)")
        ->check(CLI::ExistingFile);
    cmd->add_option("--forward-out", a->forward_out, "where --forward-in writes its outputs");
    cmd->add_option("--repeat", a->repeat, "timed runs")->check(CLI::Range(1, 1000));
    cmd->add_option("--warmup", a->warmup, "untimed runs first")->check(CLI::Range(0, 100));
    cmd->add_flag("-q,--quiet", a->quiet, "no per-step progress lines");
    return [a]() { return run(*a); };
}

}  // namespace

Command add_generate(CLI::App& app) {
    return add(app, "generate",
               "generate images with a VAR, MAR or Infinity model (the family is read from the "
               "checkpoint; default: the embedded emoji text-to-image model when it is shipped, "
               "else the embedded emoji VAR; --family t2i|var|mar picks one)",
               Family::Var, nullptr);
}

Command add_generate_mar(CLI::App& app) {
    return add(app, "generate-mar",
               "alias of `generate` whose default model is the embedded emoji MAR", Family::Mar,
               "note: generate-mar is an alias of `generate` (the family is read from the "
               "checkpoint; --family mar picks the embedded MAR)");
}

}  // namespace varscope::cli
