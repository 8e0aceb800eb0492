// `varscope-cli generate-mar`: MAR (masked autoregressive, diffusion head) sampling with
// per-step progress, latent/token dumps and timings; `--forward-in` runs the transformer and
// the DiffLoss head on given inputs instead (what tools/parity/mar_parity.py compares).
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <fstream>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "app/cli/image_io.h"
#include "app/cli/mar_cli_common.h"
#include "app/cli/run_report.h"
#include "core/io/checkpoint.h"
#include "core/mar_pipeline.h"

namespace varscope::cli {
namespace {

struct GenerateMarArgs {
    MarRunArgs run;  // model and sampling flags, shared with compare-mar (mar_cli_common.h)
    std::string out, tokens_out, timings_json, forward_in, forward_out;
    bool force = false, quiet = false;
    int64_t repeat = 1, warmup = 0;
};

// Progress sink: one line per decoding step. It takes no accelerator records, so it never keeps
// the steps from running as CUDA graphs (the head caches' drift would).
class StepPrinter : public ProbeSink {
public:
    explicit StepPrinter(int64_t steps) : steps_(steps) {}
    bool wants_accel(const std::string&, const std::string&) const override { return false; }
    void on_scale(ScaleRecord r) override {
        std::cerr << "  step " << std::setw(3) << r.step + 1 << "/" << steps_ << "  "
                  << std::setw(4) << (r.tokens.defined() ? r.tokens.size(1) : 0) << " tokens"
                  << std::fixed << std::setprecision(2) << std::setw(10) << r.millis << " ms\n";
    }

private:
    int64_t steps_;
};

const at::Tensor& input(const StateDict& d, const std::string& name, const std::string& path) {
    auto it = d.find(name);
    if (it == d.end()) throw std::invalid_argument(path + ": missing tensor '" + name + "'");
    return it->second;
}

// Transformer and DiffLoss head on given inputs: tokens (R, L, D), mask (R, L) (1 = masked),
// labels (R) (-1 = fake latent); optionally the head's inputs diff_x (N, D), diff_t (N)
// (original timesteps), diff_c (N, Cd), and for a full reverse process diff_z (rows, Cd),
// diff_start (N, D), diff_noise (steps, rows, D), diff_cfg (scalar, < 0 = none), diff_temp.
int run_forward(MarPipeline& pipe, const GenerateMarArgs& a) {
    c10::InferenceMode guard;
    const StateDict in = load_safetensors(a.forward_in);
    auto mar = pipe.sampler().transformer();
    const auto dev = pipe.device();
    const auto dtype = mar->mask_token.scalar_type();
    StateDict out;
    if (in.count("tokens")) {
        const auto tokens = input(in, "tokens", a.forward_in).to(dev, dtype);
        const auto mask = input(in, "mask", a.forward_in).to(dev);
        const auto labels = input(in, "labels", a.forward_in).to(dev, at::kLong);
        const auto enc = mar->forward_encoder(tokens, mask, mar->class_embedding(labels));
        out["encoder_out"] = enc.to(at::kFloat).cpu();
        out["z"] = mar->forward_decoder(enc, mask).to(at::kFloat).cpu();
    }
    const auto& net = *mar->diffloss->net;
    if (in.count("diff_x")) {
        const auto x = input(in, "diff_x", a.forward_in).to(dev, dtype);
        const auto t = input(in, "diff_t", a.forward_in).to(dev, at::kLong);
        const auto c = input(in, "diff_c", a.forward_in).to(dev, dtype);
        out["diff_out"] = net.forward(x, t, c).to(at::kFloat).cpu();
    }
    if (in.count("diff_z")) {
        const auto z = input(in, "diff_z", a.forward_in).to(dev, dtype);
        const double cfg = input(in, "diff_cfg", a.forward_in).item<double>();
        const double temp = input(in, "diff_temp", a.forward_in).item<double>();
        const at::Tensor scale =
            cfg >= 0 ? at::full({}, cfg, at::TensorOptions(dev).dtype(at::kFloat)) : at::Tensor();
        out["diff_sample"] = pipe.sampler()
                                 .diffusion()
                                 .sample_with_noise(net, z, scale, temp,
                                                    input(in, "diff_start", a.forward_in).to(dev),
                                                    input(in, "diff_noise", a.forward_in).to(dev))
                                 .to(at::kFloat)
                                 .cpu();
    }
    save_safetensors(out, a.forward_out, {{"weights", pipe.weights_source()}});
    std::cerr << "wrote " << a.forward_out << " (" << out.size() << " tensors)\n";
    return 0;
}

int run(GenerateMarArgs& a) {
    if (a.forward_in.empty() && a.out.empty() && a.tokens_out.empty() && a.timings_json.empty())
        throw std::invalid_argument("nothing to write: pass --out, --tokens-out or --timings-json");
    // Output paths first: a bad one fails before the model loads and samples.
    if (a.forward_in.empty()) {
        // Folder and format of --out; its file names (numbered for batches) once the batch is known.
        check_output_file(a.out, true, "--out", true);
        check_output_file(a.tokens_out, a.force, "--tokens-out");
        check_output_file(a.timings_json, a.force, "--timings-json");
    } else {
        if (a.forward_out.empty()) throw std::invalid_argument("--forward-in needs --forward-out");
        check_output_file(a.forward_out, true, "--forward-out");
    }
    MarRunArgs& m = a.run;
    m.resolve_model();
    MarPipeline pipe = m.build();
    std::cerr << pipe.describe() << "\n";
    if (!a.forward_in.empty()) return run_forward(pipe, a);

    const auto& c = pipe.config();
    const MarSampleOptions opt = m.options(pipe);
    if (!a.out.empty() && !pipe.sampler().has_decoder())
        throw std::invalid_argument("--out needs a VAE to decode images; use --tokens-out for latents");
    // The batch is known now: existing or colliding outputs refuse before sampling.
    check_generate_outputs(a.out, opt.images(), a.tokens_out, a.timings_json, a.force);

    const auto head_cache = m.head_cache_hooks();  // --head-cfg-period
    for (int64_t i = 0; i < a.warmup; ++i) pipe.generate(opt, head_cache.get());
    std::vector<MarSampleResult> runs;
    for (int64_t r = 0; r < a.repeat; ++r) {
        std::cerr << "run " << r + 1 << "/" << a.repeat << " on " << pipe.device() << "\n";
        StepPrinter progress(opt.num_iter);
        runs.push_back(pipe.generate(opt, head_cache.get(), a.quiet ? nullptr : &progress));
        std::cerr << "  total " << runs.back().total_millis << " ms\n";
    }
    const MarSampleResult& res = runs.back();
    std::vector<double> totals;
    for (const auto& r : runs) totals.push_back(r.total_millis);

    if (!a.out.empty()) {
        const int64_t n = res.images.size(0);
        for (int64_t i = 0; i < n; ++i) write_image(res.images[i], numbered_path(a.out, i, n), a.force);
    }
    if (!a.tokens_out.empty()) {
        StateDict t{{"labels", res.labels.cpu()},
                    {"orders", res.orders.cpu()},
                    {"tokens", res.tokens.cpu()},
                    {"latents", res.latents.cpu()}};
        for (size_t s = 0; s < res.decoded.size(); ++s)
            t["decoded." + std::to_string(s)] = res.decoded[s].cpu();
        save_safetensors(t, a.tokens_out,
                         {{"seed", std::to_string(m.seed)}, {"weights", pipe.weights_source()}});
    }
    if (!a.timings_json.empty()) {
        const int64_t head_period = head_cache ? head_cache->head_cfg_cache_period() : 0;
        nlohmann::json j = {{"date", now_utc()},
                            {"environment", environment_json(m.device)},
                            {"model", pipe.describe()},
                            {"config", c.to_json()},
                            {"precision", m.precision},
                            {"batch", res.labels.size(0)},
                            {"num_iter", m.num_iter},
                            {"cfg", m.cfg},
                            {"cfg_schedule", m.cfg_schedule},
                            {"temperature", m.temperature},
                            {"num_sampling_steps", m.sampling_steps},
                            {"head_cfg_cache_period", head_period},
                            {"cuda_graphs", res.cuda_graphs},
                            {"warmup_runs", a.warmup},
                            {"runs", runs.size()},
                            {"total_ms_each", totals},
                            {"median_total_ms", median(totals)},
                            {"step_ms", res.step_millis}};
        write_json(j, a.timings_json, a.force);
    }
    return 0;
}

}  // namespace

Runner add_generate_mar(CLI::App& app) {
    auto a = std::make_shared<GenerateMarArgs>();
    auto* cmd = app.add_subcommand("generate-mar", "generate with a MAR model (diffusion head)");
    a->run.add_to(*cmd);
    cmd->add_option("-o,--out", a->out, "output image (needs --vae); batches get _<i> suffixes");
    cmd->add_option("--tokens-out", a->tokens_out, "write labels, orders, tokens, latents and per-step decoded positions (.safetensors)");
    cmd->add_option("--timings-json", a->timings_json, "write per-step timings as JSON");
    cmd->add_option("--forward-in", a->forward_in, "run encoder/decoder/DiffLoss on the tensors of this .safetensors (parity)")->check(CLI::ExistingFile);
    cmd->add_option("--forward-out", a->forward_out, "where --forward-in writes its outputs");
    cmd->add_option("--repeat", a->repeat, "timed runs")->check(CLI::Range(1, 1000));
    cmd->add_option("--warmup", a->warmup, "untimed runs first")->check(CLI::Range(0, 100));
    cmd->add_flag("--force", a->force, "overwrite existing output files");
    cmd->add_flag("-q,--quiet", a->quiet, "no per-step progress lines");
    return [a]() { return run(*a); };
}

}  // namespace varscope::cli
