// Device timestamps between the parts of a piece of GPU work (the sampling loop's cost model:
// `varscope-cli bench e2e`). mark(label) records a CUDA event on the current stream and says
// that the time from it to the next mark belongs to `label`. Inside a CUDA graph capture the
// event becomes a node of the graph (cudaEventRecordExternal), so every replay records it
// again and the same timer reads the replay's times. No profiler is needed; the event nodes
// cost a little device time, so timed runs are kept apart from the clean ones.
// On the host (device kHost: work on the CPU, which returns only when done) a mark reads the
// steady clock instead: exact there, and cheap enough to leave on. A CUDA device without the
// CUDA kernels built records nothing.
#pragma once

#include <memory>
#include <vector>

namespace varscope::kernels {

class PartTimer {
  public:
    static constexpr int kHost = -1;  // the CPU: host clock timestamps
    explicit PartTimer(int device);
    ~PartTimer();
    PartTimer(const PartTimer&) = delete;
    PartTimer& operator=(const PartTimer&) = delete;

    // Starts the part `label` (>= 0) at this point of the current stream; a label < 0 ends the
    // previous part without starting one. A mark with the label already running is dropped.
    void mark(int label);
    size_t marks() const;
    // Once the marked work has finished on the device: the milliseconds between consecutive
    // marks added to out[label of the earlier mark] (out grows as needed). false when an
    // elapsed time could not be read (then out is unchanged).
    bool accumulate(std::vector<double>& out) const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace varscope::kernels
