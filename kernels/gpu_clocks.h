// The GPU's SM clock and power while a benchmark contestant runs back to back (varscope-cli bench
// attention --clocks). On the H100 the sparse kernels reach the card's power limit, so their
// clock falls while a slower contestant keeps the maximum one
// (bench/results/2026-11-26-h100/csla_s19.md). Then a ratio of times mixes the cycles each one
// needs with the clock each one gets, and these figures tell the two apart.
// NVML is loaded at run time (libnvidia-ml.so.1 comes with the driver), so nothing here needs
// CUDA or NVML headers and a machine without a driver gets a clear error instead of a link
// failure.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace varscope::kernels {

struct ClockSample {
    double t_s = 0;  // steady-clock seconds
    double sm_mhz = 0;
    double power_w = 0;  // the driver's reading
};

struct ClockSummary {
    double sm_mhz_median = 0, sm_mhz_min = 0, power_w_median = 0;
    int samples = 0;
};

// Medians over the samples with t_from <= t_s <= t_to; nullopt where there are none.
std::optional<ClockSummary> summarize_clock_samples(const std::vector<ClockSample>& samples,
                                                    double t_from, double t_to);

// Seconds on the clock that ClockSample::t_s uses.
double clock_seconds_now();

// Samples one GPU every period_s seconds on a thread of its own, between start() and stop().
class GpuClockSampler {
  public:
    // pci_bus_id as CUDA writes it ("0000:00:06.0"); empty: NVML's device `index`. Throws
    // std::runtime_error saying why when NVML or the device cannot be had.
    explicit GpuClockSampler(const std::string& pci_bus_id, int index = 0, double period_s = 0.005);
    ~GpuClockSampler();
    GpuClockSampler(const GpuClockSampler&) = delete;
    GpuClockSampler& operator=(const GpuClockSampler&) = delete;

    std::optional<ClockSample> read() const;
    std::optional<double> power_limit_w() const;
    void start();
    std::vector<ClockSample> stop();

  private:
    struct Nvml;
    std::unique_ptr<Nvml> nvml_;
    void* device_ = nullptr;
    double period_s_;
    std::atomic<bool> running_{false};
    std::thread thread_;
    std::vector<ClockSample> samples_;
};

}  // namespace varscope::kernels
