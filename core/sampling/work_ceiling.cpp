#include "core/sampling/work_ceiling.h"

#include <cstddef>

namespace varscope {

std::optional<WorkCeiling> work_ceiling(const std::vector<StepCost>& method,
                                        const std::vector<StepCost>& dense,
                                        const std::vector<double>& dense_step_ms) {
    const size_t scales = dense.size();
    if (scales == 0 || dense_step_ms.size() != scales || method.empty()) return std::nullopt;
    WorkCeiling c;
    std::vector<double> outside(scales);
    for (size_t s = 0; s < scales; ++s) {
        const StepCost& d = dense[s];
        if (!d.timed || d.scales != 1 || d.scale != static_cast<int64_t>(s)) return std::nullopt;
        double parts = 0.0;
        for (double v : d.ms) parts += v;
        outside[s] = dense_step_ms[s] - parts;
        c.dense_ms += dense_step_ms[s];
    }
    for (const StepCost& m : method) {
        const int64_t first = m.scale, last = m.scale + m.scales - 1;
        if (!m.timed || m.scales < 1 || first < 0 || last >= static_cast<int64_t>(scales))
            return std::nullopt;
        const StepCost& d = dense[static_cast<size_t>(last)];
        for (int p = 0; p < kCostParts; ++p) {
            if (static_cast<CostPart>(p) == CostPart::Overhead) continue;  // the method's own work
            if (d.flops[p] > 0.0)
                c.ms += m.flops[p] * (d.ms[p] / d.flops[p]);
            else  // a part the model counts no FLOPs for (the first scale's input): as dense
                c.ms += d.ms[p];
        }
        for (int64_t s = first; s <= last; ++s) c.ms += outside[static_cast<size_t>(s)];
    }
    return c;
}

}  // namespace varscope
