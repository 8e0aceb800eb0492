// Between open_runner() (runner.cpp, the one family switch) and the family files.
#pragma once

#include <memory>

#include "core/io/state_dict.h"
#include "core/runner/runner.h"

namespace varscope {

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
