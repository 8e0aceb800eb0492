// Between open_runner() (runner.cpp, the one family switch) and the family files.
#pragma once

#include <memory>

#include "core/accel/accel_config.h"
#include "core/io/state_dict.h"
#include "core/runner/runner.h"

namespace varscope {

// The accelerator config of a next-scale family (VAR, and Infinity, which runs the same hooks),
// tagged with the family it was parsed for.
class ScaleAccelPlan : public AccelPlan {
  public:
    ScaleAccelPlan(Family family, AccelConfig c) : family_(family), config(std::move(c)) {}
    Family family() const override { return family_; }
    bool enabled() const override { return config.any_enabled(); }
    std::string summary() const override { return config.summary(); }
    nlohmann::json to_json() const override { return config.to_json(); }

  private:
    Family family_;

  public:
    AccelConfig config;
};
// `plan`'s config (null = the baseline); std::invalid_argument when it was made for another
// family than `family`.
const AccelConfig& scale_accel_config(const AccelPlan* plan, Family family);
// A config from a JSON file, inline JSON or a preset ("" = the baseline) for `family`.
std::shared_ptr<const AccelPlan> scale_accel_plan(Family family, const std::string& arg);
// Runner::compare_steps of a next-scale family: per scale the share of identical token ids and
// the tokens not decoded (-1), with the scale's side when `patch_nums` names it.
std::vector<nlohmann::json> scale_compare_steps(const RunResult& base, const RunResult& accel,
                                                const std::vector<int64_t>& patch_nums = {});
// Runner::step_map of a next-scale family: the first image's token ids (-1 pruned).
std::vector<int64_t> first_image_tokens(const ScaleRecord& record);

// weights: the VAR transformer's tensors (wrapper prefix removed), read from spec.model_path.
std::unique_ptr<Runner> load_var_runner(StateDict weights, const ModelSpec& spec,
                                        const LoadOptions& options);
// all: every tensor of spec.model_path (MAR picks its EMA / raw weights itself).
std::unique_ptr<Runner> load_mar_runner(const StateDict& all, const ModelSpec& spec,
                                        const LoadOptions& options);

// all: the Infinity transformer's tensors (official names); spec.vae_path: its BSQ VAE.
std::unique_ptr<Runner> load_infinity_runner(const StateDict& all, const ModelSpec& spec,
                                             const LoadOptions& options);

std::shared_ptr<const AccelPlan> var_accel_plan(const std::string& arg);
// Infinity runs the VAR accelerators through the same hooks (core/sampling/infinity_sampler.h).
std::shared_ptr<const AccelPlan> infinity_accel_plan(const std::string& arg);
std::shared_ptr<const AccelPlan> mar_accel_plan(const std::string& arg);

}  // namespace varscope
