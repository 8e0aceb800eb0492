// Centre of the window: baseline | accelerated (| difference) with synchronised zoom and pan,
// per-scale filmstrips under each, and the comparison metrics (PSNR, SSIM, speedup, KV bytes).
#pragma once

#include <QWidget>

#include "ui/run_types.h"

class QCheckBox;
class QLabel;

namespace varscope::viz {
class ImageCanvas;
class ViewSync;
}  // namespace varscope::viz

namespace varscope::gui {

class Filmstrip;

struct ComparisonMetrics {
    bool valid = false;
    double psnr = 0, ssim = 0, speedup = 0;
    double base_ms = 0, accel_ms = 0;
    double base_overhead_ms = 0, accel_overhead_ms = 0;  // left out of the times (RunOutput)
    int64_t base_kv = 0, accel_kv = 0;
    // SparVAR's CSLA ran on its exact masked reference (the CPU, fp32, ...), which computes every
    // score: its speedup then says nothing about the method, and the line says so.
    bool sparvar_reference = false;
    // On CUDA: whether each side's steps ran as CUDA graph replays (graphs are 2-3x faster at
    // batch 1, so times compare only alike), and whether one side ran again eagerly to match.
    bool cuda = false, base_graphs = false, accel_graphs = false, matched_eager = false;
    QString text() const;     // one line for the UI and figure notes
    QString toolTip() const;  // what the times count and what they leave out
};

// Whether a run's SparVAR records say CSLA ran on the reference instead of the CUDA kernel
// (record "sparvar/csla_token_mask", value cuda_kernels 0).
bool ranSparVarReference(const RunOutput& run);

// The accelerated image's caption, in the window and the exported figure: its methods and time,
// or that it is the baseline when none is on.
QString acceleratedCaption(const SideResult& r);

class ComparisonView : public QWidget {
    Q_OBJECT
  public:
    explicit ComparisonView(QWidget* parent = nullptr);

    void setResult(const SideResultPtr& r);
    void setProgress(Side side, int scale, int scales);
    void setPreview(Side side, const QImage& image);         // the image after a scale / step
    void setFamily(Family f) { family_ = f; }                // "scale" or "step" in progress badges
    void setSideMessage(Side side, const QString& message);  // error / cancelled text
    void markStale();  // new job: keep images, show progress badges
    void clearBusy();
    void clear();
    void setShowDifference(bool on);
    bool showDifference() const;

    SideResultPtr baseline() const { return base_; }
    SideResultPtr accelerated() const { return accel_; }
    QImage differenceImage() const { return diff_image_; }
    const ComparisonMetrics& metrics() const { return metrics_; }
    QString metricsText() const;

  signals:
    void scaleSelected(int scale);

  private:
    void updateComparison();
    static QStringList scaleCaptions(const SideResult& r);

    viz::ViewSync* sync_;
    viz::ImageCanvas* base_canvas_;
    viz::ImageCanvas* accel_canvas_;
    viz::ImageCanvas* diff_canvas_;
    Filmstrip* base_strip_;
    Filmstrip* accel_strip_;
    QCheckBox* show_diff_;
    QLabel* metrics_label_;
    SideResultPtr base_, accel_;
    QImage diff_image_;
    ComparisonMetrics metrics_;
    Family family_ = Family::Var;
};

}  // namespace varscope::gui
