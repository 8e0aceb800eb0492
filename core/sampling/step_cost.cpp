#include "core/sampling/step_cost.h"

#include "kernels/part_timer.h"

namespace varscope {

const char* cost_part_name(CostPart part) {
    switch (part) {
        case CostPart::Input:
            return "input";
        case CostPart::Projection:
            return "projection";
        case CostPart::Attention:
            return "attention";
        case CostPart::Ffn:
            return "ffn";
        case CostPart::Overhead:
            return "overhead";
        case CostPart::Head:
            return "head";
        case CostPart::CrossAttention:
            return "cross_attention";
    }
    return "?";
}

void CostRecorder::mark(CostPart part) const {
    if (timer) timer->mark(static_cast<int>(part));
}

void CostRecorder::end() const {
    if (timer) timer->mark(-1);
}

void read_part_times(std::vector<StepCost>& costs,
                     const std::map<size_t, std::unique_ptr<kernels::PartTimer>>& eager,
                     const std::function<const kernels::PartTimer*(int64_t scale)>& graph_timer) {
    for (size_t i = 0; i < costs.size(); ++i) {
        auto& sc = costs[i];
        const auto it = eager.find(i);
        const kernels::PartTimer* timer = it != eager.end() ? it->second.get()
                                          : graph_timer     ? graph_timer(sc.scale)
                                                            : nullptr;
        std::vector<double> ms(kCostParts, 0.0);
        if (timer && timer->accumulate(ms)) {
            for (int p = 0; p < kCostParts; ++p) sc.ms[size_t(p)] = ms[size_t(p)];
            sc.timed = true;
        }
    }
}

}  // namespace varscope
