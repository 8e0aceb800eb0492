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
#include "app/cli/run_report.h"
#include "app/cli/sampling_args.h"
#include "core/io/checkpoint.h"
#include "core/mar_pipeline.h"
#include "core/models/sampling_recommendation.h"
#include "core/resources.h"

namespace varscope::cli {
namespace {

struct GenerateMarArgs {
    std::string mar_path, vae_path, random_config;
    bool raw_weights = false;
    uint64_t init_seed = 0;
    std::string device = "cpu", precision = "fp32";
    std::vector<int64_t> classes;
    std::string prompt;
    int64_t batch = 1;
    uint64_t seed = 0;
    int64_t num_iter = 64;
    double cfg = 1.0, temperature = 1.0;
    std::string cfg_schedule = "linear";
    std::string sampling_steps = "100";
    std::string out, tokens_out, timings_json, forward_in, forward_out;
    bool force = false, quiet = false;
    int64_t repeat = 1, warmup = 0;
    // Tell "given on the command line" from "left at the default" (the model's recommendation
    // fills the latter).
    CLI::Option *num_iter_opt = nullptr, *cfg_opt = nullptr, *schedule_opt = nullptr,
                *temperature_opt = nullptr, *steps_opt = nullptr, *vae_opt = nullptr;
};

bool given(const CLI::Option* o) { return o != nullptr && o->count() > 0; }

// Neither --mar nor --random: the embedded emoji MAR and its KL VAE.
void use_embedded_model(GenerateMarArgs& a) {
    if (!a.mar_path.empty() || !a.random_config.empty()) return;
    const MarModelFiles f = embedded_mar_files();
    a.mar_path = f.mar_path;
    if (!given(a.vae_opt)) a.vae_path = f.vae_path;
    std::cerr << "no --mar given: using the embedded emoji MAR (" << a.mar_path << ")\n";
}

// Sampling settings the model file recommends, for the flags the user did not give.
void apply_recommendation(GenerateMarArgs& a) {
    if (a.mar_path.empty()) return;  // random weights
    const MarSamplingRecommendation rec = read_mar_sampling_recommendation(a.mar_path);
    MarSamplingRecommendation used;
    if (rec.num_iter && !given(a.num_iter_opt)) used.num_iter = a.num_iter = *rec.num_iter;
    if (rec.cfg && !given(a.cfg_opt)) used.cfg = a.cfg = *rec.cfg;
    if (rec.cfg_schedule && !given(a.schedule_opt))
        used.cfg_schedule = a.cfg_schedule = *rec.cfg_schedule;
    if (rec.temperature && !given(a.temperature_opt))
        used.temperature = a.temperature = *rec.temperature;
    if (rec.num_sampling_steps && !given(a.steps_opt))
        used.num_sampling_steps = a.sampling_steps = *rec.num_sampling_steps;
    if (!used.empty())
        std::cerr << "using the model's recommended " << used.describe()
                  << " (pass --num-iter / --cfg / --cfg-schedule / --temperature / "
                     "--num-sampling-steps to override)\n";
}

// Progress sink: one line per decoding step.
class StepPrinter : public ProbeSink {
public:
    explicit StepPrinter(int64_t steps) : steps_(steps) {}
    void on_scale(ScaleRecord r) override {
        std::cerr << "  step " << std::setw(3) << r.step + 1 << "/" << steps_ << "  "
                  << std::setw(4) << (r.tokens.defined() ? r.tokens.size(1) : 0) << " tokens"
                  << std::fixed << std::setprecision(2) << std::setw(10) << r.millis << " ms\n";
    }

private:
    int64_t steps_;
};

MarConfig random_config(const std::string& spec) {
    if (spec.empty()) throw std::invalid_argument("--random needs a preset or a JSON config");
    if (spec.front() == '{') return MarConfig::from_json(nlohmann::json::parse(spec));
    std::ifstream f(spec);
    if (f) return MarConfig::from_json(nlohmann::json::parse(f));
    return MarConfig::named(spec);
}

MarPipeline build(const GenerateMarArgs& a) {
    LoadOptions lo{a.device, parse_precision(a.precision)};
    if (!a.random_config.empty()) {
        if (!a.mar_path.empty())
            throw std::invalid_argument("--random cannot be combined with --mar");
        MarConfig cfg = random_config(a.random_config);
        cfg.num_sampling_steps = a.sampling_steps;
        return MarPipeline::random(cfg, a.init_seed, lo);
    }
    return MarPipeline::load({a.mar_path, a.vae_path, !a.raw_weights, a.sampling_steps}, lo);
}

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
    if (a.forward_out.empty()) throw std::invalid_argument("--forward-in needs --forward-out");
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
    use_embedded_model(a);
    apply_recommendation(a);
    MarPipeline pipe = build(a);
    std::cerr << pipe.describe() << "\n";
    if (!a.forward_in.empty()) return run_forward(pipe, a);
    if (a.out.empty() && a.tokens_out.empty() && a.timings_json.empty())
        throw std::invalid_argument("nothing to write: pass --out, --tokens-out or --timings-json");

    MarSampleOptions opt;
    const auto& c = pipe.config();
    if (!a.prompt.empty()) {
        if (!a.classes.empty()) throw std::invalid_argument("pass either --prompt or --class, not both");
        if (a.mar_path.empty()) throw std::invalid_argument("--prompt needs a MAR checkpoint with class names");
        a.classes = {class_for_prompt(a.prompt, a.mar_path, c.class_num)};
    }
    if (a.classes.size() == 1 && a.batch > 1)
        opt.class_ids.assign(a.batch, a.classes[0]);
    else
        opt.class_ids = a.classes;
    opt.batch = a.batch;
    opt.seed = a.seed;
    opt.num_iter = a.num_iter;
    opt.cfg = a.cfg;
    opt.cfg_schedule = parse_cfg_schedule(a.cfg_schedule);
    opt.temperature = a.temperature;
    opt.validate(c);
    if (!a.out.empty() && !pipe.sampler().has_decoder())
        throw std::invalid_argument("--out needs a VAE to decode images; use --tokens-out for latents");

    for (int64_t i = 0; i < a.warmup; ++i) pipe.generate(opt);
    std::vector<MarSampleResult> runs;
    for (int64_t r = 0; r < a.repeat; ++r) {
        std::cerr << "run " << r + 1 << "/" << a.repeat << " on " << pipe.device() << "\n";
        StepPrinter progress(opt.num_iter);
        runs.push_back(pipe.generate(opt, nullptr, a.quiet ? nullptr : &progress));
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
                         {{"seed", std::to_string(a.seed)}, {"weights", pipe.weights_source()}});
    }
    if (!a.timings_json.empty()) {
        nlohmann::json j = {{"date", now_utc()},
                            {"environment", environment_json(a.device)},
                            {"model", pipe.describe()},
                            {"config", c.to_json()},
                            {"precision", a.precision},
                            {"batch", res.labels.size(0)},
                            {"num_iter", a.num_iter},
                            {"cfg", a.cfg},
                            {"cfg_schedule", a.cfg_schedule},
                            {"temperature", a.temperature},
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
    cmd->add_option("--mar", a->mar_path, "MAR checkpoint (checkpoint-last.pth, a state dict or .safetensors); default: the embedded emoji MAR")->check(CLI::ExistingFile);
    cmd->add_flag("--raw-weights", a->raw_weights, "use the checkpoint's 'model' weights instead of its EMA ('model_ema')");
    a->vae_opt = cmd->add_option("--vae", a->vae_path, "KL-16 VAE checkpoint (kl16.ckpt)")->check(CLI::ExistingFile);
    cmd->add_option("--random", a->random_config, "random weights: mar_base | mar_large | mar_huge | JSON config (file or inline)");
    cmd->add_option("--init-seed", a->init_seed, "seed of the random weights");
    cmd->add_option("--device", a->device, "cpu, cuda or cuda:N")->capture_default_str();
    cmd->add_option("--precision", a->precision, "transformer precision")->check(CLI::IsMember({"fp32", "fp16", "bf16"}))->capture_default_str();
    cmd->add_option("--class", a->classes, "class id(s); one per image, or one for the whole batch (-1 = unconditional)")->delimiter(',');
    cmd->add_option("-p,--prompt", a->prompt, "words naming the class, e.g. \"red heart\" (best match is used; ranked list printed)");
    cmd->add_option("--batch", a->batch, "images when one or no class is given")->check(CLI::Range(1, 4096));
    cmd->add_option("--seed", a->seed, "random seed")->capture_default_str();
    a->num_iter_opt = cmd->add_option("--num-iter", a->num_iter, "decoding steps")->check(CLI::Range(1, 4096))->capture_default_str();
    a->cfg_opt = cmd->add_option("--cfg", a->cfg, "classifier-free guidance (1 = off)")->check(CLI::Range(0.0, 100.0))->capture_default_str();
    a->schedule_opt = cmd->add_option("--cfg-schedule", a->cfg_schedule, "guidance schedule")->check(CLI::IsMember({"linear", "constant"}))->capture_default_str();
    a->steps_opt = cmd->add_option("--num-sampling-steps", a->sampling_steps, "diffusion respacing: N, comma-separated section counts, or ddimN")->capture_default_str();
    a->temperature_opt = cmd->add_option("--temperature", a->temperature, "diffusion sampling temperature")->capture_default_str();
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
