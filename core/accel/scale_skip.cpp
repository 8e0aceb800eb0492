#include "core/accel/scale_skip.h"

namespace varscope {
namespace {

class ScaleSkip : public SamplingHooks {
  public:
    explicit ScaleSkip(int64_t last_n) : last_n_(last_n) {}
    int64_t scales_to_run(const VarConfig& c) override { return c.num_scales() - last_n_; }
    // Nothing inside the steps: the graphs only run fewer of them.
    std::optional<std::string> graph_signature(const VarConfig&) override {
        return "skip:" + std::to_string(last_n_);
    }

  private:
    int64_t last_n_;
};

}  // namespace

const MethodSpec& ScaleSkipConfig::spec() {
    static const MethodSpec s{
        "skip",
        "Scale skipping",
        "fastvar.txt §4 (100 % pruning ratio)",
        "Skip the last N scales and decode the accumulated features as they stand.",
        {counting(
            {"last_n", "Skipped scales", "N",
             "Number of final scales not run (0 = off). FastVAR's 100 % ratio on the last steps.",
             ParamKind::Int, 0, 12, 1},
            ParamCount::Scales, -1)}};
    return s;
}

ScaleSkipConfig ScaleSkipConfig::from_json(const nlohmann::json& j) {
    ParamReader r(j, spec());
    ScaleSkipConfig c;
    c.enabled = r.enabled();
    c.last_n = r.get_int("last_n");
    return c;
}

nlohmann::json ScaleSkipConfig::to_json() const {
    return {{"enabled", enabled}, {"last_n", last_n}};
}

std::shared_ptr<SamplingHooks> make_scale_skip(const ScaleSkipConfig& cfg, const VarConfig& model,
                                               ProbeSink*) {
    if (cfg.last_n >= model.num_scales())
        throw AccelConfigError("skip.last_n: must be below the model's " +
                               std::to_string(model.num_scales()) + " scales, got " +
                               std::to_string(cfg.last_n));
    return std::make_shared<ScaleSkip>(cfg.last_n);
}

}  // namespace varscope
