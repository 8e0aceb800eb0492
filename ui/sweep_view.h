// The sweep view (issue #34): a `varscope-cli sweep` result (sweep.json, core/eval/sweep_result.h)
// as a QCustomPlot of its points over any two of their numeric fields, with the Pareto front of
// those two (directions chosen per axis) as a staircase. Hovering a point shows its settings and
// numbers; a click asks (pointActivated) for its accelerator config to be loaded: the window
// decides whether it fits the loaded model. A file that cannot be read leaves the view as it was.
#pragma once

#include <QWidget>
#include <optional>
#include <vector>

#include "core/eval/sweep_result.h"

class QComboBox;
class QCustomPlot;
class QLabel;
class QPushButton;

namespace varscope::gui {

class SweepView : public QWidget {
    Q_OBJECT
  public:
    explicit SweepView(QWidget* parent = nullptr);

    // Reads `path`; on failure the sweep on show stays, and the message (naming the file and
    // the key) is shown in the view and returned in *error.
    bool open(const QString& path, QString* error = nullptr);
    void setResult(SweepResult result);
    const std::optional<SweepResult>& result() const { return result_; }

    // The axes: fields of the points (SweepResult::fields) and their directions. A field the
    // sweep lacks is refused (false).
    bool setAxes(const std::string& x, const std::string& y);
    void setBetter(Better x, Better y);
    ParetoAxis xAxis() const;
    ParetoAxis yAxis() const;

    // Per point (SweepResult::points): on the front of the current axes.
    const std::vector<bool>& front() const { return front_; }
    // The points drawn (those with both fields), as indices into SweepResult::points.
    const std::vector<int>& shownPoints() const { return shown_; }
    // Where point `index` is drawn, in the plot widget's pixels (null if not drawn).
    std::optional<QPoint> pointPosition(int index) const;
    int pointAt(const QPoint& plotPixel) const;  // -1: none within a few pixels
    QString pointToolTip(int index) const;

    // A note above the plot (errors in red); `index` >= 0 adds "Load anyway" for that point.
    void showNotice(const QString& text, bool error = false, int loadAnywayIndex = -1);
    QString notice() const;
    QPushButton* loadAnywayButton() const { return load_anyway_; }

    QCustomPlot* plot() const { return plot_; }
    // PNG (2x) or SVG by the suffix; atomic; false and *error on failure.
    bool exportPlot(const QString& path, QString* error) const;

  signals:
    void pointActivated(int index);  // a click on a drawn point
    void loadAnywayRequested(int index);
    void openRequested();  // the Open… button

  protected:
    void dragEnterEvent(QDragEnterEvent* e) override;
    void dropEvent(QDropEvent* e) override;

  private:
    void fillAxisPickers();
    void replot();
    void exportDialog();
    // Infinite values (identical images) are drawn just above (or below) the finite ones.
    double shownValue(double v, bool y) const;

    std::optional<SweepResult> result_;
    std::vector<bool> front_;
    std::vector<int> shown_;
    double x_lo_ = 0, x_hi_ = 1, y_lo_ = 0, y_hi_ = 1;  // finite ranges of the axes
    QCustomPlot* plot_;
    QComboBox* x_field_;
    QComboBox* y_field_;
    QComboBox* x_better_;
    QComboBox* y_better_;
    QLabel* file_;
    QLabel* notice_;
    QLabel* summary_;
    QPushButton* load_anyway_;
    QPushButton* export_;
    int load_anyway_index_ = -1;
    bool filling_ = false;
    QPoint pressed_at_;  // a click is a press and release at (about) the same place
};

}  // namespace varscope::gui
