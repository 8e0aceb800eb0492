// One run that survives the runner's own cached CUDA graphs: each graph set holds a KV cache and
// its memory pools, and the graph cache keeps a few (other batch sizes, other accelerator
// configs). When a run needs a new set beside them and the device runs out of memory, the
// cached sets are released and the run is made once more. Seen on the H200 (session 30): an eval
// job of VAR-d16 at batch 64 ran out of memory at its last, smaller shard with 92.8 GiB in graph
// pools (bench/results/2026-11-29-h200/session30).
#pragma once

#include <exception>

#include "core/runner/batch_search.h"
#include "core/runner/runner.h"

namespace varscope {

// The rule on any run and release: run(); on out of memory (is_out_of_memory) and `graphs`,
// release(), then run() once more (its error then stands). Other errors pass through.
template <class Run, class Release>
auto run_releasing_on_oom(bool graphs, Run&& run, Release&& release, bool* retried = nullptr)
    -> decltype(run()) {
    if (retried) *retried = false;
    try {
        return run();
    } catch (const std::exception& e) {
        if (!graphs || !is_out_of_memory(e)) throw;
    }
    release();
    if (retried) *retried = true;
    return run();
}

// Gives the runner's cached graph sets (their KV caches and pools) and the caching allocator's
// unused blocks back to the device (CUDA; on the CPU only the graphs, which it has none of).
void release_graph_memory(Runner& runner);

// runner.generate(s, accel) under that rule: the release is release_graph_memory.
RunResult generate_releasing_graphs(Runner& runner, const SampleSettings& s,
                                    const AccelPlan* accel = nullptr, bool* retried = nullptr);

}  // namespace varscope
