#include "app/cli/mar_cli_common.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app/cli/image_io.h"
#include "app/cli/io_paths.h"
#include "app/cli/option_checks.h"
#include "app/cli/sampling_args.h"
#include "app/cli/seed_option.h"
#include "core/accel/lazymar.h"
#include "core/io/json_read.h"
#include "core/io/state_dict.h"  // CheckpointError
#include "core/models/sampling_recommendation.h"
#include "core/resources.h"

namespace varscope::cli {
namespace {

namespace fs = std::filesystem;

bool given(const CLI::Option* o) { return o != nullptr && o->count() > 0; }

// The range LazyMAR's parameter table gives head_cfg_period (one source for the accel JSON
// and the flag).
const ParamSpec& head_period_spec() {
    for (const auto& p : LazyMarConfig::spec().params)
        if (p.key == "head_cfg_period") return p;
    throw std::logic_error("LazyMarConfig::spec() has no head_cfg_period");
}

// Can a file be created in `dir`? (access() says yes for root even on read-only mounts.)
bool writable_dir(const fs::path& dir) {
    const fs::path probe = dir / (".varscope-write-test-" + std::to_string(::getpid()));
    bool ok = false;
    {
        std::ofstream f(probe);
        ok = static_cast<bool>(f);
    }
    std::error_code ec;
    fs::remove(probe, ec);
    return ok;
}

}  // namespace

MarConfig mar_config_argument(const std::string& spec) {
    if (spec.empty()) throw std::invalid_argument("--random needs a preset or a JSON config");
    // JSON errors name the flag and exit 2 (they were nlohmann's text alone, exit 3).
    const auto config_of = [&](const nlohmann::json& j) {
        try {
            return MarConfig::from_json(j);
        } catch (const nlohmann::json::exception& e) {
            throw std::invalid_argument("--random: " + std::string(e.what()));
        }
    };
    if (spec.front() == '{') return config_of(parse_json(spec, "--random: inline JSON"));
    // Whether a file is there, without opening it (opening a FIFO would block).
    std::error_code ec;
    if (fs::exists(spec, ec)) return config_of(read_json_file(spec, "--random: '" + spec + "'"));
    return MarConfig::named(spec);
}

void MarRunArgs::add_to(CLI::App& cmd) {
    cmd.add_option("--mar", mar_path, "MAR checkpoint (checkpoint-last.pth, a state dict or .safetensors); default: the embedded emoji MAR")->check(CLI::ExistingFile);
    cmd.add_flag("--raw-weights", raw_weights, "use the checkpoint's 'model' weights instead of its EMA ('model_ema')");
    vae_opt_ = cmd.add_option("--vae", vae_path, "KL-16 VAE checkpoint (kl16.ckpt); default with the embedded MAR: its KL VAE")->check(CLI::ExistingFile);
    cmd.add_option("--random", random_config, "random weights: mar_base | mar_large | mar_huge | JSON config (file or inline)");
    cmd.add_option("--init-seed", init_seed, "seed of the random weights")->check(seed_validator());
    cmd.add_option("--device", device, "cpu, cuda or cuda:N")->capture_default_str();
    cmd.add_option("--precision", precision, "transformer precision")->check(CLI::IsMember({"fp32", "fp16", "bf16"}))->capture_default_str();
    cmd.add_option("--class", classes, "class id(s); one per image, or one for the whole batch (-1 = unconditional)")->delimiter(',');
    cmd.add_option("-p,--prompt", prompt, "words naming the class, e.g. \"red heart\" (best match is used; ranked list printed)")->check(not_blank("words naming a class"));
    cmd.add_option("--batch", batch, "images when one or no class is given")->check(CLI::Range(1, 4096));
    cmd.add_option("--seed", seed, "random seed")->check(seed_validator())->capture_default_str();
    num_iter_opt_ = cmd.add_option("--num-iter", num_iter, "decoding steps")->check(CLI::Range(1, 4096))->capture_default_str();
    cfg_opt_ = cmd.add_option("--cfg", cfg, "classifier-free guidance (1 = off)")->check(CLI::Range(0.0, 100.0))->capture_default_str();
    schedule_opt_ = cmd.add_option("--cfg-schedule", cfg_schedule, "guidance schedule")->check(CLI::IsMember({"linear", "constant"}))->capture_default_str();
    steps_opt_ = cmd.add_option("--num-sampling-steps", sampling_steps, "diffusion respacing: N, comma-separated section counts, or ddimN")->capture_default_str();
    temperature_opt_ = cmd.add_option("--temperature", temperature, "diffusion sampling temperature")->capture_default_str();
    cmd.add_flag("--no-cuda-graphs", no_cuda_graphs, "run each step eagerly on CUDA (no graph replay; for debugging and timing)");
    const ParamSpec& hp = head_period_spec();
    const auto lo = static_cast<int64_t>(hp.min), hi = static_cast<int64_t>(hp.max);
    head_period_opt_ =
        cmd.add_option("--head-cfg-period", head_cfg_period,
                       "DiffLoss head condition cache (LazyMAR's head_cfg_period): every N-th diffusion "
                       "step runs both CFG halves, the others only the conditional one; 0 = off")
            ->check(CLI::Validator(
                [lo, hi](std::string& s) -> std::string {
                    std::istringstream in(s);
                    int64_t v = 0;
                    if (!(in >> v) || !in.eof())
                        return "must be a whole number in [" + std::to_string(lo) + ", " +
                               std::to_string(hi) + "] (0 = off), got '" + s + "'";
                    if (v < lo || v > hi)
                        return "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                               "] (diffusion steps per full CFG evaluation of the head; 0 = off), got " + s;
                    return {};
                },
                "INT in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]"));
}

bool MarRunArgs::head_cfg_period_given() const { return given(head_period_opt_); }

void MarRunArgs::resolve_model() {
    if (mar_path.empty() && random_config.empty()) {
        const MarModelFiles f = embedded_mar_files();  // CheckpointError naming what is missing
        mar_path = f.mar_path;
        if (!given(vae_opt_)) vae_path = f.vae_path;
        std::cerr << "no --mar given: using the embedded emoji MAR (" << mar_path << ")\n";
    }
    if (mar_path.empty()) return;  // random weights: no recommendation
    MarSamplingRecommendation rec;
    try {
        rec = read_mar_sampling_recommendation(mar_path);
    } catch (const CheckpointError& e) {  // the weights are fine: run without it
        std::cerr << "warning: " << e.what() << "; its sampling recommendation is ignored\n";
    }
    MarSamplingRecommendation used;
    if (rec.num_iter && !given(num_iter_opt_)) used.num_iter = num_iter = *rec.num_iter;
    if (rec.cfg && !given(cfg_opt_)) used.cfg = cfg = *rec.cfg;
    if (rec.cfg_schedule && !given(schedule_opt_))
        used.cfg_schedule = cfg_schedule = *rec.cfg_schedule;
    if (rec.temperature && !given(temperature_opt_))
        used.temperature = temperature = *rec.temperature;
    if (rec.num_sampling_steps && !given(steps_opt_))
        used.num_sampling_steps = sampling_steps = *rec.num_sampling_steps;
    if (!used.empty())
        std::cerr << "using the model's recommended " << used.describe()
                  << " (pass --num-iter / --cfg / --cfg-schedule / --temperature / "
                     "--num-sampling-steps to override)\n";
}

MarPipeline MarRunArgs::build() const {
    LoadOptions lo{device, parse_precision(precision)};
    if (!random_config.empty()) {
        if (!mar_path.empty()) throw std::invalid_argument("--random cannot be combined with --mar");
        MarConfig c = mar_config_argument(random_config);
        c.num_sampling_steps = sampling_steps;
        return MarPipeline::random(c, init_seed, lo);
    }
    if (mar_path.empty()) throw std::invalid_argument("no model: pass --mar CHECKPOINT or --random PRESET");
    return MarPipeline::load({mar_path, vae_path, !raw_weights, sampling_steps}, lo);
}

MarSampleOptions MarRunArgs::options(const MarPipeline& pipe) const {
    const MarConfig& c = pipe.config();
    std::vector<int64_t> ids = classes;
    if (!prompt.empty()) {
        if (!classes.empty()) throw std::invalid_argument("pass either --prompt or --class, not both");
        if (mar_path.empty()) throw std::invalid_argument("--prompt needs a MAR checkpoint with class names");
        ids = {class_for_prompt(prompt, mar_path, c.class_num)};
    }
    MarSampleOptions o;
    if (ids.size() == 1 && batch > 1)
        o.class_ids.assign(batch, ids[0]);
    else
        o.class_ids = ids;
    o.batch = batch;
    o.seed = seed;
    o.num_iter = num_iter;
    o.cfg = cfg;
    o.cfg_schedule = parse_cfg_schedule(cfg_schedule);
    o.temperature = temperature;
    o.cuda_graphs = !no_cuda_graphs;
    o.head_cfg_cache_period = head_cfg_period_given() ? head_cfg_period : 0;
    if (o.head_cfg_cache_period > 0 && cfg == 1.0)
        std::cerr << "note: --head-cfg-period has no effect without guidance (--cfg 1)\n";
    o.validate(c);
    return o;
}

void check_output_file(const std::string& path, bool force, const std::string& flag, bool image) {
    if (path.empty()) return;
    check_not_an_input(path, flag);  // --force or not
    const fs::path p(path);
    const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
    std::error_code ec;
    if (!fs::exists(dir, ec))
        throw std::invalid_argument(flag + ": output folder '" + dir.string() + "' does not exist");
    if (!fs::is_directory(dir, ec))
        throw std::invalid_argument(flag + ": '" + dir.string() + "' is not a folder");
    if (fs::is_directory(p, ec))
        throw std::invalid_argument(flag + ": '" + path + "' is a folder, expected a file name");
    if (fs::exists(p, ec) && !force)
        throw std::invalid_argument(flag + ": '" + path + "' exists; pass --force to overwrite it");
    if (!writable_dir(dir))
        throw std::invalid_argument(flag + ": cannot write in '" + dir.string() + "'");
    if (image) {
        std::string ext = p.extension().string();
        std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char ch) { return std::tolower(ch); });
        if (ext == ".jpeg") ext = ".jpg";
        // supported_image_formats(): ".png, .jpg, .ppm, .npy" or ".ppm, .npy (...)".
        const std::string formats = supported_image_formats();
        const std::string list = formats.substr(0, formats.find(" ("));
        bool ok = false;
        std::istringstream in(list);
        for (std::string item; std::getline(in, item, ',');) {
            item.erase(0, item.find_first_not_of(' '));
            ok = ok || (!ext.empty() && item == ext);
        }
        if (!ok)
            throw std::invalid_argument(flag + ": unsupported image format '" + ext + "' for '" +
                                        path + "' (supported: " + formats + ")");
    }
}

void check_distinct_outputs(const std::vector<std::pair<std::string, std::string>>& outputs) {
    std::vector<std::pair<std::string, fs::path>> seen;  // flag, normalised path
    for (const auto& [flag, path] : outputs) {
        if (path.empty()) continue;
        std::error_code ec;
        fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
        if (ec) p = fs::absolute(path).lexically_normal();
        for (const auto& [other_flag, other] : seen)
            if (other == p)
                throw std::invalid_argument(
                    other_flag + (other_flag == flag ? " names '" : " and " + flag + " name '") +
                    path + "' twice: each output needs a file of its own");
        seen.emplace_back(flag, p);
    }
}

void check_generate_outputs(const std::string& out, int64_t n, const std::string& tokens_out,
                            const std::string& timings_json, bool force) {
    std::vector<std::pair<std::string, std::string>> outputs = {{"--tokens-out", tokens_out},
                                                                {"--timings-json", timings_json}};
    for (int64_t i = 0; i < n && !out.empty(); ++i) {
        outputs.emplace_back("--out", numbered_path(out, i, n));
        check_output_file(outputs.back().second, force, "--out");
    }
    check_distinct_outputs(outputs);
}

void prepare_output_dir(const std::string& dir, const std::string& flag) {
    if (dir.empty()) return;
    std::error_code ec;
    if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
        throw std::invalid_argument(flag + ": '" + dir + "' exists and is not a folder");
    fs::create_directories(dir, ec);
    if (ec)
        throw std::invalid_argument(flag + ": cannot create the folder '" + dir + "': " + ec.message());
    if (!writable_dir(dir)) throw std::invalid_argument(flag + ": cannot write in '" + dir + "'");
}

}  // namespace varscope::cli
