#include "core/runner/oom_retry.h"

#include "kernels/memory_stats.h"

namespace varscope {

void release_graph_memory(Runner& runner) {
    runner.release_graphs();
    if (runner.device().is_cuda()) kernels::empty_cuda_cache();
}

RunResult generate_releasing_graphs(Runner& runner, const SampleSettings& s, const AccelPlan* accel,
                                    bool* retried) {
    return run_releasing_on_oom(
        s.cuda_graphs && runner.device().is_cuda(), [&] { return runner.generate(s, accel); },
        [&] { release_graph_memory(runner); }, retried);
}

}  // namespace varscope
