// Qt-side types shared by the worker and the widgets: the generation request (everything the
// user set, serialisable to JSON for PNG text chunks and drag-and-drop restore) and results
// converted to Qt images.
#pragma once

#include <QImage>
#include <QMetaType>
#include <QString>
#include <QVector>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "ui/engine/engine.h"
#include "ui/scale_summary.h"

namespace varscope::gui {

// Everything that determines a comparison: model, prompt/class, sampling, accelerators.
struct Request {
    ModelSource model;
    QString prompt;
    GenerationSettings gen;
    nlohmann::json accel = nlohmann::json::object();

    nlohmann::json to_json() const;
    // Throws std::exception on malformed input (missing fields take defaults).
    static Request from_json(const nlohmann::json& j);
};

// Key of the text chunk that carries Request::to_json() in every exported PNG.
inline const char* kSettingsTextKey = "varscope.settings";

QImage to_qimage(const RgbImage& img);

// Attention FLOPs of a run (the sum of its scales' or steps').
double attention_flops_of(const RunOutput& run);

enum class Side { Baseline = 0, Accelerated = 1 };

// One finished side of a comparison.
struct SideResult {
    Side side = Side::Baseline;
    RunOutput run;
    QImage image;
    QVector<QImage> filmstrip;  // per scale, empty image where not decoded
    bool cached = false;        // baseline reused from the cache
    // Accelerators ran: the accelerated side with at least one method on (false for the
    // baseline and for the baseline shown again as the accelerated side).
    bool accelerated = false;
    bool same_as_baseline = false;  // no accelerator enabled: the baseline result is shown
    // Ran again without CUDA graphs because the other side could not use them (times compare
    // only alike).
    bool matched_eager = false;
    // A run of the history: its stored per-scale summary (run.scales keeps the times, not the
    // tokens and records). Empty for a live run, and for an entry saved before summaries.
    std::vector<ScaleSummary> stored_scales;
};
using SideResultPtr = std::shared_ptr<const SideResult>;

// What the plots and the per-scale table draw of a side: its stored summary, else its run's.
std::vector<ScaleSummary> scale_summary_of(const SideResult& r);

// Times compare only between runs made the same way. When one side of a comparison replayed CUDA
// graphs and the other ran eagerly, the graphed side is to run again eagerly: which one (none
// when both ran alike).
std::optional<Side> sideToRunAgainEagerly(const RunOutput& base, const RunOutput& accel);

// One attention analysis (Engine::analyze) and the key of the run and method it belongs to
// (AttentionGrid::keyOf): the grid view caches them by key.
struct AnalysisResult {
    std::string key;
    AnalysisOutput out;
};
using AnalysisResultPtr = std::shared_ptr<const AnalysisResult>;

struct SweepPoint {
    double value = 0;
    double millis = 0;
    double baseline_millis = 0;  // the baseline it was compared with, run the same way
    bool cuda = false;           // ran on a CUDA device
    bool cuda_graphs = false;    // both ran as CUDA graph replays
    double speedup = 0;
    double work_ratio = 0;  // baseline attention FLOPs / accelerated (0: not counted)
    double psnr = 0;
    double ssim = 0;
};

}  // namespace varscope::gui

Q_DECLARE_METATYPE(varscope::gui::SideResultPtr)
Q_DECLARE_METATYPE(varscope::gui::SweepPoint)
Q_DECLARE_METATYPE(varscope::gui::AnalysisResultPtr)
Q_DECLARE_METATYPE(varscope::gui::ModelInfo)
