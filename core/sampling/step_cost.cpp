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

}  // namespace varscope
