// A compact per-scale (MAR: per-step) summary of one run: what the plots and the per-scale table
// draw, without the images, tokens and records behind it. Live runs are summarised on the fly;
// the run history (#37) stores the summary of each side of a finished run as JSON, so that its
// entries fill the plots again after a restart.
#pragma once

#include <QString>
#include <array>
#include <nlohmann/json.hpp>
#include <vector>

#include "ui/engine/engine.h"

namespace varscope::gui {

struct ScaleSummary {
    int64_t scale = 0;
    int64_t patch_num = 0;
    double millis = 0;
    double attention_flops = 0;
    double kv_bytes = 0;  // held after this scale (kv_bytes_per_scale)
    bool skipped = false;
    double pruned = -1;  // share of the scale's tokens not computed; -1: no tokens recorded
    // FLOPs per part of the step starting here (ScaleOutput::part_flops); work_counted: the run
    // had the cost model (older history entries and MAR: not).
    std::array<double, kCostParts> part_flops{};
    bool work_counted = false;
    std::array<double, kCostParts> part_ms{};  // where parts_timed (ScaleOutput::part_ms)
    bool parts_timed = false;
    double work_flops() const;  // the parts' sum
    // The method's own time at this scale (the overhead part); -1 where the parts were not timed.
    double overhead_ms() const;
    bool operator==(const ScaleSummary& o) const;
};

// The format version written by scales_to_json (and the newest scales_from_json reads).
constexpr int kScaleSummaryVersion = 1;

std::vector<ScaleSummary> summarize_scales(const RunOutput& run);

// {"baseline": [...], "accelerated": [...]} with the version; a side without rows is left out.
nlohmann::json scales_to_json(const std::vector<ScaleSummary>& baseline,
                              const std::vector<ScaleSummary>& accelerated);
// One side ("baseline" or "accelerated") of a scales_to_json document; empty when the side is
// not in it. Throws std::runtime_error naming `what` and the field on a malformed document or a
// newer version.
std::vector<ScaleSummary> scales_from_json(const nlohmann::json& j, const std::string& side,
                                           const std::string& what);

}  // namespace varscope::gui
