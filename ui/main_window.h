// The VARScope window: model and method panels (left), baseline | accelerated comparison
// (centre), inspector tabs (right), plots and the per-scale table (bottom). All model work runs
// on the GenerationWorker thread; this class only wires signals and composes exports.
#pragma once

#include <QMainWindow>
#include <QTimer>
#include <optional>
#include <set>

#include "ui/export_dialog.h"
#include "ui/generation_worker.h"
#include "ui/image_export.h"

class QDockWidget;
class QLabel;
class QMenu;
class QProgressBar;
class QTableView;

namespace varscope::gui {

class ComparisonView;
class ElidedLabel;
class HistoryPanel;
class Inspector;
class MethodPanel;
class MetricsModel;
class ModelPanel;
class PlotsPanel;
class ResultsModel;
class RunHistory;
class SweepView;

class MainWindow : public QMainWindow {
    Q_OBJECT
  public:
    // loader: how the worker builds models (default: checkpoints via Engine::load).
    explicit MainWindow(GenerationWorker::Loader loader = {}, QWidget* parent = nullptr);
    ~MainWindow() override;

    Request currentRequest() const;
    void applyRequest(const Request& r, bool generateNow = true);
    // View ▸ Record for the inspector (on by default, saved with the settings). Off: runs record
    // no attention maps or accelerator records, so on CUDA both sides replay CUDA graphs.
    QAction* recordAction() const { return record_action_; }

    // Exports without dialogs (the dialogs call these); false + *error on failure. Existing
    // files are refused unless overwrite is true.
    bool exportFigure(const ExportOptions& o, QString* error, bool overwrite = false);
    // The notes under an exported figure: model, the sampling settings of its family,
    // accelerators, metrics, date.
    QStringList figureNotes() const;
    bool exportMetrics(const QString& path, QString* error, bool overwrite = false);
    bool saveImage(Side side, const QString& path, QString* error, bool overwrite = false);
    // File ▸ Save images…: the chosen images at native size or upscaled, all written or none.
    // *written gets the paths.
    bool saveImages(const SaveImagesOptions& o, QString* error, bool overwrite = false,
                    QStringList* written = nullptr);
    // The file name an image of the comparison on show gets at `factor`.
    QString savedImageName(SavedImage which, int factor) const;
    // Reads the settings embedded in a VARScope PNG and applies them.
    bool restoreFromPng(const QString& path, QString* error);

    // The docks' sizes of a first start (no saved window state), from the window's size: the
    // images get the space (at 1280x800 each image at least 256 px).
    void applyDefaultLayout();

    ModelPanel* modelPanel() const { return model_panel_; }
    MethodPanel* methodPanel() const { return method_panel_; }
    ComparisonView* comparison() const { return comparison_; }
    ResultsModel* results() const { return results_; }
    RunHistory* history() const { return history_; }
    HistoryPanel* historyPanel() const { return history_panel_; }
    Inspector* inspector() const { return inspector_; }
    PlotsPanel* plots() const { return plots_; }
    MetricsModel* metricsModel() const { return metrics_; }
    GenerationWorker* worker() const { return worker_; }
    bool busy() const { return active_job_ != 0; }
    int debounceMs() const { return debounce_.interval(); }

  public slots:
    void generate();
    void cancel();
    void exportFigureDialog();
    void exportMetricsDialog();
    void saveImageDialog();
    // The dialog with every image on show checked, or only `only` (an image's context menu).
    void saveImagesDialog(std::optional<SavedImage> only = std::nullopt);

  signals:
    void resultsUpdated();  // a side finished and the panels show it
    void jobFinished();     // the worker went idle for the latest job

  protected:
    void closeEvent(QCloseEvent* e) override;
    void dragEnterEvent(QDragEnterEvent* e) override;
    void dropEvent(QDropEvent* e) override;

  private:
    void buildActions();
    // The model family's controls in every panel (accelerators, plots, metrics, inspector).
    void showFamily(Family f);
    void readSettings();
    // What the inspector records (View ▸ Record for the inspector) into r's settings.
    void applyRecording(Request& r) const;
    void writeSettings();
    void showResults();
    // The grid's analysis of the run on show, with one method: submitted now when the worker is
    // idle, else once the running job finished (an analysis never cancels a generation).
    void requestAnalysis(const QString& key, const QString& method_json);
    void submitAnalysis(Job job);
    void runSweep(const QString& method, const QString& param, const std::vector<double>& values);
    bool confirmOverwrite(const QString& path);
    // False, with a status-bar note, while there is nothing to export or save (no dialog).
    bool needResults(const QString& what);
    QString defaultExportName(const QString& suffix) const;

    GenerationWorker* worker_;
    ResultsModel* results_;
    RunHistory* history_;
    HistoryPanel* history_panel_;
    bool job_complete_ = false;  // the latest job's both sides arrived: kept when it finishes
    ModelPanel* model_panel_;
    MethodPanel* method_panel_;
    ComparisonView* comparison_;
    Inspector* inspector_;
    PlotsPanel* plots_;
    MetricsModel* metrics_;
    QTableView* table_;
    ElidedLabel* status_model_;
    QProgressBar* progress_;
    QTimer debounce_;
    QAction* record_action_ = nullptr;
    QMenu* view_menu_ = nullptr;
    quint64 active_job_ = 0;  // latest submitted job still running (0 = idle)
    quint64 latest_job_ = 0;  // results of older jobs are ignored
    bool has_generated_ = false;
    bool sweeping_ = false;
    // The accelerators' sliders and the sweep's range follow the loaded model (and MAR's steps).
    void applyModelCounts();
    ModelInfo model_info_;
    Request job_request_;  // of the latest submitted job (the results on show: results_)
    // Models by key (ModelSource::key) that failed to load this session, and the last that
    // loaded (or was restored at start): what the settings remember as the model.
    std::set<std::string> failed_models_;
    std::optional<ModelSource> working_model_;
    QString export_dir_;
    int save_factor_ = 1;  // the last upscale factor chosen (saved with the settings)
    std::optional<Job> pending_analysis_;

    // --- the sweep view (issue #34; main_window_sweep.cpp) -------------------------------------
  public:
    SweepView* sweepView() const { return sweep_view_; }
    // Opens a sweep.json in the sweep view (and shows it); on failure the view keeps what it
    // showed, says why, and *error gets the message.
    bool openSweepResult(const QString& path, QString* error = nullptr);
    void openSweepResultDialog();
    // Point `index` of the sweep on show into the accelerator panel (as pasted settings are);
    // a sweep of another model is only noted (with "Load anyway") unless `otherModel`.
    bool loadSweepPoint(int index, bool otherModel = false);

  private:
    void buildSweepView();  // the dock, File ▸ Open sweep result…, View ▸ Sweep result
    SweepView* sweep_view_ = nullptr;
    QDockWidget* sweep_dock_ = nullptr;
};

}  // namespace varscope::gui
