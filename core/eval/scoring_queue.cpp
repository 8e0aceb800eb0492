#include "core/eval/scoring_queue.h"

#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <optional>
#include <utility>

namespace varscope {

struct ScoringQueue::Item {
    std::function<void()> task;
    std::optional<c10::Event> ready;  // CUDA: the producer's stream reached the push
};

namespace {

// The device with its index (a bare "cuda" means the current one).
c10::Device indexed(const c10::Device& d) {
    if (!d.is_cuda() || d.has_index()) return d;
    return c10::impl::VirtualGuardImpl(d.type()).getDevice();
}

}  // namespace

void wait_for_current_stream(const c10::Device& device) {
    if (!device.is_cuda()) return;
    const c10::Device d = indexed(device);
    c10::impl::VirtualGuardImpl(d.type()).getStream(d).synchronize();
}

ScoringQueue::ScoringQueue(bool overlap, const c10::Device& device, size_t capacity)
    : overlap_(overlap), device_(indexed(device)), capacity_(capacity < 1 ? 1 : capacity) {
    if (overlap_) worker_ = std::thread([this] { work(); });
}

ScoringQueue::~ScoringQueue() {
    if (!worker_.joinable()) return;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    changed_.notify_all();
    worker_.join();
}

void ScoringQueue::rethrow_locked() {
    if (error_) std::rethrow_exception(error_);
}

void ScoringQueue::push(std::function<void()> task) {
    if (!overlap_) {
        task();
        return;
    }
    auto item = std::make_unique<Item>();
    item->task = std::move(task);
    if (device_.is_cuda()) {
        const c10::impl::VirtualGuardImpl impl(device_.type());
        item->ready.emplace(device_.type());
        item->ready->record(impl.getStream(device_));
    }
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return error_ || queue_.size() < capacity_; });
    rethrow_locked();
    queue_.push_back(std::move(item));
    lock.unlock();
    changed_.notify_all();
}

void ScoringQueue::finish() {
    if (!overlap_) return;
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return error_ || (queue_.empty() && !busy_); });
    rethrow_locked();
}

void ScoringQueue::work() {
    std::optional<c10::Stream> stream;
    std::optional<c10::StreamGuard> on_stream;
    try {
        if (device_.is_cuda()) {
            stream = c10::impl::VirtualGuardImpl(device_.type()).getStreamFromGlobalPool(device_);
            on_stream.emplace(*stream);  // this thread's current stream and device
        }
    } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        error_ = std::current_exception();
    }
    for (;;) {
        std::unique_ptr<Item> item;
        {
            std::unique_lock<std::mutex> lock(mutex_);
            changed_.wait(lock, [&] { return stop_ || !queue_.empty(); });
            if (stop_) return;
            if (error_) {  // spent: drop what comes, the producer sees the error at its push
                queue_.clear();
                changed_.notify_all();
                continue;
            }
            item = std::move(queue_.front());
            queue_.pop_front();
            busy_ = true;
        }
        std::exception_ptr failed;
        try {
            if (item->ready) item->ready->block(*stream);
            item->task();
        } catch (...) {
            failed = std::current_exception();
        }
        try {  // the task's tensors are freed below: the stream must be done with them
            if (stream) stream->synchronize();
        } catch (...) {
            if (!failed) failed = std::current_exception();
        }
        item.reset();
        {
            std::lock_guard<std::mutex> lock(mutex_);
            busy_ = false;
            if (failed && !error_) error_ = failed;
        }
        changed_.notify_all();
    }
}

}  // namespace varscope
