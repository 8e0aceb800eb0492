#include "core/sampling/probes.h"

#include <algorithm>

namespace varscope {

bool ProbeRecorder::wants_attention(int64_t scale, int64_t layer) const {
    auto has = [](const std::vector<int64_t>& v, int64_t x) {
        return std::find(v.begin(), v.end(), x) != v.end();
    };
    return has(sel_.layers, layer) && (sel_.scales.empty() || has(sel_.scales, scale));
}

void ProbeRecorder::on_attention(AttentionRecord r) {
    std::lock_guard<std::mutex> lock(mu_);
    attention_.push_back(std::move(r));
}

void ProbeRecorder::on_scale(ScaleRecord r) {
    std::lock_guard<std::mutex> lock(mu_);
    scales_.push_back(std::move(r));
}

void ProbeRecorder::on_accel(AccelRecord r) {
    if (!sel_.accel) return;
    std::lock_guard<std::mutex> lock(mu_);
    accel_.push_back(std::move(r));
}

std::vector<AccelRecord> ProbeRecorder::accel() const {
    std::lock_guard<std::mutex> lock(mu_);
    return accel_;
}

std::vector<AccelRecord> ProbeRecorder::accel(const std::string& kind, int64_t scale) const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<AccelRecord> out;
    for (const auto& r : accel_)
        if (r.kind == kind && (scale < 0 || r.scale == scale)) out.push_back(r);
    return out;
}

std::vector<ScaleRecord> ProbeRecorder::scales() const {
    std::lock_guard<std::mutex> lock(mu_);
    return scales_;
}

std::vector<AttentionRecord> ProbeRecorder::attention() const {
    std::lock_guard<std::mutex> lock(mu_);
    return attention_;
}

}  // namespace varscope
