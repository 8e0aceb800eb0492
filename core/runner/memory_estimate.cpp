#include "core/runner/memory_estimate.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "core/sampling/chunked_decode.h"
#include "kernels/memory_stats.h"

namespace varscope {

int64_t MemoryEstimate::max_images(int64_t available) const {
    if (per_image <= 0) return available >= fixed ? images : 0;
    const int64_t left = available - fixed;
    return left <= 0 ? 0 : left / per_image;
}

nlohmann::json MemoryEstimate::to_json() const {
    nlohmann::json j = {
        {"images", images}, {"per_image", per_image}, {"fixed", fixed}, {"bytes", bytes()}};
    if (per_image_most > per_image) {
        j["per_image_most"] = per_image_most;
        j["bytes_most"] = bytes_most();
    }
    if (reclaimable > 0) j["reclaimable"] = reclaimable;
    return j;
}

namespace {

// MemAvailable of /proc/meminfo in bytes, -1 when absent (not Linux).
int64_t host_available() {
    std::ifstream f("/proc/meminfo");
    std::string key;
    int64_t kib = 0;
    std::string unit;
    while (f >> key >> kib >> unit)
        if (key == "MemAvailable:") return kib * 1024;
    return -1;
}

}  // namespace

int64_t available_memory(const c10::Device& device) {
    if (device.is_cpu()) return host_available();
    if (device.is_cuda()) {
        const int index = device.index() < 0 ? 0 : device.index();
        const auto free = kernels::cuda_free_memory(index);
        if (free < 0) return -1;
        const auto m = kernels::cuda_memory(index);
        return free + (m.reserved - m.allocated);
    }
    return -1;
}

std::string format_bytes(int64_t bytes) {
    const double b = static_cast<double>(bytes);
    char buf[32];
    if (b >= 1024.0 * 1024 * 1024)
        std::snprintf(buf, sizeof buf, "%.1f GiB", b / (1024.0 * 1024 * 1024));
    else if (b >= 1024.0 * 1024)
        std::snprintf(buf, sizeof buf, "%.0f MiB", b / (1024.0 * 1024));
    else
        std::snprintf(buf, sizeof buf, "%.0f KiB", b / 1024.0);
    return buf;
}

int64_t kv_cache_bytes(int64_t layers, int64_t rows, int64_t keys, int64_t width, int64_t eb) {
    return layers * 2 * rows * keys * width * eb;
}

int64_t step_activation_bytes(int64_t rows, int64_t tokens, int64_t width, int64_t hidden,
                              int64_t eb) {
    return rows * tokens * (8 * width + 2 * hidden) * eb;
}

int64_t fp32_stream_bytes(int64_t rows, int64_t tokens, int64_t width, int64_t copies) {
    return rows * tokens * width * copies * 4;
}

int64_t eager_score_bytes(int64_t rows, int64_t heads, int64_t queries, int64_t keys) {
    return rows * heads * queries * keys * 4 * 2;
}

int64_t logit_bytes(int64_t rows, int64_t tokens, int64_t vocab) {
    return rows * tokens * vocab * 4 * 3;
}

int64_t decode_bytes(int64_t channels, int64_t side, int64_t images) {
    return channels * side * side * 4 * 6 * std::min(images, decode_chunk_images(side));
}

void check_memory_fits(const MemoryEstimate& estimate, int64_t available,
                       const std::string& device_name) {
    if (available < 0) return;
    const auto usable = static_cast<int64_t>(static_cast<double>(available) * kMemoryHeadroom) +
                        estimate.reclaimable;
    if (estimate.bytes() <= usable) return;
    std::ostringstream msg;
    msg << estimate.images << (estimate.images == 1 ? " image needs" : " images need") << " about "
        << format_bytes(estimate.bytes()) << " of " << device_name << " memory ("
        << format_bytes(estimate.per_image) << " per image";
    if (estimate.fixed > 0) msg << " + " << format_bytes(estimate.fixed);
    msg << "); " << format_bytes(available) << " is free";
    if (estimate.reclaimable > 0)
        msg << " (+ " << format_bytes(estimate.reclaimable) << " by streaming every block)";
    const int64_t fit = estimate.max_images(usable);
    if (fit > 0)
        msg << ": a batch of at most " << fit << " fits";
    else
        msg << ": not even one image fits (a smaller schedule or precision, or another device)";
    throw std::invalid_argument(msg.str());
}

}  // namespace varscope
