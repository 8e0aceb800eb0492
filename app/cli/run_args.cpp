#include "app/cli/run_args.h"

#include <algorithm>
#include <cctype>
#include <iostream>
#include <sstream>

#include "app/cli/mar_cli_common.h"  // mar_config_argument
#include "app/cli/option_checks.h"
#include "app/cli/run_report.h"  // exec_policy
#include "app/cli/seed_option.h"
#include "core/accel/accel_config.h"
#include "core/accel/lazymar.h"
#include "core/accel/mar_accel_config.h"
#include "core/data/emoji_classes.h"
#include "core/io/state_dict.h"  // CheckpointError
#include "core/models/bsq_vae_config.h"
#include "core/models/infinity.h"
#include "core/resources.h"
#include "core/text/class_matcher.h"
#include "kernels/memory_stats.h"

namespace varscope::cli {
namespace {

bool given_in(const std::map<std::string, CLI::Option*>& options, const std::string& flag) {
    const auto it = options.find(flag);
    return it != options.end() && it->second->count() > 0;
}

// Refuses the flags of `owners`' settings that were given for a model of another family.
void refuse_foreign(const std::map<std::string, CLI::Option*>& options,
                    const std::vector<std::string>& flags, std::vector<Family> owners,
                    const Runner& runner) {
    if (std::find(owners.begin(), owners.end(), runner.family()) != owners.end()) return;
    std::string names;
    for (Family f : owners) names += std::string(names.empty() ? "" : "/") + family_title(f);
    for (const auto& f : flags)
        if (given_in(options, f))
            throw std::invalid_argument(
                f + (names[0] == 'I' ? " is an " : " is a ") + names + " setting; the model is " +
                family_title(runner.family()) + " (" +
                runner.describe().substr(0, runner.describe().find('\n')) + ")");
}

const std::vector<std::string> kVarModelFlags = {"--patch-nums"};
const std::vector<std::string> kMarModelFlags = {"--raw-weights", "--num-sampling-steps"};
const std::vector<std::string> kInfinityModelFlags = {"--t5", "--t5-offload", "--stream-blocks"};
const std::vector<std::string> kTopFlags = {"--top-k", "--top-p"};  // VAR and Infinity
const std::vector<std::string> kVarSampleFlags = {"--more-smooth"};
const std::vector<std::string> kMarSampleFlags = {"--num-iter", "--cfg-schedule", "--temperature",
                                                  "--head-cfg-period"};
const std::vector<std::string> kInfinitySampleFlags = {"--text-features", "--tau", "--h-div-w",
                                                       "--pixels", "--keep-unknown-words"};
// Class-conditional models only (a text-conditional one reads --prompt as its text).
const std::vector<std::string> kClassFlags = {"--class"};

// "2b" / "8b": the released Infinity sizes.
bool is_infinity_size(const std::string& s) {
    return s == "2b" || s == "8b";
}

// The range LazyMAR's parameter table gives head_cfg_period (one source for the accel JSON
// and the flag).
const ParamSpec& head_period_spec() {
    for (const auto& p : LazyMarConfig::spec().params)
        if (p.key == "head_cfg_period") return p;
    throw std::logic_error("LazyMarConfig::spec() has no head_cfg_period");
}

// The shipped text-to-image model (what "no checkpoint" runs when it is shipped).
bool is_embedded_t2i(const Runner& runner) {
    return runner.family() == Family::Infinity && embedded_t2i_available() &&
           runner.model_path() == embedded_t2i_files().model_path;
}

bool is_depth(const std::string& s) {
    return !s.empty() && s.size() <= 3 &&
           std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

}  // namespace

void ModelArgs::add_to(CLI::App& cmd, Family default_family) {
    default_family_ = default_family;
    cmd_ = &cmd;
    auto& o = options_;
    o["--var"] = cmd.add_option("--var", var_path,
                                "VAR transformer checkpoint (.pth or .safetensors); the family is "
                                "read from its tensors")
                     ->check(CLI::ExistingFile);
    o["--infinity"] = cmd.add_option("--infinity", infinity_path,
                                     "Infinity transformer checkpoint (infinity_2b_reg.pth, the 8B "
                                     "release, or .safetensors); --vae is its BSQ VAE")
                          ->check(CLI::ExistingFile);
    o["--t5"] = cmd.add_option("--t5", t5_path,
                               "Infinity: the T5 encoder's Hugging Face folder (config.json, "
                               "*.safetensors, spiece.model; flan-t5-xl for the releases)")
                    ->check(CLI::ExistingDirectory);
    o["--t5-offload"] = cmd.add_flag("--t5-offload", t5_offload,
                                     "Infinity on CUDA: move the T5 encoder off the GPU after "
                                     "encoding (low-memory mode)");
    o["--stream-blocks"] =
        cmd.add_option_function<std::string>(
               "--stream-blocks",
               [this](const std::string& v) {
                   stream_blocks = v == "auto" ? ModelSpec::kStreamBlocksAuto : std::stoll(v);
               },
               "Infinity, low-memory mode: keep the last N transformer blocks in host memory "
               "and copy each onto the device right before it runs (same images; each forward "
               "pass moves their weights over the host link, and the steps run without CUDA "
               "graphs); auto: on CUDA, as many as a run needs to fit the free memory, none "
               "while it fits")
            ->type_name("N|auto")
            ->check(CLI::IsMember({"auto"}) | CLI::Range(int64_t{0}, int64_t{1024}));
    o["--mar"] = cmd.add_option("--mar", mar_path,
                                "MAR checkpoint (checkpoint-last.pth, a state dict or "
                                ".safetensors)")
                     ->check(CLI::ExistingFile);
    o["--vae"] = cmd.add_option("--vae", vae_path,
                                "the model's VAE: the multi-scale VQVAE of a VAR model, the KL-16 "
                                "VAE (kl16.ckpt) of a MAR model; default with an embedded model: "
                                "its own")
                     ->check(CLI::ExistingFile);
    o["--family"] =
        cmd.add_option("--family", family,
                       std::string("embedded model to use when no checkpoint is given: t2i (or "
                                   "infinity: the emoji text-to-image model, --prompt is free "
                                   "text), var (the class-conditional emoji VAR: --class, or "
                                   "--prompt matched to a class name) or mar (default ") +
                           (default_family == Family::Mar
                                ? "mar"
                                : "t2i when it is shipped, else var; var when --class is given") +
                           ")")
            ->check(CLI::IsMember({"t2i", "infinity", "var", "mar"}));
    o["--random"] = cmd.add_option("--random", random,
                                   "random (official-init) weights: a VAR depth (e.g. 16, 30), a "
                                   "MAR config (mar_base | mar_large | mar_huge | JSON file or "
                                   "inline), or an Infinity size (2b | 8b, with its BSQ VAE)");
    o["--init-seed"] = cmd.add_option("--init-seed", init_seed, "seed of the random weights")
                           ->check(seed_validator());
    o["--patch-nums"] = cmd.add_option("--patch-nums", patch_nums,
                                       "VAR: patch schedule, e.g. 1,2,3,4,5,6,8,10,13,16")
                            ->delimiter(',')
                            ->check(whole_number_at_least(1));  // each entry; "" was read as [0]
    o["--device"] =
        cmd.add_option("--device", device, "cpu, cuda or cuda:N")->capture_default_str();
    o["--device-memory-fraction"] =
        cmd.add_option("--device-memory-fraction", memory_fraction,
                       "CUDA: the share of the GPU's memory this process may allocate (to share a "
                       "GPU; also how the out-of-memory handling is tested)")
            ->check(CLI::Range(0.001, 1.0));
    o["--precision"] =
        cmd.add_option("--precision", precision,
                       "transformer precision (VAR also: bf16-autocast: fp32 stream, bf16 matrix "
                       "products, as torch.autocast; tf32: fp32 with TF32 matrix products on "
                       "CUDA, as the official demo; Infinity: fp32, tf32 or bf16, its official "
                       "bf16 mode)")
            ->check(CLI::IsMember({"fp32", "fp16", "bf16", "bf16-autocast", "tf32"}))
            ->capture_default_str();
    o["--raw-weights"] = cmd.add_flag("--raw-weights", raw_weights,
                                      "MAR: use the checkpoint's 'model' weights instead of its "
                                      "EMA ('model_ema')");
    o["--num-sampling-steps"] =
        cmd.add_option("--num-sampling-steps", sampling_steps,
                       "MAR: diffusion respacing: N, comma-separated section counts, or ddimN "
                       "(default: the model file's recommendation, else 100)");
}

bool ModelArgs::given(const std::string& flag) const {
    return given_in(options_, flag);
}

Family ModelArgs::likely_family() const {
    if (!random.empty())
        return is_depth(random)           ? Family::Var
               : is_infinity_size(random) ? Family::Infinity
                                          : Family::Mar;
    if (!infinity_path.empty()) return Family::Infinity;
    if (!var_path.empty()) return Family::Var;
    if (!mar_path.empty()) return Family::Mar;
    return embedded_family();
}

Family ModelArgs::embedded_family() const {
    if (family == "t2i") return Family::Infinity;
    if (!family.empty()) return family_from_id(family);
    if (default_family_ != Family::Var) return default_family_;
    const auto given_on = [this](const char* flag) {
        const CLI::Option* o = cmd_ ? cmd_->get_option_no_throw(flag) : nullptr;
        return o && o->count() > 0;
    };
    // A request for a class-conditional model: the embedded VAR, whatever else is shipped.
    for (const char* flag : {"--class", "--more-smooth", "--patch-nums"})
        if (given_on(flag)) return Family::Var;
    return embedded_t2i_available() ? Family::Infinity : Family::Var;
}

std::unique_ptr<Runner> ModelArgs::build() const {
    LoadOptions lo = load_options(device, precision);
    lo.exec = exec_policy();  // the VARSCOPE_* variables, read once (app/exec_env)
    if (given("--device-memory-fraction")) {
        const c10::Device d(lo.device);
        if (!d.is_cuda())
            throw std::invalid_argument("--device-memory-fraction is for a CUDA device");
        kernels::set_cuda_memory_fraction(d.index() < 0 ? 0 : d.index(), memory_fraction);
    }
    std::unique_ptr<Runner> runner;
    if (int(!var_path.empty()) + int(!mar_path.empty()) + int(!infinity_path.empty()) > 1)
        throw std::invalid_argument("pass one checkpoint: --var, --mar or --infinity");
    if (!random.empty()) {
        if (!var_path.empty() || !mar_path.empty() || !infinity_path.empty() || !vae_path.empty())
            throw std::invalid_argument(
                "--random cannot be combined with --var/--mar/--infinity/--vae");
        if (is_infinity_size(random)) {
            const bool big = random == "8b";
            runner = random_infinity_runner(
                big ? InfinityConfig::infinity_8b() : InfinityConfig::infinity_2b(),
                big ? BsqVaeConfig::d56_f8_14_patchify() : BsqVaeConfig::d32reg(), init_seed, lo,
                t5_path, t5_offload, stream_blocks);
        } else if (is_depth(random)) {
            const int depth = std::stoi(random);
            if (depth < 1 || depth > 64)
                throw std::invalid_argument("--random: a VAR depth must be in [1, 64], got " +
                                            random);
            VarConfig vc = VarConfig::for_depth(depth, patch_nums);
            VqvaeConfig ac;  // the official vae_ch160v4096z32 architecture
            ac.patch_nums = vc.patch_nums;
            runner = random_var_runner(vc, ac, init_seed, lo);
        } else {
            if (lo.autocast || lo.tf32)
                throw std::invalid_argument("--precision " + precision +
                                            " is a VAR mode; a MAR model takes fp32, fp16 or bf16");
            MarConfig c = mar_config_argument(random);
            c.num_sampling_steps = sampling_steps;
            runner = random_mar_runner(c, init_seed, lo);
        }
    } else {
        ModelSpec spec;
        spec.model_path = !var_path.empty()   ? var_path
                          : !mar_path.empty() ? mar_path
                                              : infinity_path;
        spec.vae_path = vae_path;
        spec.text_encoder_path = t5_path;
        spec.text_encoder_offload = t5_offload;
        spec.stream_blocks = stream_blocks;
        if (!var_path.empty()) spec.named_as = Family::Var;
        if (!mar_path.empty()) spec.named_as = Family::Mar;
        if (!infinity_path.empty()) spec.named_as = Family::Infinity;
        spec.embedded = embedded_family();
        spec.patch_nums = patch_nums;
        spec.prefer_ema = !raw_weights;
        if (given("--num-sampling-steps")) spec.diffusion_steps = sampling_steps;
        if (spec.embedded_model()) {
            if (spec.embedded == Family::Var) {
                if (!vae_path.empty())
                    throw std::invalid_argument(
                        "pass both --var and --vae (or neither, for the embedded emoji model)");
                if (!embedded_model_available())
                    throw std::invalid_argument(
                        "no model: pass --var and --vae checkpoints, or --random <depth> for "
                        "random weights (the embedded emoji model was not found in " +
                        resource_dir() + "/models)");
                std::cerr << "no checkpoint given: using the embedded emoji VAR ("
                          << embedded_model_files().var_path << ")\n";
            } else if (spec.embedded == Family::Infinity) {
                std::cerr << "no checkpoint given: using the embedded emoji text-to-image model ("
                          << embedded_t2i_files().model_path
                          << "; --family var for the class-conditional emoji VAR)\n";
            } else {
                std::cerr << "no checkpoint given: using the embedded emoji MAR ("
                          << embedded_mar_files().mar_path << ")\n";
            }
        } else if (!var_path.empty() && vae_path.empty()) {
            throw std::invalid_argument(
                "pass both --var and --vae (or neither, for the embedded emoji model)");
        }
        // The precision modes of VAR only: refused before the file is read for a MAR one.
        if ((lo.autocast || lo.tf32) && (spec.named_as == Family::Mar ||
                                         (spec.embedded_model() && spec.embedded == Family::Mar)))
            throw std::invalid_argument("--precision " + precision +
                                        " is a VAR mode; a MAR model takes fp32, fp16 or bf16");
        runner = open_runner(spec, lo);
        if (runner->family() == Family::Mar && (lo.autocast || lo.tf32))
            throw std::invalid_argument("--precision " + precision +
                                        " is a VAR mode; a MAR model takes fp32, fp16 or bf16");
    }
    refuse_foreign(options_, kVarModelFlags, {Family::Var}, *runner);
    refuse_foreign(options_, kMarModelFlags, {Family::Mar}, *runner);
    refuse_foreign(options_, kInfinityModelFlags, {Family::Infinity}, *runner);
    return runner;
}

void SampleArgs::add_to(CLI::App& cmd) {
    auto& o = options_;
    o["--class"] = cmd.add_option("--class", classes,
                                  "class id(s); one per image, or one for the whole batch (-1 = "
                                  "unconditional); none = random")
                       ->delimiter(',');
    o["--prompt"] = cmd.add_option("-p,--prompt", prompt,
                                   "a text-to-image model (Infinity, the embedded emoji t2i "
                                   "model): free text, e.g. \"thumbs up, dark skin tone, twemoji "
                                   "style\" (one per image); a class-conditional model: words "
                                   "naming the class, e.g. \"red heart\" (best match is used; "
                                   "ranked list printed)")
                        ->check(not_blank("words naming a class or describing the image"));
    o["--batch"] =
        cmd.add_option("--batch", batch, "images to generate when one or no class is given")
            ->check(CLI::Range(1, 4096));
    o["--seed"] = cmd.add_option("--seed", seed, "random seed (same seed, same device: same image)")
                      ->check(seed_validator())
                      ->capture_default_str();
    o["--random-seed"] = cmd.add_flag("--random-seed", random_seed, "do not seed the sampler");
    o["--cfg"] = cmd.add_option("--cfg", cfg,
                                "classifier-free guidance scale (VAR: ramped over scales, default "
                                "4; MAR: 1 = off, the default)")
                     ->check(CLI::Range(0.0, 100.0));
    o["--top-k"] = cmd.add_option("--top-k", top_k, "VAR: top-k filter, 0 = off")
                       ->check(whole_number_at_least(0))
                       ->capture_default_str();
    o["--top-p"] = cmd.add_option("--top-p", top_p, "VAR: top-p (nucleus) filter, 0 = off")
                       ->check(CLI::Range(0.0, 1.0))
                       ->capture_default_str();
    o["--more-smooth"] = cmd.add_flag("--more-smooth", more_smooth,
                                      "VAR: Gumbel-softmax smoothing (visualisation only)");
    o["--num-iter"] = cmd.add_option("--num-iter", num_iter, "MAR: decoding steps")
                          ->check(CLI::Range(1, 4096))
                          ->capture_default_str();
    o["--cfg-schedule"] = cmd.add_option("--cfg-schedule", cfg_schedule, "MAR: guidance schedule")
                              ->check(CLI::IsMember({"linear", "constant"}))
                              ->capture_default_str();
    o["--temperature"] =
        cmd.add_option("--temperature", temperature, "MAR: diffusion sampling temperature")
            ->capture_default_str();
    const ParamSpec& hp = head_period_spec();
    const auto lo = static_cast<int64_t>(hp.min), hi = static_cast<int64_t>(hp.max);
    o["--head-cfg-period"] =
        cmd.add_option("--head-cfg-period", head_cfg_period,
                       "MAR: LazyMAR's DiffLoss head condition cache (head_cfg_period): every "
                       "N-th diffusion step runs both CFG halves, the others only the "
                       "conditional one; 0 = off. Needs --accel with LazyMAR's condition cache")
            ->check(CLI::Validator(
                [lo, hi](std::string& s) -> std::string {
                    std::istringstream in(s);
                    int64_t v = 0;
                    if (!(in >> v) || !in.eof())
                        return "must be a whole number in [" + std::to_string(lo) + ", " +
                               std::to_string(hi) + "] (0 = off), got '" + s + "'";
                    if (v < lo || v > hi)
                        return "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                               "] (diffusion steps per full CFG evaluation of the head; 0 = off), "
                               "got " +
                               s;
                    return {};
                },
                "INT in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]"));
    o["--no-cuda-graphs"] = cmd.add_flag("--no-cuda-graphs", no_cuda_graphs,
                                         "run every step eagerly on CUDA (no graph replay; for "
                                         "debugging and timing)");
    o["--attention"] = cmd.add_option("--attention", attention, "attention backend")
                           ->check(CLI::IsMember({"sdpa", "eager"}))
                           ->capture_default_str();
    o["--text-features"] =
        cmd.add_option("--text-features", text_features,
                       "Infinity: precomputed T5 features ('kv_compact' (sum of lengths, width), "
                       "'lens' (B)) instead of --prompt")
            ->check(CLI::ExistingFile);
    o["--tau"] = cmd.add_option("--tau", tau, "Infinity: sampling temperature of the bits")
                     ->check(CLI::Range(0.01, 10.0));
    o["--h-div-w"] = cmd.add_option("--h-div-w", h_div_w,
                                    "Infinity: aspect ratio (height / width); the nearest official "
                                    "template's schedule is used")
                         ->check(CLI::Range(0.1, 10.0))
                         ->capture_default_str();
    o["--pixels"] = cmd.add_option("--pixels", pixels,
                                   "Infinity: image size class (default: the model's own, from "
                                   "its file's metadata; official models 1M)")
                        ->check(CLI::IsMember({"0.06M", "0.25M", "0.60M", "1M"}));
    o["--keep-unknown-words"] =
        cmd.add_flag("--keep-unknown-words", keep_unknown_words,
                     "Infinity: hand the prompt to the text encoder as typed; by default a model "
                     "whose T5 folder lists its words (prompt_vocabulary.json: the embedded one) "
                     "leaves out the words it was never trained on, with a note naming them");
    o["--no-memory-check"] =
        cmd.add_flag("--no-memory-check", no_memory_check,
                     "run even when the memory estimate says the batch does not fit");
}

std::string out_of_memory_message(const Runner& runner, const SampleSettings& s,
                                  const std::string& what, const AccelPlan* accel) {
    kernels::empty_cuda_cache();  // what the failed run held is free again
    const MemoryEstimate estimate = runner.estimate_memory(s, accel);
    MemoryEstimate most = estimate;  // every image at the method's most (AMS-KV: all promoted)
    most.per_image = std::max(estimate.per_image, estimate.per_image_most);
    const int64_t available = available_memory(runner.device());
    std::string msg = "out of " + runner.device().str() + " memory with " +
                      std::to_string(s.images()) + (s.images() == 1 ? " image" : " images") +
                      " (estimate " + format_bytes(estimate.bytes());
    if (most.bytes() > estimate.bytes()) msg += " to " + format_bytes(most.bytes());
    if (available >= 0) msg += ", " + format_bytes(available) + " free now";
    msg += ")";
    if (available >= 0) {
        const auto fits = [&](const MemoryEstimate& e) {
            return std::min(e.max_images(int64_t(double(available) * kMemoryHeadroom)),
                            s.images() / 2);
        };
        const int64_t fit = fits(most), fit_least = fits(estimate);
        msg += fit > 0         ? ": try --batch " + std::to_string(fit)
               : fit_least > 0 ? ": try --batch " + std::to_string(fit_least) + " (or fewer)"
                               : ": not even one image fits; try a smaller precision or schedule";
        if (fit > 0 && fit_least > fit)
            msg += " (this method's KV cache depends on the image: up to --batch " +
                   std::to_string(fit_least) + " may fit when no layer needs more than its least)";
    }
    const auto first_line = what.substr(0, what.find('\n'));
    return msg + "\n  (" + first_line + ")";
}

void SampleArgs::check_memory(const Runner& runner, const SampleSettings& s,
                              const AccelPlan* accel) const {
    const MemoryEstimate estimate = runner.estimate_memory(s, accel);
    if (no_memory_check) return;
    const int64_t available = available_memory(runner.device());
    try {
        check_memory_fits(estimate, available, runner.device().str());
    } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(std::string(e.what()) + " (--no-memory-check runs it anyway)");
    }
    // It fits at the method's least (AMS-KV's unpromoted layers); say when the most would not.
    if (available >= 0 && estimate.bytes_most() > estimate.bytes() &&
        double(estimate.bytes_most()) > double(available) * kMemoryHeadroom)
        std::cerr << "note: the KV cache of this method depends on the image: "
                  << format_bytes(estimate.bytes())
                  << " if no layer needs more than its least, up to "
                  << format_bytes(estimate.bytes_most()) << " (" << format_bytes(available)
                  << " free); if it runs out, the run stops (exit 3) naming a batch to try\n";
}

bool SampleArgs::given(const std::string& flag) const {
    return given_in(options_, flag);
}

SampleSettings SampleArgs::resolve(const Runner& runner) const {
    refuse_foreign(options_, kVarSampleFlags, {Family::Var}, runner);
    refuse_foreign(options_, kTopFlags, {Family::Var, Family::Infinity}, runner);
    refuse_foreign(options_, kMarSampleFlags, {Family::Mar}, runner);
    refuse_foreign(options_, kInfinitySampleFlags, {Family::Infinity}, runner);
    refuse_foreign(options_, kClassFlags, {Family::Var, Family::Mar}, runner);
    // Several classes set the batch themselves: a different --batch was ignored without a word.
    if (classes.size() > 1 && batch != 1 && batch != int64_t(classes.size()))
        throw std::invalid_argument("--batch " + std::to_string(batch) + " does not match the " +
                                    std::to_string(classes.size()) +
                                    " classes given (one image per class; --batch goes with "
                                    "one class or none)");
    SampleSettings s = runner.defaults();
    s.class_ids = classes;
    if (classes.size() == 1 && batch > 1) s.class_ids.assign(batch, classes[0]);
    s.batch = batch;
    s.seed = random_seed ? std::nullopt : std::optional<uint64_t>(seed);
    if (given("--cfg")) s.cfg = cfg;
    s.top_k = top_k;
    s.top_p = top_p;
    s.more_smooth = more_smooth;
    s.num_iter = num_iter;
    s.cfg_schedule = parse_cfg_schedule(cfg_schedule);
    s.temperature = temperature;
    s.attention = attention == "eager" ? AttentionBackend::Eager : AttentionBackend::Sdpa;
    s.cuda_graphs = !no_cuda_graphs;

    std::set<std::string> named;  // settings given on the command line, by their JSON names
    for (const auto& [flag, opt] : options_)
        if (opt->count() > 0) {
            std::string key = flag.substr(2);
            std::replace(key.begin(), key.end(), '-', '_');
            named.insert(key);
        }
    std::string used;
    try {
        used = runner.apply_recommendation(s, named);
    } catch (const CheckpointError& e) {  // the weights are fine: run without it
        std::cerr << "warning: " << e.what() << "; its sampling recommendation is ignored\n";
    }
    if (!used.empty())
        std::cerr << "using the model's recommended " << used << " (pass the flags to override)\n";
    if (random_seed && seed != 0)  // the flag wins: say so rather than drop --seed silently
        std::cerr << "note: --random-seed ignores --seed " << seed << "\n";
    if (runner.family() == Family::Infinity) {
        // A text-conditional model: --prompt is its text (one per image), or a features file.
        if (!prompt.empty()) s.prompts.assign(batch, prompt);
        s.text_features = text_features;
        if (given("--tau")) s.tau = tau;
        if (given("--h-div-w")) s.h_div_w = h_div_w;
        if (given("--pixels")) s.pixels = pixels;  // else the size the model file says
        s.keep_unknown_words = keep_unknown_words;
        if (s.prompts.empty() && s.text_features.empty())
            throw std::invalid_argument(
                "Infinity needs a text: --prompt \"...\" (free text, e.g. \"thumbs up, twemoji "
                "style\") or --text-features FILE" +
                std::string(is_embedded_t2i(runner)
                                ? "; --family var picks the class-conditional emoji VAR"
                                : ""));
    } else if (!prompt.empty()) {
        if (!classes.empty())
            throw std::invalid_argument("pass either --prompt or --class, not both");
        if (runner.model_path().empty())
            throw std::invalid_argument("--prompt needs a checkpoint with class names");
        s.class_ids.assign(
            batch, class_for_prompt(prompt, runner.model_path(), runner.shape().num_classes));
    }
    if (head_cfg_period > 0 && s.cfg == 1.0 && runner.family() == Family::Mar)
        std::cerr << "note: --head-cfg-period has no effect without guidance (--cfg 1)\n";
    runner.validate(s);
    return s;
}

std::shared_ptr<const AccelPlan> SampleArgs::accel(const Runner& runner,
                                                   const std::string& arg) const {
    std::shared_ptr<const AccelPlan> plan;
    try {
        plan = runner.accel_from_argument(arg);
        if (runner.family() == Family::Mar && given("--head-cfg-period")) {
            nlohmann::json j = plan->to_json();
            auto& lazy = j["lazymar"];
            const int64_t before = lazy.value("head_cfg_period", int64_t{0});
            if (before != 0 && before != head_cfg_period)
                std::cerr << "--head-cfg-period " << head_cfg_period
                          << " replaces the accelerator config's lazymar.head_cfg_period " << before
                          << "\n";
            lazy["head_cfg_period"] = head_cfg_period;
            plan = runner.parse_accel(j);
            if (head_cfg_period > 0 && plan->report().value("head_cfg_cache_period", 0) == 0)
                throw std::invalid_argument(
                    "--head-cfg-period applies to LazyMAR's condition cache, which the "
                    "accelerated side (" +
                    runner.accel_from_argument(arg)->summary() +
                    ") does not use; pass --accel lazymar or lazymar-condition");
        }
    } catch (const AccelConfigError& e) {
        throw std::invalid_argument(std::string("--accel: ") + e.what());
    }
    return plan;
}

ClassMatcher class_matcher_for(const std::string& model_path, int64_t num_classes) {
    const std::string list = class_list_for(model_path, num_classes);
    if (list.empty())
        throw std::invalid_argument(
            "--prompt needs a class-name list for this model; none was found");
    auto names = load_class_list(list);
    if (static_cast<int64_t>(names.size()) != num_classes)
        throw std::invalid_argument(list + " names " + std::to_string(names.size()) +
                                    " classes but the model has " + std::to_string(num_classes));
    return ClassMatcher(std::move(names));
}

int64_t class_for_prompt(const std::string& prompt, const std::string& model_path,
                         int64_t num_classes) {
    auto matches = class_matcher_for(model_path, num_classes).rank(prompt, 5);
    if (matches.empty())
        throw std::invalid_argument("no class matches the prompt '" + prompt + "'");
    std::cerr << "prompt '" << prompt << "':";
    for (const auto& m : matches) std::cerr << "  [" << m.class_id << "] " << m.label;
    std::cerr << "\n";
    return matches.front().class_id;
}

std::string all_preset_names() {
    std::string s;
    for (const auto& [name, _] : accel_presets()) s += (s.empty() ? "" : ", ") + name;
    s += "; Infinity also: ";
    bool first_infinity = true;
    for (const auto& [name, _] : infinity_accel_presets()) {
        if (accel_presets().count(name)) continue;
        s += (first_infinity ? "" : ", ") + name;
        first_infinity = false;
    }
    s += "; MAR: ";
    bool first = true;
    for (const auto& [name, _] : mar_accel_presets()) {
        s += (first ? "" : ", ") + name;
        first = false;
    }
    return s;
}

}  // namespace varscope::cli
