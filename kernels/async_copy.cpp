#include "kernels/async_copy.h"

#include <c10/util/Exception.h>

#ifdef VARSCOPE_KERNELS_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <optional>
#endif

namespace varscope::kernels {

#ifdef VARSCOPE_KERNELS_CUDA
struct AsyncCopy::Impl {
    std::optional<at::cuda::CUDAEvent> done;  // recorded on the side stream after the copies
    c10::DeviceIndex device = -1;
};
#else
struct AsyncCopy::Impl {};
#endif

AsyncCopy::AsyncCopy() : impl_(std::make_unique<Impl>()) {}

AsyncCopy::~AsyncCopy() {
    try {
        wait();
    } catch (...) {  // a destructor must not throw; a broken device fails the next call anyway
    }
}

void AsyncCopy::start(const std::vector<at::Tensor>& dst, const std::vector<at::Tensor>& src) {
    TORCH_CHECK(dst.size() == src.size(), "async copy: ", dst.size(), " destinations for ",
                src.size(), " sources");
    wait();  // a copy still in flight into the same tensors comes first
    const bool on_cuda = !dst.empty() && dst.front().is_cuda();
#ifdef VARSCOPE_KERNELS_CUDA
    if (on_cuda) {
        const auto dev = dst.front().device().index();
        const c10::cuda::CUDAGuard guard(dev);
        const auto current = c10::cuda::getCurrentCUDAStream(dev);
        // A side stream from the pool, one per thread and device.
        static thread_local std::optional<c10::cuda::CUDAStream> side;
        if (!side || side->device_index() != dev) side = c10::cuda::getStreamFromPool(false, dev);
        at::cuda::CUDAEvent ready;
        ready.record(current);
        ready.block(*side);
        {
            const c10::cuda::CUDAStreamGuard stream_guard(*side);
            for (size_t k = 0; k < dst.size(); ++k) {
                auto d = dst[k];  // a handle: copy_ writes the shared storage
                d.copy_(src[k], /*non_blocking=*/true);
            }
        }
        impl_->done.emplace();
        impl_->done->record(*side);
        impl_->device = dev;
        return;
    }
#endif
    TORCH_CHECK(!on_cuda, "async copy: this build has no CUDA kernels");
    for (size_t k = 0; k < dst.size(); ++k) {
        auto d = dst[k];
        d.copy_(src[k]);
    }
}

void AsyncCopy::wait() {
#ifdef VARSCOPE_KERNELS_CUDA
    if (!impl_->done) return;
    impl_->done->block(c10::cuda::getCurrentCUDAStream(impl_->device));
    impl_->done.reset();
#endif
}

}  // namespace varscope::kernels
