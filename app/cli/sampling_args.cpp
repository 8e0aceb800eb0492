#include "app/cli/sampling_args.h"

#include <iostream>

#include "app/cli/option_checks.h"
#include "app/cli/seed_option.h"
#include "core/data/emoji_classes.h"
#include "core/io/state_dict.h"  // CheckpointError
#include "core/models/sampling_recommendation.h"
#include "core/resources.h"
#include "core/text/class_matcher.h"

namespace varscope::cli {

void SamplingArgs::add_to(CLI::App& cmd) {
    cmd.add_option("--class", classes, "class id(s); one per image, or one for the whole batch (-1 = unconditional); none = random")->delimiter(',');
    cmd.add_option("-p,--prompt", prompt, "words naming the class, e.g. \"red heart\" (best match is used; ranked list printed)")->check(not_blank("words naming a class"));
    cmd.add_option("--batch", batch, "images to generate when one or no class is given")->check(CLI::Range(1, 4096));
    cmd.add_option("--seed", seed, "random seed (same seed, same device: same image)")->check(seed_validator())->capture_default_str();
    cmd.add_flag("--random-seed", random_seed, "do not seed the sampler");
    cfg_option_ = cmd.add_option("--cfg", cfg, "classifier-free guidance scale (ramped over scales)")->check(CLI::Range(0.0, 100.0))->capture_default_str();
    top_k_option_ = cmd.add_option("--top-k", top_k, "top-k filter, 0 = off")->check(whole_number_at_least(0))->capture_default_str();
    top_p_option_ = cmd.add_option("--top-p", top_p, "top-p (nucleus) filter, 0 = off")->check(CLI::Range(0.0, 1.0))->capture_default_str();
    cmd.add_flag("--more-smooth", more_smooth, "Gumbel-softmax smoothing (visualisation only)");
    cmd.add_flag("--no-cuda-graphs", no_cuda_graphs, "run the dense loop eagerly on CUDA (no graph replay; for debugging and timing)");
    cmd.add_option("--attention", attention, "attention backend")->check(CLI::IsMember({"sdpa", "eager"}))->capture_default_str();
}

VarSampleOptions SamplingArgs::resolve(const VarPipeline& pipe, const ModelOptions& model) const {
    VarSampleOptions opt;
    // Several classes set the batch themselves: a different --batch was ignored without a word.
    if (classes.size() > 1 && batch != 1 && batch != int64_t(classes.size()))
        throw std::invalid_argument("--batch " + std::to_string(batch) + " does not match the " +
                                    std::to_string(classes.size()) +
                                    " classes given (one image per class; --batch goes with "
                                    "one class or none)");
    opt.class_ids = classes;
    if (classes.size() == 1 && batch > 1) opt.class_ids.assign(batch, classes[0]);
    opt.batch = batch;
    opt.seed = random_seed ? std::nullopt : std::optional<uint64_t>(seed);
    opt.cfg = cfg;
    opt.top_k = top_k;
    opt.top_p = top_p;
    opt.more_smooth = more_smooth;
    opt.attention = attention == "eager" ? AttentionBackend::Eager : AttentionBackend::Sdpa;
    opt.cuda_graphs = !no_cuda_graphs;
    apply_recommendation(model.effective_var_path(), opt);
    if (random_seed && seed != 0)  // the flag wins: say so rather than drop --seed silently
        std::cerr << "note: --random-seed ignores --seed " << seed << "\n";
    if (!prompt.empty()) {
        if (!classes.empty()) throw std::invalid_argument("pass either --prompt or --class, not both");
        opt.class_ids.assign(batch, class_for_prompt(prompt, model.effective_var_path(),
                                                     pipe.var_config().num_classes));
    }
    opt.validate(pipe.var_config());
    return opt;
}

void SamplingArgs::apply_recommendation(const std::string& var_path, VarSampleOptions& opt) const {
    if (var_path.empty()) return;  // random weights
    SamplingRecommendation rec;
    try {
        rec = read_sampling_recommendation(var_path);
    } catch (const CheckpointError& e) {  // the weights are fine: run without it
        std::cerr << "warning: " << e.what() << "; its sampling recommendation is ignored\n";
    }
    SamplingRecommendation used;
    auto unset = [](const CLI::Option* o) { return o == nullptr || o->count() == 0; };
    if (rec.cfg && unset(cfg_option_)) used.cfg = opt.cfg = *rec.cfg;
    if (rec.top_k && unset(top_k_option_)) used.top_k = opt.top_k = *rec.top_k;
    if (rec.top_p && unset(top_p_option_)) used.top_p = opt.top_p = *rec.top_p;
    if (!used.empty())
        std::cerr << "using the model's recommended " << used.describe()
                  << " (pass --cfg / --top-k / --top-p to override)\n";
}

AccelConfig parse_accel_argument(const std::string& arg) {
    if (arg.empty()) return {};
    try {
        return AccelConfig::from_argument(arg);
    } catch (const AccelConfigError& e) {
        throw std::invalid_argument(std::string("--accel: ") + e.what());
    }
}

std::string preset_names() {
    std::string s;
    for (const auto& [name, _] : accel_presets()) s += (s.empty() ? "" : ", ") + name;
    return s;
}

}  // namespace varscope::cli
