#include "core/runner/oom_retry.h"

#include "kernels/memory_stats.h"

namespace varscope {

RunResult generate_releasing_graphs(Runner& runner, const SampleSettings& s, const AccelPlan* accel,
                                    bool* retried) {
    return run_releasing_on_oom(
        s.cuda_graphs && runner.device().is_cuda(), [&] { return runner.generate(s, accel); },
        [&] {
            runner.release_graphs();
            kernels::empty_cuda_cache();
        },
        retried);
}

}  // namespace varscope
