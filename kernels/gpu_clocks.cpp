#include "kernels/gpu_clocks.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

namespace varscope::kernels {

namespace {
double median_of(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
}  // namespace

double clock_seconds_now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

std::optional<ClockSummary> summarize_clock_samples(const std::vector<ClockSample>& samples,
                                                    double t_from, double t_to) {
    std::vector<double> mhz, watts;
    for (const auto& s : samples)
        if (s.t_s >= t_from && s.t_s <= t_to) {
            mhz.push_back(s.sm_mhz);
            watts.push_back(s.power_w);
        }
    if (mhz.empty()) return std::nullopt;
    ClockSummary out;
    out.sm_mhz_min = *std::min_element(mhz.begin(), mhz.end());
    out.sm_mhz_median = median_of(mhz);
    out.power_w_median = median_of(watts);
    out.samples = static_cast<int>(mhz.size());
    return out;
}

// The few NVML entry points used, with their C signatures (nvml.h: every call returns an int
// status, 0 = success; a device is an opaque pointer; NVML_CLOCK_SM = 1).
struct GpuClockSampler::Nvml {
    void* lib = nullptr;
    int (*init)() = nullptr;
    int (*shutdown)() = nullptr;
    int (*by_bus_id)(const char*, void**) = nullptr;
    int (*by_index)(unsigned, void**) = nullptr;
    int (*clock_info)(void*, int, unsigned*) = nullptr;
    int (*power_usage)(void*, unsigned*) = nullptr;
    int (*power_limit)(void*, unsigned*) = nullptr;
};

namespace {
template <class F>
void bind(void* lib, const char* name, F& fn) {
    fn = reinterpret_cast<F>(dlsym(lib, name));
    if (fn == nullptr)
        throw std::runtime_error(std::string("NVML (libnvidia-ml.so.1) has no ") + name);
}
}  // namespace

GpuClockSampler::GpuClockSampler(const std::string& pci_bus_id, int index, double period_s)
    : period_s_(period_s) {
    auto nvml = std::make_unique<Nvml>();
    nvml->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (nvml->lib == nullptr)
        throw std::runtime_error(
            "cannot read the GPU's clock: NVML (libnvidia-ml.so.1, part of the NVIDIA driver) "
            "is not installed here");
    try {
        bind(nvml->lib, "nvmlInit_v2", nvml->init);
        bind(nvml->lib, "nvmlShutdown", nvml->shutdown);
        bind(nvml->lib, "nvmlDeviceGetHandleByPciBusId_v2", nvml->by_bus_id);
        bind(nvml->lib, "nvmlDeviceGetHandleByIndex_v2", nvml->by_index);
        bind(nvml->lib, "nvmlDeviceGetClockInfo", nvml->clock_info);
        bind(nvml->lib, "nvmlDeviceGetPowerUsage", nvml->power_usage);
        bind(nvml->lib, "nvmlDeviceGetEnforcedPowerLimit", nvml->power_limit);
        if (const int err = nvml->init(); err != 0)
            throw std::runtime_error("NVML did not start (nvmlInit_v2 returned " +
                                     std::to_string(err) + "): is the NVIDIA driver loaded?");
        int err = 1;
        if (!pci_bus_id.empty()) err = nvml->by_bus_id(pci_bus_id.c_str(), &device_);
        if (err != 0) err = nvml->by_index(static_cast<unsigned>(index), &device_);
        if (err != 0) {
            nvml->shutdown();
            throw std::runtime_error("NVML finds no GPU " +
                                     (pci_bus_id.empty() ? std::to_string(index) : pci_bus_id) +
                                     " (error " + std::to_string(err) + ")");
        }
    } catch (...) {
        dlclose(nvml->lib);
        throw;
    }
    nvml_ = std::move(nvml);
}

GpuClockSampler::~GpuClockSampler() {
    stop();
    nvml_->shutdown();
    dlclose(nvml_->lib);
}

std::optional<ClockSample> GpuClockSampler::read() const {
    unsigned mhz = 0, mw = 0;
    if (nvml_->clock_info(device_, 1, &mhz) != 0 || nvml_->power_usage(device_, &mw) != 0)
        return std::nullopt;
    return ClockSample{clock_seconds_now(), static_cast<double>(mhz), mw / 1000.0};
}

std::optional<double> GpuClockSampler::power_limit_w() const {
    unsigned mw = 0;
    if (nvml_->power_limit(device_, &mw) != 0) return std::nullopt;
    return mw / 1000.0;
}

void GpuClockSampler::start() {
    if (running_) return;
    samples_.clear();
    running_ = true;
    thread_ = std::thread([this] {
        while (running_) {
            if (const auto s = read()) samples_.push_back(*s);
            std::this_thread::sleep_for(std::chrono::duration<double>(period_s_));
        }
    });
}

std::vector<ClockSample> GpuClockSampler::stop() {
    running_ = false;
    if (thread_.joinable()) thread_.join();
    return samples_;
}

}  // namespace varscope::kernels
