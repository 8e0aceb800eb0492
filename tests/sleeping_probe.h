// A probe whose every per-scale (MAR: per-step) record takes a known time, and the checks that
// the samplers keep that time out of their scale or step times (the GUI decodes a preview there).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "core/sampling/probes.h"

namespace varscope::testing {

struct SleepingProbe : ProbeSink {
    static constexpr int kMillis = 30;
    void on_scale(ScaleRecord) override {
        std::this_thread::sleep_for(std::chrono::milliseconds(kMillis));
    }
};

// probe_ms holds every sleep, and the intervals of one run are disjoint: a sleep counted in a
// step's time as well would make steps + decode + probe exceed the total.
inline void expect_probe_time_apart(double probe_ms, double total_ms, double decode_ms,
                                    const std::vector<double>& step_ms) {
    EXPECT_GE(probe_ms, SleepingProbe::kMillis * static_cast<double>(step_ms.size()));
    double sum = 0;
    for (double ms : step_ms) sum += ms;
    EXPECT_GE(total_ms + 1e-6, sum + decode_ms + probe_ms);
}

}  // namespace varscope::testing
