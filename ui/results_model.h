// The results of the comparison on show: both sides' SideResults, the request that produced them
// and what is derived from the pair (PSNR/SSIM, speedup, the difference image). The comparison
// view, inspector, plots, per-scale table and exports observe it (changed()) instead of reading
// the results back from a widget.
#pragma once

#include <QDateTime>
#include <QImage>
#include <QObject>

#include "ui/run_types.h"

namespace varscope::gui {

struct ComparisonMetrics {
    bool valid = false;
    double psnr = 0, ssim = 0, speedup = 0;
    double base_ms = 0, accel_ms = 0;
    double base_overhead_ms = 0, accel_overhead_ms = 0;  // left out of the times (RunOutput)
    int64_t base_kv = 0, accel_kv = 0;
    // The FLOPs of every step's forward on each side (ScaleSummary::work_flops), 0 where a side
    // has no cost model (MAR, older history entries): the work the method saves, which the
    // speedup shows only where its overhead and launches do not take it back.
    double base_work = 0, accel_work = 0;
    // The accelerated side's own time (the cost model's overhead part: scoring, gathers, index
    // maps) summed over its scales; -1 unless every scale's parts were timed (the CPU).
    double accel_method_ms = -1;
    // SparVAR's CSLA ran on its exact masked reference (the CPU, fp32, ...), which computes every
    // score: its speedup then says nothing about the method, and the line says so.
    bool sparvar_reference = false;
    // On CUDA: whether each side's steps ran as CUDA graph replays (graphs are 2-3x faster at
    // batch 1, so times compare only alike), and whether one side ran again eagerly to match.
    bool cuda = false, base_graphs = false, accel_graphs = false, matched_eager = false;
    // Two runs of the history (A left, B right), each timed in its own run: when they ran. Both
    // valid: the line gives the ratio of their times for what it is, not a speedup.
    QDateTime run_a, run_b;
    QString text() const;     // one line for the UI and figure notes
    QString toolTip() const;  // what the times count and what they leave out
};

// Whether a run's SparVAR records say CSLA ran on the reference instead of the CUDA kernel
// (record "sparvar/csla_token_mask", value cuda_kernels 0).
bool ranSparVarReference(const RunOutput& run);

// Runs of the history on show (ResultsModel::setPair): two runs side by side, or one run's
// baseline and accelerated sides (one_run). How the captions and the plots' series name them,
// when each ran (two runs: their times are not compared as a speedup) and a note for the plots
// (e.g. an entry without per-scale records).
struct RunPair {
    QString left_label, right_label;  // the images' captions
    QString left_name, right_name;    // the plots' series ("": baseline / accelerated)
    QDateTime left_time, right_time;  // two runs: when each ran (invalid for one run)
    QString note;
    bool one_run = false;
};

class ResultsModel : public QObject {
    Q_OBJECT
  public:
    static constexpr float kDiffMax = 0.5f;  // |Δ| range of the difference image (mean over RGB)

    using QObject::QObject;

    // A side finished for request r. A baseline made with other settings than the accelerated
    // side on show (another class, seed, model, ...) drops that side: the two no longer compare.
    void setSide(const SideResultPtr& result, const Request& r);
    // Two results side by side whatever their settings (two runs of the history): `left` on the
    // baseline side, `right` on the accelerated side; r names them in exports (the left run's).
    // The pair's labels name the runs in the captions (neither is a baseline).
    void setPair(const SideResultPtr& left, const SideResultPtr& right, const Request& r,
                 const RunPair& pair = {});
    // What a side's caption says instead of "Baseline" / the methods ("" but in a pair of runs).
    QString label(Side s) const {
        return s == Side::Baseline ? pair_.left_label : pair_.right_label;
    }
    const RunPair& pair() const { return pair_; }  // empty unless two runs of the history
    void clearSide(Side side);                     // the side failed or was cancelled
    void clear();                                  // nothing on show (another model or family)

    SideResultPtr baseline() const { return base_; }
    SideResultPtr accelerated() const { return accel_; }
    SideResultPtr side(Side s) const { return s == Side::Baseline ? base_ : accel_; }
    bool empty() const { return !base_ && !accel_; }
    // The request of the latest side on show (its accelerators are the accelerated side's).
    const Request& request() const { return request_; }
    const ComparisonMetrics& metrics() const { return metrics_; }
    // |accelerated − baseline| as a heatmap (0 … kDiffMax), null unless both sides have images.
    const QImage& differenceImage() const { return diff_image_; }
    double differenceMean() const { return diff_mean_; }

  signals:
    void changed();

  private:
    void update();  // metrics and difference of the pair, then changed()

    SideResultPtr base_, accel_;
    RunPair pair_;  // a pair of history runs (setPair)
    Request request_;
    // The baseline settings each side was made with (GenerationSettings::baseline_key).
    std::string base_key_, accel_key_;
    ComparisonMetrics metrics_;
    QImage diff_image_;
    double diff_mean_ = 0;
};

}  // namespace varscope::gui
