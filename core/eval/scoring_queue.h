// The eval job's scoring worker (issue #34): the images of one generate call are scored (PSNR,
// SSIM, token agreement, FID Inception and emoji features) while the next call generates. One
// worker thread runs the tasks in the order they were pushed, so what they accumulate is the
// same as when scored inline. On a CUDA device the worker has a stream of its own from the pool;
// each task first waits (on the device, not the host) for the work the producer's stream had
// queued when the task was pushed, and the worker waits for its stream after each task before
// the task's tensors are freed (the caching allocator would hand their memory back to the
// producer's stream while the worker's kernels still read it). A bounded queue (`capacity`
// tasks) makes the producer wait rather than pile up device memory.
//
// Inline mode (overlap off) runs each task inside push(): the serial job, no thread.
#pragma once

#include <c10/core/Device.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace varscope {

class ScoringQueue {
  public:
    // `device`: where the tasks' tensors are (a CUDA device: the worker's stream is on it).
    ScoringQueue(bool overlap, const c10::Device& device, size_t capacity = 2);
    // Stops the worker; tasks not yet started are dropped (the job failed elsewhere).
    ~ScoringQueue();
    ScoringQueue(const ScoringQueue&) = delete;
    ScoringQueue& operator=(const ScoringQueue&) = delete;

    // Runs `task` (inline) or queues it, waiting while the queue is full. Rethrows the first
    // error of an earlier task, so the producer stops instead of generating for nothing.
    void push(std::function<void()> task);
    // Waits until every task ran; rethrows the first error of any (then the queue is spent).
    void finish();

    bool overlapped() const { return overlap_; }

  private:
    struct Item;
    void work();
    void rethrow_locked();

    bool overlap_;
    c10::Device device_;
    size_t capacity_;
    std::mutex mutex_;
    std::condition_variable changed_;
    std::deque<std::unique_ptr<Item>> queue_;
    bool busy_ = false;  // the worker runs a task
    bool stop_ = false;
    std::exception_ptr error_;
    std::thread worker_;
};

// Blocks the host until the work queued so far on this thread's current stream of `device` is
// done (CUDA; a no-op on the CPU). Unlike a device synchronisation it does not wait for other
// streams (the scoring worker's).
void wait_for_current_stream(const c10::Device& device);

}  // namespace varscope
