// `bench e2e --trace DIR`: one extra run per method under the PyTorch (Kineto) profiler, saved as
// a Chrome trace (chrome://tracing, Perfetto). The cost model says which part of a step is slow;
// the trace says why: host work the device waits for (a sync followed by slow dispatch), kernel
// choice, gaps between launches. A front-end diagnostic, so it lives in app/, not in core.
#pragma once

#include <functional>
#include <string>

namespace varscope::cli {

// Runs `fn` with the profiler recording host operators and (with `cuda`) device kernels and
// runtime calls, then writes the trace to `path` (the caller checks the path before the run, as
// bench e2e does with check_output_file). Throws std::runtime_error when the profiler cannot
// start (e.g. another one is active) or nothing was written; what `fn` throws passes through
// after the profiler is stopped.
void run_traced(const std::string& path, bool cuda, const std::function<void()>& fn);

// A method name as a file name: letters, digits, '-', '_', '.', '+' and '@' kept, the rest '_'.
std::string trace_file_name(int index, const std::string& method);

}  // namespace varscope::cli
