// What the next-scale families (VAR, and Infinity, which runs the same hooks) share in their
// runners: the accelerator plan and the per-scale comparison of token maps.
#include <ATen/ATen.h>

#include "core/metrics/image_metrics.h"
#include "core/runner/runner_internal.h"

namespace varscope {

const AccelConfig& scale_accel_config(const AccelPlan* plan, Family family) {
    static const AccelConfig baseline;
    if (!plan) return baseline;
    if (plan->family() != family)
        throw std::invalid_argument(std::string("a ") + family_title(plan->family()) +
                                    " accelerator config cannot run on " +
                                    (family == Family::Infinity ? "an " : "a ") +
                                    family_title(family) + " model");
    return static_cast<const ScaleAccelPlan*>(plan)->config;
}

std::shared_ptr<const AccelPlan> scale_accel_plan(Family family, const std::string& arg) {
    return std::make_shared<ScaleAccelPlan>(
        family, arg.empty() ? AccelConfig{} : AccelConfig::from_argument(arg));
}

std::vector<nlohmann::json> scale_compare_steps(const RunResult& base, const RunResult& accel,
                                                const std::vector<int64_t>& patch_nums) {
    std::vector<nlohmann::json> steps;
    const auto agreement = token_agreement(base.step_tokens, accel.step_tokens);
    for (size_t si = 0; si < agreement.size(); ++si) {
        nlohmann::json step;
        if (si < patch_nums.size()) step["patch_num"] = patch_nums[si];
        step["identical_tokens"] = agreement[si].fraction();
        step["undecoded_tokens"] = agreement[si].undecoded;
        steps.push_back(std::move(step));
    }
    return steps;
}

std::vector<int64_t> first_image_tokens(const ScaleRecord& record) {
    if (!record.tokens.defined()) return {};
    const auto t = record.tokens[0].to(at::kCPU, at::kLong).contiguous();
    return {t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel()};
}

}  // namespace varscope
