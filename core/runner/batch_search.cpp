#include "core/runner/batch_search.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <new>
#include <stdexcept>

#include "core/runner/oom_retry.h"
#include "core/runner/runner.h"
#include "core/sampling/var_sampler.h"  // synchronize_device
#include "kernels/memory_stats.h"

namespace varscope {

namespace {

// cudaErrorMemoryAllocation of the CUDA runtime (core does not include the CUDA headers; the
// value is fixed by the runtime's ABI).
constexpr int32_t kCudaErrorMemoryAllocation = 2;

std::string message_of(const std::exception& e) {
    if (const auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
    return e.what();
}

std::string first_line(const std::string& s) {
    return s.substr(0, s.find('\n'));
}

}  // namespace

bool is_out_of_memory(const std::exception& e) {
    if (dynamic_cast<const c10::OutOfMemoryError*>(&e) || dynamic_cast<const std::bad_alloc*>(&e))
        return true;
    if (const auto* a = dynamic_cast<const c10::AcceleratorError*>(&e))
        if (a->get_error_code() == kCudaErrorMemoryAllocation) return true;
    // Libraries' own allocations fail with their status in a plain c10::Error; so does LibTorch's
    // CPU allocator when the host refuses (an enforce failure, not an OutOfMemoryError).
    if (dynamic_cast<const c10::Error*>(&e)) {
        const std::string m = message_of(e);
        for (const char* status :
             {"CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED",
              "CUDA error: out of memory", "DefaultCPUAllocator: can't allocate memory",
              "DefaultCPUAllocator: not enough memory"})
            if (m.find(status) != std::string::npos) return true;
    }
    return false;
}

const char* batch_outcome_name(BatchOutcome o) {
    switch (o) {
        case BatchOutcome::Fits:
            return "fits";
        case BatchOutcome::OutOfMemory:
            return "out_of_memory";
        case BatchOutcome::Error:
            return "error";
    }
    return "error";
}

BatchTry try_batch_with(int64_t batch, const std::function<void()>& attempt) {
    BatchTry t;
    t.batch = batch;
    try {
        attempt();
    } catch (const std::exception& e) {
        t.outcome = is_out_of_memory(e) ? BatchOutcome::OutOfMemory : BatchOutcome::Error;
        t.error = first_line(message_of(e));
    }
    return t;
}

nlohmann::json BatchSearch::to_json() const {
    nlohmann::json tries_json = nlohmann::json::array();
    for (const auto& t : tries) {
        nlohmann::json j = {{"batch", t.batch}, {"outcome", batch_outcome_name(t.outcome)}};
        if (!t.error.empty()) j["error"] = t.error;
        j.update(t.details);
        tries_json.push_back(j);
    }
    nlohmann::json j = {{"cap", cap},
                        {"largest_batch", largest},
                        {"first_failed_batch",
                         first_failed ? nlohmann::json(*first_failed) : nlohmann::json(nullptr)},
                        {"fits_up_to_cap", fits_up_to_cap},
                        {"tries", tries_json}};
    if (error) j["error"] = {{"batch", error->batch}, {"message", error->error}};
    return j;
}

std::string BatchSearch::describe() const {
    std::string s = std::to_string(largest);
    if (fits_up_to_cap)
        s += " (fits up to the cap " + std::to_string(cap) + ": no limit found below it)";
    else if (first_failed)
        s += " (" + std::to_string(*first_failed) + " out of memory)";
    if (error) s += " (stopped: batch " + std::to_string(error->batch) + ": " + error->error + ")";
    return s;
}

BatchSearch search_largest_batch(const std::function<BatchTry(int64_t batch)>& try_batch,
                                 int64_t cap, int64_t start) {
    if (cap < 1)
        throw std::invalid_argument("batch search: the cap must be at least 1, got " +
                                    std::to_string(cap));
    BatchSearch s;
    s.cap = cap;
    // Runs one try; false when the search must stop (another error).
    auto run = [&](int64_t b) -> std::optional<bool> {
        BatchTry t = try_batch(b);
        t.batch = b;
        s.tries.push_back(t);
        switch (t.outcome) {
            case BatchOutcome::Fits:
                s.largest = std::max(s.largest, b);
                return true;
            case BatchOutcome::OutOfMemory:
                s.first_failed = s.first_failed ? std::min(*s.first_failed, b) : b;
                return false;
            case BatchOutcome::Error:
                s.error = t;
                return std::nullopt;
        }
        return std::nullopt;
    };
    // Grow: double until a try runs out of memory or the cap fits.
    for (int64_t b = std::clamp<int64_t>(start, 1, cap);;) {
        const auto fit = run(b);
        if (!fit) return s;
        if (!*fit) break;
        if (b == cap) {
            s.fits_up_to_cap = true;
            return s;
        }
        b = b > cap / 2 ? cap : 2 * b;
    }
    // Bisect between the largest batch that fit and the smallest that did not.
    while (*s.first_failed - s.largest > 1) {
        const int64_t mid = s.largest + (*s.first_failed - s.largest) / 2;
        if (!run(mid)) return s;
    }
    return s;
}

SampleSettings with_images(const SampleSettings& s, int64_t images) {
    SampleSettings out = s;
    out.batch = images;
    auto repeat = [images](auto& v) {
        const auto given = v;
        v.resize(static_cast<size_t>(images));
        for (size_t i = 0; i < v.size(); ++i) v[i] = given[i % given.size()];
    };
    if (!out.class_ids.empty()) repeat(out.class_ids);
    if (!out.prompts.empty()) repeat(out.prompts);
    if (!out.text_features.empty()) out.text_rows = images;  // the file's rows, repeated
    return out;
}

BatchTry try_runner_batch(Runner& runner, const SampleSettings& s, const AccelPlan* accel,
                          int64_t images) {
    const SampleSettings sb = with_images(s, images);
    const at::Device device = runner.device();
    const bool cuda = device.is_cuda();
    const int dev = cuda && device.index() >= 0 ? device.index() : 0;
    if (cuda) kernels::empty_cuda_cache();
    const int64_t before = cuda ? kernels::cuda_memory(dev).allocated : 0;
    if (cuda) kernels::reset_cuda_peak_memory(dev);
    BatchTry t = try_batch_with(images, [&] {
        runner.validate(sb);
        runner.generate(sb, accel);
        synchronize_device(device);
    });
    if (cuda) t.details["peak_device_bytes"] = kernels::cuda_memory(dev).peak_allocated - before;
    t.details["memory_estimate_bytes"] = runner.estimate_memory(sb, accel).bytes();
    release_graph_memory(runner);
    return t;
}

}  // namespace varscope
