// The inspector's grid view (issue #35): one attention measure over scale x layer (the mean over
// heads) or layer x head at one scale, for the analysis of the run on show with one of its
// methods. The analysis itself (two model runs) is the worker's job; this widget caches the
// results per run and method, so switching the measure, the view or a method already analysed
// only recomputes a grid from the cached records (core/analysis/measure_grid.h). Hover shows the
// cell's numbers, a click opens that attention map, and the grid exports as a labelled figure
// (PNG/SVG), as its cells (CSV) or as every measure (the JSON and CSV `varscope-cli analyze`
// writes).
#pragma once

#include <QWidget>
#include <deque>
#include <map>
#include <set>

#include "core/analysis/measure_grid.h"
#include "ui/run_types.h"

class QComboBox;
class QLabel;
class QPushButton;

namespace varscope::viz {
class HeatmapView;
struct GridFigure;
}  // namespace varscope::viz

namespace varscope::gui {

class AttentionGrid : public QWidget {
    Q_OBJECT
  public:
    enum class ExportKind { Figure, GridCsv, MeasuresJson, MeasuresCsv };

    explicit AttentionGrid(QWidget* parent = nullptr);
    // The run on show (null: none): its methods fill the method box; a cached analysis shows
    // at once, otherwise one is requested while the view is visible.
    void setRun(const std::optional<Request>& request);
    // A finished analysis: cached under its key, shown when it is the current one.
    void setAnalysis(const AnalysisResultPtr& result);
    void setAnalysisFailed(const QString& key, const QString& message);

    // The cache key of a run's analysis with one method: everything that changes the runs (model,
    // sampling settings, the method's JSON), not what only the views record.
    static std::string keyOf(const Request& request, const nlohmann::json& method);
    QString currentKey() const;
    nlohmann::json currentMethod() const;
    const AnalysisOutput* current() const;  // the analysis on show, or null
    const analysis::MeasureGrid& grid() const { return grid_; }
    analysis::GridMeasure measure() const;
    int cachedAnalyses() const { return int(cache_.size()); }
    viz::HeatmapView* view() const { return view_; }

    bool selectMeasure(analysis::GridMeasure m);
    bool selectMethod(int index);  // 0 = every enabled method together
    int methodCount() const;
    // Scale x layer, or layer x head at `scale`.
    void showScaleLayer();
    bool showLayerHead(int scale);

    viz::GridFigure figure() const;
    // Writes the grid on show; false and *error without an analysis or on a write error.
    bool exportTo(const QString& path, ExportKind kind, QString* error) const;

  signals:
    void analysisRequested(QString key, QString method_json);
    // A cell was clicked: that map in the attention view (head -1: the mean over heads).
    void cellActivated(int scale, int layer, int head);

  protected:
    void showEvent(QShowEvent* e) override;

  private:
    void rebuildMethods();
    void rebuildScales();
    void refresh();
    void requestIfNeeded(bool explicit_request);
    void exportDialog(ExportKind kind);
    QString cellText(int row, int col) const;

    std::optional<Request> request_;
    std::deque<AnalysisResultPtr> cache_;  // newest first
    std::set<std::string> requested_;      // keys asked for and not answered yet
    std::map<std::string, QString> failed_;
    analysis::MeasureGrid grid_;
    QComboBox* method_;
    QComboBox* measure_;
    QComboBox* axes_;
    QComboBox* scale_;
    QComboBox* cmap_;
    QPushButton* analyze_;
    QPushButton* export_;
    QLabel* status_;
    viz::HeatmapView* view_;
    bool updating_ = false;
};

}  // namespace varscope::gui
