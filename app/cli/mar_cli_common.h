// Options shared by the MAR subcommands that compare or benchmark accelerators (compare-mar,
// bench mar): the model (checkpoint or random weights of a preset/JSON config) and sampling.
#pragma once

#include <CLI/CLI.hpp>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/mar_pipeline.h"

namespace varscope::cli {

// "mar_base" | "mar_large" | "mar_huge" | inline JSON | a JSON file.
inline MarConfig mar_config_argument(const std::string& spec) {
    if (spec.empty()) throw std::invalid_argument("--random needs a preset or a JSON config");
    if (spec.front() == '{') return MarConfig::from_json(nlohmann::json::parse(spec));
    std::ifstream f(spec);
    if (f) return MarConfig::from_json(nlohmann::json::parse(f));
    return MarConfig::named(spec);
}

struct MarRunArgs {
    std::string mar_path, random_config;
    uint64_t init_seed = 0;
    std::string device = "cpu", precision = "fp32";
    std::vector<int64_t> classes;
    int64_t batch = 1;
    uint64_t seed = 0;
    int64_t num_iter = 64;
    double cfg = 1.0, temperature = 1.0;
    std::string cfg_schedule = "linear", sampling_steps = "100";

    void add_to(CLI::App& cmd) {
        cmd.add_option("--mar", mar_path, "MAR checkpoint (checkpoint-last.pth, a state dict or .safetensors)")->check(CLI::ExistingFile);
        cmd.add_option("--random", random_config, "random weights: mar_base | mar_large | mar_huge | JSON config (file or inline)");
        cmd.add_option("--init-seed", init_seed, "seed of the random weights");
        cmd.add_option("--device", device, "cpu, cuda or cuda:N")->capture_default_str();
        cmd.add_option("--precision", precision, "transformer precision")->check(CLI::IsMember({"fp32", "fp16", "bf16"}))->capture_default_str();
        cmd.add_option("--class", classes, "class id(s); one per image, or one for the whole batch")->delimiter(',');
        cmd.add_option("--batch", batch, "images when one or no class is given")->check(CLI::Range(1, 4096));
        cmd.add_option("--seed", seed, "random seed")->capture_default_str();
        cmd.add_option("--num-iter", num_iter, "decoding steps")->check(CLI::Range(1, 4096))->capture_default_str();
        cmd.add_option("--cfg", cfg, "classifier-free guidance (1 = off)")->check(CLI::Range(0.0, 100.0))->capture_default_str();
        cmd.add_option("--cfg-schedule", cfg_schedule, "guidance schedule")->check(CLI::IsMember({"linear", "constant"}))->capture_default_str();
        cmd.add_option("--num-sampling-steps", sampling_steps, "diffusion respacing")->capture_default_str();
        cmd.add_option("--temperature", temperature, "diffusion sampling temperature")->capture_default_str();
    }

    MarPipeline build() const {
        LoadOptions lo{device, parse_precision(precision)};
        if (!random_config.empty()) {
            if (!mar_path.empty()) throw std::invalid_argument("--random cannot be combined with --mar");
            MarConfig c = mar_config_argument(random_config);
            c.num_sampling_steps = sampling_steps;
            return MarPipeline::random(c, init_seed, lo);
        }
        if (mar_path.empty()) throw std::invalid_argument("no model: pass --mar CHECKPOINT or --random PRESET");
        return MarPipeline::load({mar_path, "", true, sampling_steps}, lo);
    }

    MarSampleOptions options(const MarConfig& c) const {
        MarSampleOptions o;
        if (classes.size() == 1 && batch > 1)
            o.class_ids.assign(batch, classes[0]);
        else
            o.class_ids = classes;
        o.batch = batch;
        o.seed = seed;
        o.num_iter = num_iter;
        o.cfg = cfg;
        o.cfg_schedule = parse_cfg_schedule(cfg_schedule);
        o.temperature = temperature;
        o.validate(c);
        return o;
    }
};

}  // namespace varscope::cli
