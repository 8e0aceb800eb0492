// The largest batch that fits a device, found by trying (issue #30: a method's memory saving shown
// as throughput). The memory estimate (memory_estimate.h) is an upper bound from shapes; this
// measures: the caller's try_batch runs the real work at a batch and says whether it fit.
//
// The search doubles from a start batch until a try runs out of memory or the cap fits, then
// bisects between the largest batch that fit and the smallest that did not: about 2·log2(limit)
// tries. It assumes that a batch which fits means every smaller batch fits (true up to the
// allocator's fragmentation). Each try must leave the process as it found it (the caller frees
// graphs, KV caches and the allocator's cache after every try, fitting or not).
//
// is_out_of_memory is the one test of "this failed for want of memory" that the front ends share
// (the CLI's exit 3 message, the bench's per-method errors, this search).
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace varscope {

// Whether `e` says the device (or the host, on CPU) had no memory for an allocation: LibTorch's
// OutOfMemoryError (the caching allocator, the CPU allocator), a CUDA runtime call that returned
// cudaErrorMemoryAllocation (e.g. a graph instantiation), a cuBLAS / cuDNN workspace that could
// not be allocated, LibTorch's CPU allocator refused by the host, or std::bad_alloc. Anything
// else is another error.
bool is_out_of_memory(const std::exception& e);

enum class BatchOutcome { Fits, OutOfMemory, Error };
const char* batch_outcome_name(BatchOutcome o);  // "fits", "out_of_memory", "error"

struct BatchTry {
    int64_t batch = 0;
    BatchOutcome outcome = BatchOutcome::Fits;
    std::string error;  // the exception's first line (out of memory or another error)
    // What the caller measured of the try (peak memory, the estimate), merged into to_json().
    nlohmann::json details = nlohmann::json::object();
};

// Runs `attempt` and says how it ended: Fits when it returned, OutOfMemory or Error (with the
// message's first line) when it threw a std::exception (is_out_of_memory decides which).
BatchTry try_batch_with(int64_t batch, const std::function<void()>& attempt);

struct BatchSearch {
    int64_t cap = 0;
    int64_t largest = 0;                  // the largest batch that fit (0: not even the first)
    std::optional<int64_t> first_failed;  // the smallest batch that ran out of memory
    // The cap itself fit: the limit lies above the cap and is not known (not a limit).
    bool fits_up_to_cap = false;
    std::optional<BatchTry> error;  // a try failed otherwise: the search stopped there
    std::vector<BatchTry> tries;    // in the order they ran
    nlohmann::json to_json() const;
    // One line for a reader: "64 (96 out of memory)", "4 (fits up to the cap)", ...
    std::string describe() const;
};

// The largest batch in [1, cap] for which `try_batch` fits, starting at `start` (clamped to
// [1, cap]). A try that ends in Error stops the search (BatchSearch::error; what fit before it
// stands). std::invalid_argument for cap < 1.
BatchSearch search_largest_batch(const std::function<BatchTry(int64_t batch)>& try_batch,
                                 int64_t cap, int64_t start = 1);

// A search's tries on a Runner (the bench's --max-batch, the GPU test).
struct SampleSettings;
class Runner;
class AccelPlan;

// `s` for `images` images: the classes (VAR, MAR), prompts or text features' rows (Infinity)
// given repeat in order.
SampleSettings with_images(const SampleSettings& s, int64_t images);

// One try: a run of `s` at `images` images with `accel` (null = baseline), the graphs it captures
// included; details: "memory_estimate_bytes" and, on CUDA, the try's "peak_device_bytes" above
// what was allocated before it. Afterwards, fitting or not, the runner's graph sets and hooks
// (with their KV caches) are released and the CUDA caching allocator's cache is emptied, so the
// next try starts from the same state.
BatchTry try_runner_batch(Runner& runner, const SampleSettings& s, const AccelPlan* accel,
                          int64_t images);

}  // namespace varscope
