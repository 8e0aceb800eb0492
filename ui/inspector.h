// Inspector tabs fed by probe records: the attention map of a chosen scale/layer/head with
// key-scale partitions, and one generic record viewer per accelerator (heatmap of a 2-D
// tensor, token overlay on the image, mask sparsity, layer x scale tables of scalar values).
// Records are keyed by (method, kind); new kinds need no code here.
#pragma once

#include <QTabWidget>
#include <QWidget>
#include <limits>
#include <optional>

#include "ui/inspector_empty.h"
#include "ui/run_types.h"

class QCheckBox;
class QComboBox;
class QLabel;
class QSpinBox;

namespace varscope::viz {
class HeatmapView;
struct FloatGrid;
}  // namespace varscope::viz

namespace varscope::gui {

// Layout helpers for a scale schedule (patch_nums of the scales that ran).
struct ScaleLayout {
    std::vector<int64_t> patch_nums;
    int64_t begin(size_t scale) const;  // first token of the scale in the full sequence
    int64_t tokens(size_t scale) const { return patch_nums[scale] * patch_nums[scale]; }
    // (scale, y, x) of a token index in the full sequence; scale = -1 if out of range.
    std::tuple<int64_t, int64_t, int64_t> locate(int64_t token) const;
};

class AttentionInspector : public QWidget {
    Q_OBJECT
  public:
    explicit AttentionInspector(QWidget* parent = nullptr);
    void setResults(const SideResultPtr& base, const SideResultPtr& accel);
    void setDepth(int depth, int heads);
    void setScale(int scale);
    int layer() const;
    // Off: runs record nothing for the inspector (View ▸ Record for the inspector); the tab
    // says so instead of showing stale maps.
    void setRecording(bool on);
    // What the run on show was made with (an empty tab says why it is empty from it).
    void setRunState(const InspectorRunState& s);
    viz::HeatmapView* view() const { return view_; }
    QComboBox* sideBox() const { return side_; }
    // The baseline's map of (scale, layer, head); head -1 = the mean over heads. Another layer
    // than the recorded one asks for a re-run (layerRequested).
    void showMap(int scale, int layer, int head);
    int scale() const;
    int head() const;  // -1 = mean
    // The kept set's recall on the map on show (the mask overlay), NaN when none is shown.
    double overlayRecall() const { return overlay_recall_; }
    void setMaskShown(bool on);  // the "Kept by the method" overlay

  signals:
    void layerRequested(int layer);  // attention of another layer is needed (re-run)

  private:
    void refresh();
    // The accelerated run's kept set (RunOutput::masks) over the map on show: dropped entries
    // dimmed, the recall on the probabilities `probs` (heads, q, k) in the corner; returns a
    // caption fragment.
    QString overlay_mask(const AttentionOutput& rec, int head);
    SideResultPtr base_, accel_;
    QComboBox* side_;
    QComboBox* scale_;
    QSpinBox* layer_;
    QComboBox* head_;
    QComboBox* cmap_;
    QCheckBox* log_;
    QCheckBox* mask_;
    viz::HeatmapView* view_;
    InspectorRunState state_;  // its base/accel follow setResults
    double overlay_recall_ = std::numeric_limits<double>::quiet_NaN();
};

// What a record tab's scale box picks: the record of one scale (or step), or an overview of the
// records of every scale. Kept as the items' data (no sentinel scale numbers).
struct ScaleChoice {
    enum class View {
        Scale,    // the record(s) of `scale`; -1: records that belong to the whole run
        Table,    // records of scalar values only: value per layer (rows) x scale (columns)
        Stacked,  // 1-D records of equal length, one per scale, side by side
    };
    View view = View::Scale;
    int64_t scale = -1;
    static ScaleChoice of(int64_t s) { return {View::Scale, s}; }
    bool operator==(const ScaleChoice& o) const { return view == o.view && scale == o.scale; }
};

class AccelInspector : public QWidget {
    Q_OBJECT
  public:
    // method: "fastvar", ... or "" for every method; hint: what the tab shows, under the reason
    // it is empty (emptyTabReason).
    AccelInspector(const QString& method, const QString& hint, QWidget* parent = nullptr);
    void setResults(const SideResultPtr& base, const SideResultPtr& accel);
    void setScale(int scale);
    viz::HeatmapView* view() const { return view_; }
    int recordCount() const { return int(records_.size()); }
    // MAR records are per decoding step, VAR's per scale: the word used in labels and titles.
    void setStepRecords(bool steps);
    QStringList kinds() const;
    bool selectKind(const QString& kind);
    QString currentKind() const;  // "method/kind", "" without records
    // The record shown first when the user has not picked one ("method/kind"); otherwise the
    // first kind the run reported.
    void setPreferredKind(const QString& key) { preferred_ = key; }
    void setRecording(bool on);                    // as AttentionInspector::setRecording
    void setRunState(const InspectorRunState& s);  // as AttentionInspector::setRunState
    // The readout line (record facts, or why the scale asked for has no record).
    QString valuesText() const;

  private:
    void rebuildKinds();
    void rebuildScales();
    void refresh();
    std::vector<const AccelOutput*> matching() const;  // of the chosen kind
    ScaleChoice scaleChoice() const;

    QString method_, hint_, preferred_;
    QString unit_ = tr("scale"), units_ = tr("scales");
    SideResultPtr base_, accel_, source_;  // source_: the side the records come from
    std::vector<const AccelOutput*> records_;
    QComboBox* kind_;
    QComboBox* scale_;
    QComboBox* layer_;
    QSpinBox* index_;
    QComboBox* mode_;
    QComboBox* cmap_;
    QLabel* values_;
    viz::HeatmapView* view_;
    bool updating_ = false;
    InspectorRunState state_;
};

class AttentionGrid;

class Inspector : public QTabWidget {
    Q_OBJECT
  public:
    explicit Inspector(QWidget* parent = nullptr);
    void setResults(const SideResultPtr& base, const SideResultPtr& accel);
    void setModel(int depth, int heads);
    void setFamily(Family f);  // shows the tabs that apply to VAR or MAR runs
    void setScale(int scale);
    void setRecording(bool on);  // every tab
    // The settings of the run on show (what its accelerators were, whether it recorded);
    // historyPair: runs of the history are on show (they keep no records): two, or one run's
    // both sides (historyOneRun).
    void setRequest(const Request& r, bool historyPair = false, bool historyOneRun = false);
    // Why there is no accelerated side: "cancelled" or the error ("" once one is on show).
    void setAcceleratedMissing(const QString& why);
    const InspectorRunState& runState() const { return state_; }
    AttentionInspector* attention() const { return attention_; }
    AttentionGrid* grid() const { return grid_; }
    // The request of the results on show (the grid's analyses are of its settings).
    void setRun(const std::optional<Request>& request);
    AccelInspector* methodTab(const QString& method) const;
    // The visible panel as an image (for figures), rendered at kFigurePanelSize whatever the
    // dock's size, so its text stays readable in the figure's cell; null when it has no data.
    QImage currentPanelImage() const;
    static constexpr QSize kFigurePanelSize{320, 320};
    QString currentPanelTitle() const;

  signals:
    void attentionLayerRequested(int layer);
    void analysisRequested(QString key, QString method_json);

  private:
    void pushState();
    AttentionInspector* attention_;
    AttentionGrid* grid_;
    std::vector<std::pair<QString, AccelInspector*>> methods_;
    InspectorRunState state_;
};

}  // namespace varscope::gui

Q_DECLARE_METATYPE(varscope::gui::ScaleChoice)
