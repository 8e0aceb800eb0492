// A method's work ceiling against a dense run of the same schedule: what its steps would take if
// every part of its forward (projection, attention, FFN, head, input; step_cost.h) ran at the
// dense run's time per FLOP at the same scale (a part without FLOPs there, as the first scale's
// input: the dense part's time) and its own overhead (selection, gathers, scoring, index maps)
// took no time, with each step's time outside the forward (token sampling, the f_hat update) as
// the dense step's. Dense time / ceiling is the most any implementation of the
// method's arithmetic can gain over that dense run: a speed target above it is bounded by the
// method's FLOPs (and the scales it shares with the dense run), not by its kernels.
//
// A grouped step (LazyVAR's last scales in one pass) is priced at its last scale's rates, the
// dense run's most efficient, so the ceiling errs on the generous side.
#pragma once

#include <optional>
#include <vector>

#include "core/sampling/step_cost.h"

namespace varscope {

struct WorkCeiling {
    double ms = 0.0;        // the method's steps at the dense run's rates, no overhead
    double dense_ms = 0.0;  // the dense run's steps (device-synchronised step times)
    double speedup() const { return ms > 0.0 ? dense_ms / ms : 0.0; }
};

// `method` and `dense`: the steps of runs with part times (StepCost::timed), the dense one a step
// per scale; `dense_step_ms[s]`: the dense run's device-synchronised time of scale s (the same
// run). nullopt where a step is untimed, the dense run has not one step per scale, or a scale the
// method decodes is not among the dense run's.
std::optional<WorkCeiling> work_ceiling(const std::vector<StepCost>& method,
                                        const std::vector<StepCost>& dense,
                                        const std::vector<double>& dense_step_ms);

}  // namespace varscope
