// The window's part of the sweep view (issue #34): its dock beside the plots, the menu entries,
// and loading a point's accelerator config into the method panel (where it fits the model).
#include <QAction>
#include <QDir>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QMenu>
#include <QMenuBar>
#include <QStatusBar>
#include <QTimer>

#include "core/runner/family.h"
#include "ui/main_window.h"
#include "ui/method_panel.h"
#include "ui/sweep_view.h"

namespace varscope::gui {

void MainWindow::buildSweepView() {
    sweep_view_ = new SweepView(this);
    sweep_dock_ = new QDockWidget(tr("Sweep result"), this);
    sweep_dock_->setObjectName("sweepDock");
    sweep_dock_->setWidget(sweep_view_);
    addDockWidget(Qt::BottomDockWidgetArea, sweep_dock_);
    if (auto* plots = findChild<QDockWidget*>("plotsDock")) {
        tabifyDockWidget(plots, sweep_dock_);
        plots->raise();
    }
    // Hidden until a sweep is opened (or View ▸ Sweep result): an empty tab would only cost the
    // images the height of its tab bar (240 instead of 270 px at 1280x800).
    sweep_dock_->hide();
    view_menu_->addAction(sweep_dock_->toggleViewAction());

    // File ▸ Open sweep result…, after Open checkpoints… (File is the first menu).
    auto* open = new QAction(tr("Open sweep result…"), this);
    open->setObjectName("openSweepResultAction");
    open->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_O));
    open->setStatusTip(
        tr("A sweep.json of varscope-cli sweep: its Pareto front, and a click on "
           "a point loads its settings"));
    connect(open, &QAction::triggered, this, &MainWindow::openSweepResultDialog);
    addAction(open);
    if (QMenu* file = menuBar()->actions().value(0) ? menuBar()->actions()[0]->menu() : nullptr) {
        const auto items = file->actions();
        file->insertAction(items.size() > 1 ? items[1] : nullptr, open);
    }

    connect(sweep_view_, &SweepView::openRequested, this, &MainWindow::openSweepResultDialog);
    connect(sweep_view_, &SweepView::pointActivated, this, [this](int i) { loadSweepPoint(i); });
    connect(sweep_view_, &SweepView::loadAnywayRequested, this,
            [this](int i) { loadSweepPoint(i, true); });
}

bool MainWindow::openSweepResult(const QString& path, QString* error) {
    sweep_dock_->show();
    sweep_dock_->raise();
    // The plots' strip is low for a front with its names: at least 40 % of the window (after
    // the first start's own dock sizes, which wait for the event loop too).
    QTimer::singleShot(0, this, [this] {
        if (!sweep_dock_->isFloating() && sweep_dock_->height() < height() * 2 / 5)
            resizeDocks({sweep_dock_}, {height() * 2 / 5}, Qt::Vertical);
    });
    QString message;
    const bool ok = sweep_view_->open(path, &message);
    if (error) *error = message;
    statusBar()->showMessage(ok ? tr("Opened the sweep result %1").arg(path)
                                : tr("Could not open the sweep result: %1").arg(message),
                             6000);
    return ok;
}

void MainWindow::openSweepResultDialog() {
    const QString path = QFileDialog::getOpenFileName(
        this, tr("Open sweep result"), export_dir_.isEmpty() ? QDir::homePath() : export_dir_,
        tr("Sweep results (sweep.json *.json);;All files (*)"));
    if (!path.isEmpty()) openSweepResult(path);
}

bool MainWindow::loadSweepPoint(int index, bool otherModel) {
    const auto& result = sweep_view_->result();
    if (!result || index < 0 || index >= int(result->points.size())) return false;
    const SweepResultPoint& p = result->points[size_t(index)];
    const QString name = QString::fromStdString(p.name);
    if (p.accel.is_null()) {
        sweep_view_->showNotice(
            tr("The file records no accelerator config for '%1' (written before sweep.json "
               "carried them): put its result.json beside it and open it again.")
                .arg(name),
            true);
        return false;
    }
    // Another family's accelerators have no place in the panel (LazyMAR vs VAR's methods).
    if (!result->family.empty() &&
        Engine::accel_family(family_from_id(result->family)) != method_panel_->family()) {
        sweep_view_->showNotice(
            tr("'%1' is a config of a %2 model's accelerators; the loaded model is another "
               "family: not loaded.")
                .arg(name, QString::fromStdString(result->family)),
            true);
        return false;
    }
    // Settings found on one model need not hold on another: say so, load only when asked.
    const std::string& loaded = model_info_.description;
    if (!otherModel && !result->model.empty() && !loaded.empty() && result->model != loaded) {
        sweep_view_->showNotice(
            tr("This sweep ran on %1, the loaded model is %2: '%3' was not loaded.")
                .arg(QString::fromStdString(result->model).section('\n', 0, 0),
                     QString::fromStdString(loaded).section('\n', 0, 0), name),
            true, index);
        return false;
    }
    method_panel_->setConfig(p.accel);  // as pasted settings are: a debounced run follows
    if (!method_panel_->valid()) {
        sweep_view_->showNotice(tr("'%1' loaded, but the panel refuses it: %2")
                                    .arg(name, method_panel_->validationError()),
                                true);
        return false;
    }
    sweep_view_->showNotice(
        tr("Loaded the settings of '%1' into the accelerator panel.").arg(name));
    statusBar()->showMessage(tr("Loaded the sweep point '%1'").arg(name), 5000);
    return true;
}

}  // namespace varscope::gui
