#include "ui/main_window.h"

#include <qcustomplot.h>

#include <QAction>
#include <QApplication>
#include <QClipboard>
#include <QCloseEvent>
#include <QDateTime>
#include <QDir>
#include <QDockWidget>
#include <QDragEnterEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QHeaderView>
#include <QImageReader>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QProgressBar>
#include <QScrollArea>
#include <QScrollBar>
#include <QSettings>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTabWidget>
#include <QTableView>
#include <QToolBar>
#include <QVBoxLayout>
#include <algorithm>

#include "core/io/json_read.h"
#include "ui/attention_grid.h"
#include "ui/comparison_view.h"
#include "ui/elided_label.h"
#include "ui/history_panel.h"
#include "ui/input_guard.h"
#include "ui/inspector.h"
#include "ui/method_panel.h"
#include "ui/metrics_model.h"
#include "ui/model_panel.h"
#include "ui/plots_panel.h"
#include "ui/results_model.h"
#include "ui/run_history.h"
#include "ui/save_images_dialog.h"
#include "visualization/figure.h"
#include "visualization/heatmap_view.h"

namespace varscope::gui {
namespace {
// "cuda:0 · bf16": where the model runs and in which precision (status bar, figure notes).
QString deviceText(const ModelInfo& info) {
    QString t = QString::fromStdString(info.device);
    if (!info.precision.empty()) t += " · " + QString::fromStdString(info.precision);
    return t;
}
}  // namespace

MainWindow::MainWindow(GenerationWorker::Loader loader, QWidget* parent) : QMainWindow(parent) {
    // First, so that every widget is polished under its rules (wheel focus).
    new InputGuard(this);
    setWindowTitle(tr("VARScope"));
    setAcceptDrops(true);
    worker_ = new GenerationWorker(this);
    if (loader) worker_->setLoader(std::move(loader));

    results_ = new ResultsModel(this);
    comparison_ = new ComparisonView(this);
    comparison_->setResultsModel(results_);
    setCentralWidget(comparison_);

    // Left: model + methods in one scrollable column.
    model_panel_ = new ModelPanel(this);
    method_panel_ = new MethodPanel(this);
    auto* left = new QWidget(this);
    auto* lv = new QVBoxLayout(left);
    lv->setContentsMargins(2, 2, 2, 2);
    lv->addWidget(model_panel_);
    auto* methods_title = new QLabel(tr("<b>Accelerators</b>"), left);
    lv->addWidget(methods_title);
    lv->addWidget(method_panel_);
    lv->addStretch(1);
    auto* scroll = new QScrollArea(this);
    scroll->setWidget(left);
    scroll->setWidgetResizable(true);
    // Narrower than its contents (the dock shrinks for the images), the column scrolls
    // sideways instead of cutting its text.
    scroll->setObjectName("settingsScroll");
    auto* left_dock = new QDockWidget(tr("Model and accelerators"), this);
    left_dock->setObjectName("leftDock");
    left_dock->setWidget(scroll);
    left_dock->setMinimumWidth(240);  // shrinkable: the images need the width more
    addDockWidget(Qt::LeftDockWidgetArea, left_dock);

    inspector_ = new Inspector(this);
    auto* right_dock = new QDockWidget(tr("Inspector"), this);
    right_dock->setObjectName("inspectorDock");
    right_dock->setWidget(inspector_);
    addDockWidget(Qt::RightDockWidgetArea, right_dock);

    // The history of finished runs, a tab beside the inspector.
    {
        QSettings s;
        const QString dir = s.value("historyDir").toString();
        history_ = new RunHistory(
            dir.isEmpty()
                ? QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + "/history"
                : dir,
            s.value("historyMaxEntries", 100).toInt(), this);
    }
    history_panel_ = new HistoryPanel(this);
    history_panel_->setHistory(history_);
    auto* history_dock = new QDockWidget(tr("History"), this);
    history_dock->setObjectName("historyDock");
    history_dock->setWidget(history_panel_);
    addDockWidget(Qt::RightDockWidgetArea, history_dock);
    tabifyDockWidget(right_dock, history_dock);
    right_dock->raise();
    connect(history_panel_, &HistoryPanel::restoreRequested, this, [this](const QString& id) {
        const HistoryEntry* e = history_->find(id);
        if (!e) return;
        try {
            Request r = Request::from_json(e->settings);
            applyRecording(r);
            applyRequest(r, true);
        } catch (const std::exception& ex) {
            statusBar()->showMessage(
                tr("Cannot restore that run: %1").arg(QString::fromUtf8(ex.what())), 6000);
        }
    });
    connect(history_panel_, &HistoryPanel::showRequested, this, [this](const QString& id) {
        QString note;
        const auto [base, accel] = history_->storedRun(id, &note);
        const HistoryEntry* e = history_->find(id);
        if (!base || !e) return;
        Request req;
        try {
            req = Request::from_json(e->settings);
        } catch (const std::exception&) {
        }
        // Its two sides ran together: the metrics line's speedup is the run's own.
        RunPair pair;
        pair.one_run = true;
        const QString when = e->time.toString("yyyy-MM-dd HH:mm:ss");
        pair.left_label =
            tr("Baseline · run of %1 · %2 ms").arg(when).arg(base->run.total_ms, 0, 'f', 1);
        if (accel)
            pair.right_label = tr("%1 · run of %2 · %3 ms")
                                   .arg(e->methods, when)
                                   .arg(accel->run.total_ms, 0, 'f', 1);
        pair.note = note;
        results_->setPair(base, accel, req, pair);
        if (!note.isEmpty()) statusBar()->showMessage(note, 8000);
    });
    connect(history_panel_, &HistoryPanel::compareRequested, this,
            [this](const QString& left, const QString& right) {
                QString left_note, right_note;
                const SideResultPtr l = history_->sideResult(left, Side::Baseline, &left_note);
                const SideResultPtr r = history_->sideResult(right, Side::Accelerated, &right_note);
                if (!l || !r) return;
                Request req;
                try {
                    req = Request::from_json(history_->find(left)->settings);
                } catch (const std::exception&) {
                }
                // Neither side is a baseline: the captions and the plots name the runs, A
                // (left) and B (right), as the metrics line's ratio of their times does.
                const HistoryEntry* a = history_->find(left);
                const HistoryEntry* b = history_->find(right);
                auto label = [this](const QString& ab, const HistoryEntry* e,
                                    const SideResultPtr& side) {
                    return tr("%1 · run of %2 · seed %3 · %4 · %5 ms")
                        .arg(ab, e->time.toString("yyyy-MM-dd HH:mm:ss"))
                        .arg(e->settings.value("seed", uint64_t(0)))
                        .arg(e->methods)
                        .arg(side->run.total_ms, 0, 'f', 1);
                };
                auto name = [](const QString& ab, const HistoryEntry* e) {
                    return tr("%1 (%2)").arg(ab, e->time.toString("HH:mm:ss"));
                };
                RunPair pair;
                pair.left_label = label("A", a, l);
                pair.right_label = label("B", b, r);
                pair.left_name = name("A", a);
                pair.right_name = name("B", b);
                pair.left_time = a->time;
                pair.right_time = b->time;
                QStringList notes;
                if (!left_note.isEmpty()) notes << tr("Run A: %1").arg(left_note);
                if (!right_note.isEmpty()) notes << tr("Run B: %1").arg(right_note);
                pair.note = notes.join('\n');
                results_->setPair(l, r, req, pair);
                if (!pair.note.isEmpty()) statusBar()->showMessage(notes.join(" · "), 8000);
            });

    plots_ = new PlotsPanel(this);
    metrics_ = new MetricsModel(this);
    table_ = new QTableView(this);
    table_->setModel(metrics_);
    table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    table_->verticalHeader()->hide();
    auto* bottom_tabs = new QTabWidget(this);
    bottom_tabs->addTab(plots_, tr("Plots"));
    bottom_tabs->addTab(table_, tr("Per-scale table"));
    auto* bottom_dock = new QDockWidget(tr("Plots"), this);
    bottom_dock->setObjectName("plotsDock");
    bottom_dock->setWidget(bottom_tabs);
    addDockWidget(Qt::BottomDockWidgetArea, bottom_dock);

    status_model_ = new ElidedLabel(this);
    status_model_->setObjectName("statusModel");
    status_model_->setFullText(tr("No model loaded"));
    progress_ = new QProgressBar(this);
    progress_->setMaximumWidth(220);
    progress_->setTextVisible(true);
    progress_->hide();
    statusBar()->addWidget(status_model_, 1);
    statusBar()->addPermanentWidget(progress_);

    buildActions();
    QMenu* view = view_menu_;
    for (auto* d : {left_dock, right_dock, history_dock, bottom_dock})
        view->addAction(d->toggleViewAction());
    buildSweepView();
    view->addSeparator();
    record_action_ = view->addAction(tr("Record for the inspector"));
    record_action_->setObjectName("recordInspector");
    record_action_->setCheckable(true);
    record_action_->setChecked(true);
    record_action_->setToolTip(
        tr("Record attention maps and accelerator records for the inspector. Recording runs the "
           "steps eagerly on CUDA; off, both sides replay CUDA graphs (full speed)."));
    connect(record_action_, &QAction::toggled, this, [this](bool on) {
        inspector_->setRecording(on);
        if (has_generated_) debounce_.start();
    });

    // Debounced re-run: sliders emit continuously; only the last value is generated.
    debounce_.setSingleShot(true);
    debounce_.setInterval(300);
    connect(&debounce_, &QTimer::timeout, this, &MainWindow::generate);
    connect(method_panel_, &MethodPanel::configChanged, this, [this] {
        if (has_generated_) debounce_.start();
    });
    connect(model_panel_, &ModelPanel::settingsChanged, this, [this] {
        applyModelCounts();  // MAR's step count bounds LazyMAR's steps
        if (has_generated_) debounce_.start();
    });
    connect(model_panel_, &ModelPanel::modelChanged, this, [this] {
        // The family's controls follow at once (embedded models); files: once loaded.
        showFamily(model_panel_->family());
        results_->clear();
        if (has_generated_) debounce_.start();
    });
    connect(model_panel_, &ModelPanel::recentFilesChanged, this, &MainWindow::writeSettings);
    connect(model_panel_, &ModelPanel::runRequested, this, &MainWindow::generate);
    connect(inspector_, &Inspector::attentionLayerRequested, this, [this] {
        if (has_generated_) debounce_.start();
    });
    connect(inspector_, &Inspector::analysisRequested, this, &MainWindow::requestAnalysis);
    connect(worker_, &GenerationWorker::analysisFinished, this,
            [this](quint64, AnalysisResultPtr r) { inspector_->grid()->setAnalysis(r); });
    connect(worker_, &GenerationWorker::analysisFailed, this,
            [this](quint64, QString key, QString message, bool) {
                inspector_->grid()->setAnalysisFailed(key, message);
            });
    connect(comparison_, &ComparisonView::scaleSelected, inspector_, &Inspector::setScale);
    connect(comparison_, &ComparisonView::saveImageRequested, this,
            [this](std::optional<SavedImage> which) { saveImagesDialog(which); });
    connect(plots_, &PlotsPanel::sweepRequested, this, &MainWindow::runSweep);
    connect(results_, &ResultsModel::changed, this, &MainWindow::showResults);

    // Worker signals (queued: they come from the worker thread).
    connect(worker_, &GenerationWorker::modelLoaded, this, [this](quint64 job, ModelInfo info) {
        if (job == latest_job_) {
            working_model_ = job_request_.model;
            failed_models_.erase(job_request_.model.key());
        }
        model_info_ = info;
        model_panel_->setClassList(QString::fromStdString(info.class_list_path),
                                   int(info.num_classes));
        model_panel_->setLoadedModel(info);
        inspector_->setModel(int(info.depth), int(info.num_heads));
        showFamily(info.family);
        applyModelCounts();
        status_model_->setFullText(QString::fromStdString(info.description).replace('\n', " · ") +
                                   " · " + deviceText(info));
    });
    connect(worker_, &GenerationWorker::modelFailed, this, [this](quint64 job, QString msg) {
        if (job != latest_job_) return;
        // Not remembered as the last model (writeSettings), and nothing of the model before
        // stays on show as if it were this one's.
        failed_models_.insert(job_request_.model.key());
        results_->clear();
        status_model_->setFullText(
            tr("No model loaded: %1 could not be loaded")
                .arg(QString::fromStdString(job_request_.model.display_name())));
        comparison_->clearBusy();
        comparison_->setSideMessage(Side::Baseline, tr("The model could not be loaded."));
        QMessageBox::critical(this, tr("Could not load the model"), msg);
    });
    connect(worker_, &GenerationWorker::progress, this,
            [this](quint64 job, int side, int scale, int scales) {
                if (job != latest_job_) return;
                comparison_->setProgress(Side(side), scale, scales);
                progress_->setRange(0, scales);
                progress_->setValue(scale + 1);
                progress_->setFormat((side == 0 ? tr("baseline") : tr("accelerated")) + " %v/%m");
                progress_->show();
            });
    connect(worker_, &GenerationWorker::preview, this,
            [this](quint64 job, int side, int, QImage image) {
                if (job == latest_job_) comparison_->setPreview(Side(side), image);
            });
    connect(worker_, &GenerationWorker::sideFinished, this, [this](quint64 job, SideResultPtr r) {
        if (job != latest_job_) return;
        if (sweeping_ && r->side == Side::Accelerated) return;
        if (r->side == Side::Accelerated) method_panel_->setRuntimeError({});
        results_->setSide(r, job_request_);
        if (!r->run.notices.empty()) {
            QStringList notes;
            for (const auto& n : r->run.notices) notes << QString::fromStdString(n);
            statusBar()->showMessage(notes.join(" · "), 10000);
        }
        if (r->side == Side::Accelerated) job_complete_ = true;  // both sides of this job shown
    });
    connect(worker_, &GenerationWorker::sideFailed, this,
            [this](quint64 job, int side, QString msg, bool cancelled) {
                if (job != latest_job_) return;
                comparison_->clearBusy();
                if (cancelled) {
                    statusBar()->showMessage(tr("Cancelled"), 4000);
                    if (sweeping_) return;  // its runs are not on show; the results stay
                    // The inspector's tabs say the run was cancelled, not "enable …".
                    if (side == int(Side::Accelerated) || !results_->baseline())
                        inspector_->setAcceleratedMissing("cancelled");
                    if (side == int(Side::Accelerated)) results_->clearSide(Side::Accelerated);
                    if (side == int(Side::Accelerated) || !results_->baseline())
                        comparison_->setSideMessage(Side(side), tr("Cancelled"));
                    else  // the cancelled run's previews give way to the results on show
                        comparison_->showModel();
                    return;
                }
                if (side == int(Side::Accelerated)) {
                    inspector_->setAcceleratedMissing(msg);
                    // Shown in place (sliders would otherwise raise a dialog per move).
                    method_panel_->setRuntimeError(tr("Accelerated run failed: %1").arg(msg));
                    results_->clearSide(Side::Accelerated);
                    comparison_->setSideMessage(Side::Accelerated,
                                                tr("Accelerated run failed:\n%1").arg(msg));
                    statusBar()->showMessage(tr("Accelerated run failed: %1").arg(msg), 8000);
                } else {
                    comparison_->setSideMessage(Side::Baseline, tr("Generation failed."));
                    QMessageBox::critical(this, tr("Generation failed"), msg);
                }
            });
    connect(worker_, &GenerationWorker::sweepPoint, this, [this](quint64 job, SweepPoint p) {
        if (job == latest_job_) plots_->addSweepPoint(p);
    });
    connect(worker_, &GenerationWorker::jobFinished, this, [this](quint64 job) {
        if (job != latest_job_) return;
        active_job_ = 0;
        progress_->hide();
        if (job_complete_) {  // a finished comparison (not a sweep, not cancelled) is kept
            job_complete_ = false;
            QString error;
            if (history_->add(*results_, &error).isEmpty())
                statusBar()->showMessage(tr("Not kept in the history: %1").arg(error), 6000);
        }
        if (sweeping_) {
            sweeping_ = false;
            plots_->setSweepRunning(false);
            // The sweep's runs drew their previews and badges over the accelerated image.
            comparison_->showModel();
        }
        if (pending_analysis_) {
            Job next = std::move(*pending_analysis_);
            pending_analysis_.reset();
            submitAnalysis(std::move(next));
        }
        emit jobFinished();
    });

    readSettings();
}

MainWindow::~MainWindow() = default;

void MainWindow::buildActions() {
    // Menus in the usual order: File | Edit | View | Help (View is filled by the constructor).
    QMenu* file = menuBar()->addMenu(tr("&File"));
    QMenu* edit = menuBar()->addMenu(tr("&Edit"));
    view_menu_ = menuBar()->addMenu(tr("&View"));
    QToolBar* tb = addToolBar(tr("Main"));
    tb->setObjectName("mainToolBar");
    tb->setToolButtonStyle(Qt::ToolButtonTextBesideIcon);
    auto add = [&](const QString& text, const QList<QKeySequence>& keys, auto slot, bool toolbar,
                   QStyle::StandardPixmap icon = QStyle::SP_CustomBase) {
        auto* a = new QAction(text, this);
        a->setShortcuts(keys);
        if (!keys.isEmpty())
            a->setToolTip(text + " (" + keys.front().toString(QKeySequence::NativeText) + ")");
        if (icon != QStyle::SP_CustomBase) a->setIcon(style()->standardIcon(icon));
        connect(a, &QAction::triggered, this, slot);
        addAction(a);  // the window's shortcuts (InputGuard keeps them working in every widget)
        if (toolbar) tb->addAction(a);
        return a;
    };
    auto* gen =
        add(tr("Generate"),
            {QKeySequence(Qt::CTRL | Qt::Key_Return), QKeySequence(Qt::CTRL | Qt::Key_Enter)},
            &MainWindow::generate, true, QStyle::SP_MediaPlay);
    gen->setObjectName("generateAction");
    auto* cancel = add(tr("Cancel"), {QKeySequence(Qt::Key_Escape)}, &MainWindow::cancel, true,
                       QStyle::SP_MediaStop);
    tb->addSeparator();
    auto* dice = add(
        tr("Random seed"), {QKeySequence(Qt::CTRL | Qt::Key_R)},
        [this] { model_panel_->rollDice(); }, false);
    edit->addAction(gen);
    edit->addAction(cancel);
    edit->addAction(dice);
    // The prompt from anywhere (as a browser's address bar): type, Enter runs.
    auto* focus_prompt = add(
        tr("Go to the prompt"), {QKeySequence(Qt::CTRL | Qt::Key_L)},
        [this] {
            model_panel_->promptEdit()->setFocus(Qt::ShortcutFocusReason);
            model_panel_->promptEdit()->selectAll();
        },
        false);
    focus_prompt->setObjectName("focusPromptAction");
    edit->addAction(focus_prompt);
    edit->addSeparator();
    edit->addAction(add(
        tr("Copy settings"), {QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_C)},
        [this] {
            QGuiApplication::clipboard()->setText(
                QString::fromStdString(currentRequest().to_json().dump(2)));
            statusBar()->showMessage(tr("Settings copied as JSON"), 4000);
        },
        false));
    edit->addAction(add(
        tr("Paste settings"), {QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_V)},
        [this] {
            try {
                Request r = Request::from_json(
                    nlohmann::json::parse(QGuiApplication::clipboard()->text().toStdString()));
                applyRecording(r);
                applyRequest(r, true);
            } catch (const std::exception& e) {
                statusBar()->showMessage(tr("The clipboard holds no VARScope settings: %1")
                                             .arg(QString::fromUtf8(e.what())),
                                         6000);
            }
        },
        false));
    auto* open = add(
        tr("Open checkpoints…"), QKeySequence::keyBindings(QKeySequence::Open),
        [this] { model_panel_->openCheckpoints(); }, false);
    open->setStatusTip(tr("Drop a VARScope PNG on the window to restore its settings"));
    file->addAction(open);
    file->addSeparator();
    auto* fig = add(tr("Export comparison figure…"), {QKeySequence(Qt::CTRL | Qt::Key_E)},
                    &MainWindow::exportFigureDialog, true, QStyle::SP_DialogSaveButton);
    fig->setObjectName("exportFigureAction");
    file->addAction(fig);
    file->addAction(add(tr("Export metrics (CSV/JSON)…"),
                        {QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_E)},
                        &MainWindow::exportMetricsDialog, false));
    auto* save = add(tr("Save accelerated image…"), QKeySequence::keyBindings(QKeySequence::Save),
                     &MainWindow::saveImageDialog, false);
    save->setObjectName("saveImageAction");
    file->addAction(save);
    auto* save_all = add(
        tr("Save images…"), {QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_S)},
        [this] { saveImagesDialog(); }, false);
    save_all->setObjectName("saveImagesAction");
    save_all->setStatusTip(
        tr("Baseline, accelerated image and difference map at native size or upscaled"));
    file->addAction(save_all);
    file->addSeparator();
    file->addAction(add(
        tr("Quit"), QKeySequence::keyBindings(QKeySequence::Quit), [this] { close(); }, false));
    QMenu* help = menuBar()->addMenu(tr("&Help"));
    help->addAction(tr("Keyboard shortcuts"), this, [this] {
        QMessageBox::information(
            this, tr("Keyboard shortcuts"),
            tr("Ctrl+Enter  generate\nEsc  cancel\nCtrl+R  random seed\nCtrl+L  go to the "
               "prompt\nCtrl+O  open checkpoints\n"
               "Ctrl+E  export comparison figure\nCtrl+Shift+E  export metrics\nCtrl+S  save "
               "accelerated image\nCtrl+Shift+S  save images (native or upscaled)\nCtrl+Shift+C / "
               "Ctrl+Shift+V  copy / paste the settings\n"
               "D  toggle difference view\nWheel / drag / double-click  zoom / pan / fit\n"
               "The wheel changes a setting only after a click on it.\n\n"
               "Drop a PNG exported by VARScope on the window to restore its settings."));
    });
}

bool MainWindow::needResults(const QString& what) {
    if (results_->baseline()) return true;
    statusBar()->showMessage(tr("Nothing to %1 yet: generate first (Ctrl+Enter).").arg(what), 5000);
    return false;
}

Request MainWindow::currentRequest() const {
    Request r;
    r.model = model_panel_->modelSource();
    r.prompt = model_panel_->prompt();
    r.gen = model_panel_->sampling();
    applyRecording(r);
    r.gen.filmstrip = true;
    r.accel = method_panel_->config();
    return r;
}

void MainWindow::applyRecording(Request& r) const {
    const bool record = record_action_->isChecked();
    r.gen.attention_layer = record ? inspector_->attention()->layer() : -1;
    r.gen.accel_records = record;
}

void MainWindow::showFamily(Family f) {
    method_panel_->setFamily(f);
    plots_->setFamily(f);
    comparison_->setFamily(f);
    inspector_->setFamily(f);
}

void MainWindow::applyRequest(const Request& r, bool generateNow) {
    const bool was = has_generated_;
    has_generated_ = false;  // no debounced runs while the panels are being filled
    model_panel_->applyRequest(r);
    // Before the accelerators: a MAR request's LazyMAR settings (and --preset lazymar after a
    // restored MAR session) need MAR's accelerator panel, not the one of the model shown before.
    showFamily(model_panel_->family());
    method_panel_->setConfig(r.accel);
    has_generated_ = was;
    debounce_.stop();
    if (generateNow) generate();
}

void MainWindow::generate() {
    debounce_.stop();
    if (!method_panel_->valid()) {
        statusBar()->showMessage(
            tr("Fix the accelerator settings first: %1").arg(method_panel_->validationError()),
            6000);
        return;
    }
    Job job;
    job.request = currentRequest();
    job_request_ = job.request;
    job_complete_ = false;
    has_generated_ = true;
    pending_analysis_.reset();  // of the run this one replaces
    // A run of another family: the previous family's images, plots and records go at once.
    const SideResultPtr shown =
        results_->baseline() ? results_->baseline() : results_->accelerated();
    if (shown && shown->run.family != model_panel_->family()) results_->clear();
    inspector_->setAcceleratedMissing({});  // the last run's cancel or failure is not this one's
    comparison_->markStale();
    latest_job_ = active_job_ = worker_->submit(std::move(job));
}

void MainWindow::runSweep(const QString& method, const QString& param,
                          const std::vector<double>& values) {
    // The sweep is the latest request: a debounced re-run still pending (a slider or bound that
    // changed just before) would supersede it mid-way and drop its remaining points.
    debounce_.stop();
    Job job;
    job.type = Job::Type::Sweep;
    job.request = currentRequest();
    job.sweep_method = method.toStdString();
    job.sweep_param = param.toStdString();
    job.sweep_values = values;
    job_request_ = job.request;
    pending_analysis_.reset();
    job_complete_ = false;
    plots_->clearSweep();
    plots_->setSweepRunning(true);
    sweeping_ = true;
    latest_job_ = active_job_ = worker_->submit(std::move(job));
}

void MainWindow::cancel() {
    debounce_.stop();
    worker_->cancel();
}

void MainWindow::requestAnalysis(const QString& key, const QString& method_json) {
    if (results_->empty()) return;
    Job job;
    job.type = Job::Type::Analyze;
    job.request = results_->request();
    try {
        job.request.accel = nlohmann::json::parse(method_json.toStdString());
    } catch (const std::exception& e) {
        inspector_->grid()->setAnalysisFailed(key, QString::fromUtf8(e.what()));
        return;
    }
    job.analysis_key = key.toStdString();
    if (busy())
        pending_analysis_ = std::move(job);
    else
        submitAnalysis(std::move(job));
}

void MainWindow::submitAnalysis(Job job) {
    latest_job_ = active_job_ = worker_->submit(std::move(job));
}

void MainWindow::showResults() {
    const auto base = results_->baseline(), accel = results_->accelerated();
    inspector_->setRequest(results_->request(), !results_->label(Side::Baseline).isEmpty(),
                           results_->pair().one_run);
    inspector_->setResults(base, accel);
    inspector_->setRun(results_->empty() ? std::nullopt
                                         : std::optional<Request>(results_->request()));
    const RunPair& pair = results_->pair();
    plots_->setResults(base, accel, pair.left_name, pair.right_name, pair.note);
    metrics_->setResults(base, accel);
    status_model_->setDetails(base ? QString::fromStdString(results_->request().to_json().dump(2))
                                   : QString());
    emit resultsUpdated();
}

// --- export ----------------------------------------------------------------------------------

bool MainWindow::confirmOverwrite(const QString& path) {
    return !QFileInfo::exists(path) ||
           QMessageBox::question(this, tr("File exists"),
                                 tr("%1 exists. Overwrite it?").arg(path)) == QMessageBox::Yes;
}

QString MainWindow::defaultExportName(const QString& suffix) const {
    const QString dir = export_dir_.isEmpty() ? QDir::homePath() : export_dir_;
    return QDir(dir).filePath(QStringLiteral("varscope-class%1-seed%2.%3")
                                  .arg(results_->request().gen.class_id)
                                  .arg(results_->request().gen.seed)
                                  .arg(suffix));
}

QStringList MainWindow::figureNotes() const {
    const Request& r = results_->request();
    QStringList notes;
    notes << tr("Model: %1 (%2)")
                 .arg(QString::fromStdString(r.model.display_name()),
                      QString::fromStdString(model_info_.description).section('\n', 0, 0));
    const QString name = model_panel_->className(r.gen.class_id);
    // The settings that shaped this image: VAR samples tokens with top-k/top-p; MAR decodes in
    // steps on a CFG schedule, with a diffusion head at a temperature and a respacing.
    const QString sampling =
        model_info_.family == Family::Mar
            ? tr("%1 steps · CFG %2 (%3) · temperature %4 · %5 diffusion steps")
                  .arg(r.gen.num_iter)
                  .arg(r.gen.cfg)
                  .arg(QString::fromStdString(r.gen.cfg_schedule))
                  .arg(r.gen.temperature)
                  .arg(QString::fromStdString(model_info_.diffusion_steps))
            : tr("CFG %1 · top-k %2 · top-p %3").arg(r.gen.cfg).arg(r.gen.top_k).arg(r.gen.top_p);
    if (model_info_.text_to_image())
        notes << tr("Prompt \"%1\" · seed %2 · %3 · device %4")
                     .arg(QString::fromStdString(r.gen.prompt))
                     .arg(r.gen.seed)
                     .arg(sampling, deviceText(model_info_));
    else
        notes << tr("Class %1 %2 · seed %3 · %4 · device %5")
                     .arg(r.gen.class_id)
                     .arg(name.isEmpty() ? QString() : "(" + name + ")")
                     .arg(r.gen.seed)
                     .arg(sampling, deviceText(model_info_));
    nlohmann::json enabled = nlohmann::json::object();
    for (const auto& [id, m] : r.accel.items())
        if (m.is_object() && m.value("enabled", false)) enabled[id] = m;
    notes << tr("Accelerators: %1")
                 .arg(enabled.empty() ? tr("none") : QString::fromStdString(enabled.dump()));
    notes << tr("Metrics: %1").arg(results_->metrics().text());
    notes << tr("VARScope · %1").arg(QDateTime::currentDateTime().toString(Qt::ISODate));
    return notes;
}

bool MainWindow::exportFigure(const ExportOptions& o, QString* error, bool overwrite) {
    const auto base = results_->baseline(), accel = results_->accelerated();
    if (!base) {
        if (error) *error = tr("Nothing to export yet: generate first.");
        return false;
    }
    if (!overwrite && QFileInfo::exists(o.path)) {
        if (error) *error = tr("%1 exists").arg(o.path);
        return false;
    }
    viz::Figure f;
    f.title = o.title.isEmpty() ? tr("VARScope comparison") : o.title;
    if (o.baseline)
        f.panels.push_back(
            {base->image, tr("Baseline · %1 ms").arg(base->run.total_ms, 0, 'f', 1)});
    if (o.accelerated && accel) f.panels.push_back({accel->image, acceleratedCaption(*accel)});
    if (o.difference && !results_->differenceImage().isNull())
        f.panels.push_back({results_->differenceImage(),
                            tr("|accelerated − baseline| (0 … %1)").arg(ResultsModel::kDiffMax)});
    if (o.attention && inspector_->attention()->view()->hasData())
        // Rendered at a fixed size: a grab of a wide dock shrank its text to ~3 pt in the cell.
        f.panels.push_back({inspector_->attention()->view()->render(Inspector::kFigurePanelSize),
                            tr("Attention")});
    if (o.inspector && inspector_->currentWidget() != inspector_->attention()) {
        const QImage img = inspector_->currentPanelImage();
        if (!img.isNull()) f.panels.push_back({img, inspector_->currentPanelTitle()});
    }
    if (o.plots)
        f.panels.push_back(
            {plots_->latencyPlot()->toPixmap(480, 360).toImage(), tr("Latency per scale")});
    if (o.plots && !plots_->workPlot()->isHidden() && plots_->workPlot()->graphCount() > 0 &&
        plots_->workPlot()->graph(0)->dataCount() > 0)
        f.panels.push_back(
            {plots_->workPlot()->toPixmap(480, 360).toImage(), tr("Work and time per scale")});
    f.notes = figureNotes();
    f.columns = std::min<int>(3, std::max<int>(1, int(f.panels.size())));
    QMap<QString, QString> text;
    text[kSettingsTextKey] = QString::fromStdString(results_->request().to_json().dump());
    text["Software"] = "VARScope";
    return viz::write_figure(f, o.path, text, error);
}

bool MainWindow::exportMetrics(const QString& path, QString* error, bool overwrite) {
    if (!results_->baseline()) {
        if (error) *error = tr("Nothing to export yet: generate first.");
        return false;
    }
    if (!overwrite && QFileInfo::exists(path)) {
        if (error) *error = tr("%1 exists").arg(path);
        return false;
    }
    if (QFileInfo(path).suffix().toLower() == "csv")
        return viz::write_text_file(path, metrics_->toCsv(), error);
    const auto& m = results_->metrics();
    nlohmann::json summary = {{"settings", results_->request().to_json()},
                              {"model", model_info_.description},
                              {"device", model_info_.device},
                              {"precision", model_info_.precision}};
    if (m.valid)
        summary["comparison"] = {
            {"psnr_db", std::isinf(m.psnr) ? nlohmann::json("inf") : nlohmann::json(m.psnr)},
            {"ssim", m.ssim},
            {"speedup", m.speedup},
            {"baseline_ms", m.base_ms},
            {"accelerated_ms", m.accel_ms},
            // Wall time the tool added (previews, probe records, graph capture): not in the above.
            {"baseline_overhead_ms", m.base_overhead_ms},
            {"accelerated_overhead_ms", m.accel_overhead_ms},
            {"baseline_kv_bytes", m.base_kv},
            {"accelerated_kv_bytes", m.accel_kv},
            // Times compare only alike: CUDA graph replays or eager steps, per side.
            {"baseline_cuda_graphs", m.base_graphs},
            {"accelerated_cuda_graphs", m.accel_graphs}};
    return viz::write_text_file(path, metrics_->toJson(summary), error);
}

bool MainWindow::saveImage(Side side, const QString& path, QString* error, bool overwrite) {
    const auto r = results_->side(side);
    if (!r) {
        if (error) *error = tr("Nothing to save yet: generate first.");
        return false;
    }
    if (!overwrite && QFileInfo::exists(path)) {
        if (error) *error = tr("%1 exists").arg(path);
        return false;
    }
    QMap<QString, QString> text;
    text[kSettingsTextKey] = QString::fromStdString(results_->request().to_json().dump());
    return viz::write_image(r->image, path, text, error);
}

void MainWindow::exportFigureDialog() {
    if (!needResults(tr("export"))) return;
    ExportOptions o;
    o.title = tr("VARScope: %1")
                  .arg(results_->accelerated()
                           ? QString::fromStdString(results_->accelerated()->run.accel_summary)
                           : tr("baseline"));
    o.path = defaultExportName("png");
    ExportDialog dlg(o, inspector_->currentPanelTitle(), this);
    if (dlg.exec() != QDialog::Accepted) return;
    o = dlg.options();
    export_dir_ = QFileInfo(o.path).path();
    QString error;
    if (!exportFigure(o, &error, true))  // the dialog asked before overwriting
        QMessageBox::critical(this, tr("Export failed"), error);
    else
        statusBar()->showMessage(tr("Wrote %1").arg(o.path), 5000);
}

void MainWindow::exportMetricsDialog() {
    if (!needResults(tr("export"))) return;
    const QString path = QFileDialog::getSaveFileName(
        this, tr("Export metrics"), defaultExportName("csv"), tr("CSV (*.csv);;JSON (*.json)"),
        nullptr, QFileDialog::DontConfirmOverwrite);
    if (path.isEmpty() || !confirmOverwrite(path)) return;
    export_dir_ = QFileInfo(path).path();
    QString error;
    if (!exportMetrics(path, &error, true)) QMessageBox::critical(this, tr("Export failed"), error);
}

void MainWindow::saveImageDialog() {
    if (!needResults(tr("save"))) return;
    const QString path =
        QFileDialog::getSaveFileName(this, tr("Save accelerated image"), defaultExportName("png"),
                                     tr("PNG (*.png)"), nullptr, QFileDialog::DontConfirmOverwrite);
    if (path.isEmpty() || !confirmOverwrite(path)) return;
    export_dir_ = QFileInfo(path).path();
    QString error;
    if (!saveImage(results_->accelerated() ? Side::Accelerated : Side::Baseline, path, &error,
                   true))
        QMessageBox::critical(this, tr("Save failed"), error);
}

QString MainWindow::savedImageName(SavedImage which, int factor) const {
    const auto accel = results_->accelerated();
    return savedImageFileName(which, results_->request(),
                              accel ? QString::fromStdString(accel->run.accel_summary) : QString(),
                              factor);
}

bool MainWindow::saveImages(const SaveImagesOptions& o, QString* error, bool overwrite,
                            QStringList* written) {
    if (!results_->baseline() && !results_->accelerated()) {
        if (error) *error = tr("Nothing to save yet: generate first.");
        return false;
    }
    if (o.folder.isEmpty()) {
        if (error) *error = tr("Choose a folder to save the images in.");
        return false;
    }
    std::vector<ImageFile> files;
    auto add = [&](bool wanted, SavedImage which, const QImage& image, const QString& missing) {
        if (!wanted) return true;
        if (image.isNull()) {
            if (error) *error = missing;
            return false;
        }
        files.push_back({QDir(o.folder).filePath(savedImageName(which, o.factor)), image});
        return true;
    };
    const auto base = results_->baseline(), accel = results_->accelerated();
    if (!add(o.baseline, SavedImage::Baseline, base ? base->image : QImage(),
             tr("No baseline image on show.")) ||
        !add(o.accelerated, SavedImage::Accelerated, accel ? accel->image : QImage(),
             tr("No accelerated image on show.")) ||
        !add(o.difference, SavedImage::Difference, results_->differenceImage(),
             tr("No difference map on show (it needs both images).")))
        return false;
    QMap<QString, QString> text;
    text[kSettingsTextKey] = QString::fromStdString(results_->request().to_json().dump());
    text["Software"] = "VARScope";
    if (!writeImagesAtomically(files, o.factor, text, overwrite, error)) return false;
    if (written) {
        written->clear();
        for (const auto& f : files) *written << f.path;
    }
    return true;
}

void MainWindow::saveImagesDialog(std::optional<SavedImage> only) {
    if (!needResults(tr("save"))) return;
    std::vector<SavedImage> available;
    if (results_->baseline()) available.push_back(SavedImage::Baseline);
    if (results_->accelerated() && !results_->accelerated()->same_as_baseline)
        available.push_back(SavedImage::Accelerated);
    if (!results_->differenceImage().isNull()) available.push_back(SavedImage::Difference);
    SaveImagesOptions o;
    o.baseline = !only || *only == SavedImage::Baseline;
    o.accelerated = !only || *only == SavedImage::Accelerated;
    o.difference = only && *only == SavedImage::Difference;
    o.factor = save_factor_;
    o.folder = export_dir_.isEmpty() ? QDir::homePath() : export_dir_;
    const QImage& shown =
        results_->baseline() ? results_->baseline()->image : results_->accelerated()->image;
    SaveImagesDialog dlg(
        o, available, shown.size(), [this](SavedImage s, int f) { return savedImageName(s, f); },
        this);
    while (dlg.exec() == QDialog::Accepted) {
        o = dlg.options();
        QStringList existing;
        for (auto [wanted, which] : {std::pair{o.baseline, SavedImage::Baseline},
                                     {o.accelerated, SavedImage::Accelerated},
                                     {o.difference, SavedImage::Difference}})
            if (wanted &&
                QFileInfo::exists(QDir(o.folder).filePath(savedImageName(which, o.factor))))
                existing << savedImageName(which, o.factor);
        if (!existing.isEmpty() &&
            QMessageBox::question(
                this, tr("Files exist"),
                tr("In %1:\n%2\nOverwrite them?").arg(o.folder, existing.join('\n'))) !=
                QMessageBox::Yes)
            continue;
        QString error;
        QStringList written;
        if (!saveImages(o, &error, true, &written)) {
            QMessageBox::critical(this, tr("Save failed"), error);
            continue;  // the dialog again, to pick another folder
        }
        export_dir_ = o.folder;
        save_factor_ = o.factor;
        statusBar()->showMessage(
            tr("Wrote %n image(s) to %1", nullptr, int(written.size())).arg(o.folder), 6000);
        return;
    }
}

bool MainWindow::restoreFromPng(const QString& path, QString* error) {
    QImageReader reader(path);
    const QString text = reader.text(kSettingsTextKey);
    if (text.isEmpty()) {
        if (error) *error = tr("%1 carries no VARScope settings").arg(path);
        return false;
    }
    try {
        Request r = Request::from_json(parse_json(text.toStdString(), "the settings chunk"));
        applyRecording(r);
        applyRequest(r, true);
        statusBar()->showMessage(tr("Settings restored from %1").arg(QFileInfo(path).fileName()),
                                 5000);
        return true;
    } catch (const std::exception& e) {
        if (error) *error = tr("%1: %2").arg(path, QString::fromStdString(e.what()));
        return false;
    }
}

void MainWindow::dragEnterEvent(QDragEnterEvent* e) {
    if (e->mimeData()->hasUrls())
        for (const QUrl& u : e->mimeData()->urls())
            if (u.isLocalFile() && (u.toLocalFile().endsWith(".png", Qt::CaseInsensitive) ||
                                    u.toLocalFile().endsWith(".json", Qt::CaseInsensitive))) {
                e->acceptProposedAction();
                return;
            }
}

// A PNG restores its settings; a JSON file is taken for a sweep result (its tab says why not).
void MainWindow::dropEvent(QDropEvent* e) {
    for (const QUrl& u : e->mimeData()->urls()) {
        if (!u.isLocalFile()) continue;
        const QString path = u.toLocalFile();
        if (path.endsWith(".json", Qt::CaseInsensitive)) {
            openSweepResult(path);
            return;
        }
        QString error;
        if (restoreFromPng(path, &error)) return;
        QMessageBox::warning(this, tr("Cannot restore settings"), error);
    }
}

// --- settings --------------------------------------------------------------------------------

void MainWindow::readSettings() {
    QSettings s;
    model_panel_->setRecentFiles(s.value("recentFiles").toStringList());
    record_action_->setChecked(s.value("recordInspector", true).toBool());
    export_dir_ = s.value("exportDir").toString();
    save_factor_ = s.value("saveImagesFactor", 1).toInt();
    const QString last = s.value("lastRequest").toString();
    if (!last.isEmpty()) {
        try {
            Request r = Request::from_json(parse_json(last.toStdString(), "the saved settings"));
            const bool files_gone = r.model.kind == ModelSource::Kind::Files &&
                                    !QFileInfo::exists(QString::fromStdString(r.model.var_path));
            if (files_gone || r.model.kind == ModelSource::Kind::Custom)
                r.model = ModelPanel::defaultModelSource();
            applyRequest(r, false);
            working_model_ = r.model;  // saved only after it loaded (writeSettings)
        } catch (const std::exception&) {
            // stale or foreign settings: keep the defaults
        }
    }
    if (!restoreGeometry(s.value("geometry").toByteArray())) resize(1560, 980);
    // First start: the default layout once the window has its size (a saved one restores the
    // docks' sizes as the user left them).
    if (!restoreState(s.value("windowState").toByteArray()))
        QTimer::singleShot(0, this, &MainWindow::applyDefaultLayout);
}

void MainWindow::applyDefaultLayout() {
    // The images get the space: at 1280x800 each of the two is at least 256 px wide and high
    // (a 64x64 emoji at 4x). The side docks share what is left (the inspector up to 620 px on
    // wide windows), the plots a strip at the bottom.
    constexpr int kCentreWidth = 600;
    // The settings column as wide as its contents need (no sideways scrolling), at most 370 px.
    int left_w = std::clamp(width() * 21 / 100, 250, 370);
    if (auto* scroll = findChild<QScrollArea*>("settingsScroll"))
        left_w = std::clamp(scroll->widget()->minimumSizeHint().width() +
                                scroll->verticalScrollBar()->sizeHint().width() +
                                2 * scroll->frameWidth(),
                            left_w, 370);
    const int inspector_w = std::clamp(width() - left_w - kCentreWidth, 300, 620);
    const int plots_h = std::max(200, height() * 28 / 100);
    for (auto* d : findChildren<QDockWidget*>()) {
        if (d->objectName() == "leftDock") resizeDocks({d}, {left_w}, Qt::Horizontal);
        if (d->objectName() == "inspectorDock") resizeDocks({d}, {inspector_w}, Qt::Horizontal);
        if (d->objectName() == "plotsDock") resizeDocks({d}, {plots_h}, Qt::Vertical);
    }
}

void MainWindow::applyModelCounts() {
    ModelCounts counts = model_info_.counts;
    if (model_info_.family == Family::Mar) counts.steps = model_panel_->sampling().num_iter;
    method_panel_->setModelCounts(counts);
    plots_->setModelCounts(counts);
}

void MainWindow::writeSettings() {
    QSettings s;
    s.setValue("recentFiles", model_panel_->recentFiles());
    s.setValue("exportDir", export_dir_);
    s.setValue("saveImagesFactor", save_factor_);
    s.setValue("recordInspector", record_action_->isChecked());
    Request r = currentRequest();
    // A model that failed to load is not the one to open next time: the last that worked is.
    if (failed_models_.count(r.model.key()))
        r.model = working_model_.value_or(ModelPanel::defaultModelSource());
    if (r.model.kind != ModelSource::Kind::Custom)
        s.setValue("lastRequest", QString::fromStdString(r.to_json().dump()));
    s.setValue("geometry", saveGeometry());
    s.setValue("windowState", saveState());
}

void MainWindow::closeEvent(QCloseEvent* e) {
    writeSettings();
    worker_->cancel();
    e->accept();
}

}  // namespace varscope::gui
