// Centre of the window: baseline | accelerated (| difference) with synchronised zoom and pan,
// per-scale filmstrips under each, and the comparison metrics (PSNR, SSIM, speedup, KV bytes).
// It shows a ResultsModel (the results live there) plus the run in progress: badges, previews
// and the messages of a failed or cancelled side.
#pragma once

#include <QWidget>
#include <optional>

#include "ui/image_export.h"
#include "ui/results_model.h"

class QCheckBox;
class QLabel;
class QMenu;

namespace varscope::viz {
class ImageCanvas;
class ViewSync;
}  // namespace varscope::viz

namespace varscope::gui {

class Filmstrip;

// The accelerated image's caption, in the window and the exported figure: its methods and time,
// or that it is the baseline when none is on.
QString acceleratedCaption(const SideResult& r);

class ComparisonView : public QWidget {
    Q_OBJECT
  public:
    explicit ComparisonView(QWidget* parent = nullptr);

    // The results shown (not owned); without one the view shows nothing but progress.
    void setResultsModel(ResultsModel* model);
    ResultsModel* resultsModel() const { return model_; }
    void setProgress(Side side, int scale, int scales);
    void setPreview(Side side, const QImage& image);         // the image after a scale / step
    void setFamily(Family f) { family_ = f; }                // "scale" or "step" in progress badges
    void setSideMessage(Side side, const QString& message);  // error / cancelled text
    void markStale();  // new job: keep images, show progress badges
    void clearBusy();
    // Back to the model's images and captions (previews of a sweep's runs replaced them).
    void showModel();
    void setShowDifference(bool on);
    bool showDifference() const;
    QString metricsText() const;

    // The context menu of an image (baseline, accelerated or difference canvas): "Save … image…"
    // and "Save all images…"; empty while that image is not on show. The caller owns it.
    QMenu* imageMenu(SavedImage which, QWidget* parent = nullptr);

  signals:
    void scaleSelected(int scale);
    // Save that image (the window asks where and at which size); nullopt: every image on show.
    void saveImageRequested(std::optional<SavedImage> which);

  private:
    void modelChanged();
    void showSide(Side side, const SideResultPtr& r);
    static QStringList scaleCaptions(const SideResult& r);

    viz::ViewSync* sync_;
    viz::ImageCanvas* base_canvas_;
    viz::ImageCanvas* accel_canvas_;
    viz::ImageCanvas* diff_canvas_;
    Filmstrip* base_strip_;
    Filmstrip* accel_strip_;
    QCheckBox* show_diff_;
    QLabel* metrics_label_;
    ResultsModel* model_ = nullptr;
    SideResultPtr shown_base_, shown_accel_;  // what the canvases show of the model
    Family family_ = Family::Var;
};

}  // namespace varscope::gui
