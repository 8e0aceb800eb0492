// Copies that overlap the compute: one set of device tensors filled from host tensors on a side
// stream, ordered after everything the current stream has queued so far (so whatever read the
// destinations before is done), and waited for by the current stream only where the destinations
// are read. Kept in kernels/ so core/ needs no CUDA headers. Without CUDA, or for destinations on
// the CPU, start() copies at once and wait() does nothing: the same values either way.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

namespace varscope::kernels {

class AsyncCopy {
  public:
    AsyncCopy();
    // Makes the current stream wait for a copy still in flight, so that the destinations' memory
    // is not handed out again while the side stream writes it.
    ~AsyncCopy();
    AsyncCopy(const AsyncCopy&) = delete;
    AsyncCopy& operator=(const AsyncCopy&) = delete;

    // dst[k].copy_(src[k]) for every k (same sizes, dtypes; dst on one device). The sources must
    // stay alive and unchanged until wait() (pinned host memory makes the copy asynchronous).
    void start(const std::vector<at::Tensor>& dst, const std::vector<at::Tensor>& src);
    // The current stream's later work sees the copied values. No-op when nothing is in flight.
    void wait();

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace varscope::kernels
