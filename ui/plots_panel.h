// Plots (QCustomPlot): latency per scale (MAR: per step) and cumulative time for baseline vs
// accelerated, KV memory per scale (MAR: LazyMAR's computed fraction and CFG residual drift per
// step), work and time per scale (how much less work the method does against its speedup:
// where its overhead takes the saving back; VAR, Infinity), and the sweep view (one hyperparameter
// stepped over a range, speedup against PSNR, run on the worker).
#pragma once

#include <QWidget>
#include <optional>
#include <vector>

#include "core/accel/param_spec.h"
#include "ui/run_types.h"

class QCustomPlot;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QPushButton;
class QSpinBox;

namespace varscope::gui {

// Where a plot's legend covers the fewest of its points: the corner (top left first on ties);
// *points_under: how many it still covers there.
Qt::Alignment emptiest_corner(const QCustomPlot* plot, int* points_under = nullptr);
// Puts the legend in the emptiest corner; where none is empty, first raises the y axis's top
// so that the data leave the upper corners free.
void place_legend(QCustomPlot* plot);

class PlotsPanel : public QWidget {
    Q_OBJECT
  public:
    explicit PlotsPanel(QWidget* parent = nullptr);
    // The per-scale series of both sides (scale_summary_of: a history run's stored summary).
    // The names label the series (two runs of the history: which run each is); note: a line
    // over the plots (e.g. why an entry has no per-scale records), hidden when empty.
    void setResults(const SideResultPtr& base, const SideResultPtr& accel,
                    const QString& baseName = {}, const QString& accelName = {},
                    const QString& note = {});
    QString note() const;
    void clearSweep();
    void addSweepPoint(const SweepPoint& p);
    void setSweepRunning(bool running);
    const std::vector<SweepPoint>& sweep() const { return sweep_; }
    QCustomPlot* latencyPlot() const { return latency_; }
    QCustomPlot* cumulativePlot() const { return cumulative_; }
    QCustomPlot* kvPlot() const { return kv_; }
    QCustomPlot* workPlot() const { return work_; }
    QCustomPlot* sweepPlot() const { return sweep_plot_; }
    std::vector<double> sweepValues() const;  // from the range controls
    void setFamily(Family f);  // axis names, the family's plots and sweepable methods
    // The sweep's range goes up to what the loaded model accepts (ParamSpec::counts).
    void setModelCounts(const ModelCounts& counts);
    QCustomPlot* lazyMarPlot() const { return lazymar_; }

  signals:
    void sweepRequested(QString method, QString param, std::vector<double> values);

  private:
    void fillParams();
    void resetSweepRange();                       // the chosen setting's whole range on the model
    std::optional<ParamSpec> sweptParam() const;  // the setting the sweep controls name
    ModelCounts counts_;
    void fillMethods();
    void setLazyMarResults(const SideResultPtr& accel);
    Family family_ = Family::Var;
    QCustomPlot* lazymar_;
    QCustomPlot* latency_;
    QCustomPlot* cumulative_;
    QCustomPlot* kv_;
    QCustomPlot* work_;
    void setWorkResults(const std::vector<ScaleSummary>& base,
                        const std::vector<ScaleSummary>& accel);
    QCustomPlot* sweep_plot_;
    QComboBox* sweep_y_;  // what the sweep plots against PSNR: speedup or attention work saved
    void replotSweep();
    QString sweepTiming() const;  // how the points were timed on CUDA ("" elsewhere)
    QComboBox* method_;
    QComboBox* param_;
    QDoubleSpinBox* from_;
    QDoubleSpinBox* to_;
    QSpinBox* steps_;
    QPushButton* run_;
    QLabel* sweep_status_;
    QLabel* note_;
    std::vector<SweepPoint> sweep_;
};

}  // namespace varscope::gui
