// Why an inspector tab shows nothing, in the words of what happened: "skip removed the scales
// FastVAR would prune", "the accelerated run was cancelled", "the loaded model reads no text",
// not "enable FastVAR" while it is enabled. One function decides it from the run's settings and
// records, so every tab (and its tests) says the same thing for the same run.
#pragma once

#include <QString>
#include <nlohmann/json.hpp>

#include "ui/run_types.h"

namespace varscope::gui {

// What the inspector knows about the comparison on show.
struct InspectorRunState {
    bool recording = true;         // View ▸ Record for the inspector, now
    Family family = Family::Var;   // the loaded model's family
    SideResultPtr base, accel;     // on show (either may be missing)
    nlohmann::json accel_config;   // the accelerated side's settings (Request::accel)
    bool run_recorded = true;      // the run on show kept records (its accel_records)
    int64_t attention_layer = -1;  // the layer its attention maps were recorded for
    QString accel_missing;         // why no accelerated side: "cancelled" or the error
    bool has_request = false;      // accel_config / run_recorded are those of a run
    bool history_pair = false;     // runs of the history: images, metrics, per-scale summaries
    bool history_one_run = false;  // with history_pair: one run's both sides, not two runs
};

// tab: "attention", a record tab's method id ("fastvar", "sparvar", "lazyvar", "ams_kv", "mar",
// "lazymar", "text") or "" (all records). side: the attention tab's side. scale: a scale or
// step asked for (a filmstrip click) that has no record while other scales have; -1: the tab
// has no record at all. Returns the reason, one or two sentences.
QString emptyTabReason(const QString& tab, const InspectorRunState& s,
                       Side side = Side::Accelerated, int64_t scale = -1, int64_t layer = -1);

// A method's name as the panel shows it ("FastVAR", "AMS-KV", ...; the id when unknown).
QString methodTitle(const QString& method);

}  // namespace varscope::gui
