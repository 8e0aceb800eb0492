// VARScope desktop app.
//
//   varscope [--model t2i|var|mar] [--prompt TEXT] [--seed N] [--preset NAME] [--screenshots DIR]
//            [--tabs LIST] [--runs N] [--sweep FILE]
//
// --screenshots generates once (or --runs times, one seed after the other), saves the window
// with several inspector tabs (or History: the history dock comparing its two newest runs) and
// a comparison figure (figure.png) to DIR and quits
// (used for the documentation; run under xvfb-run on a headless machine).
#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QDockWidget>
#include <QElapsedTimer>
#include <QFileInfo>
#include <QIcon>
#include <QLineEdit>
#include <QListWidget>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>
#include <QTimer>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>

#include "app/exec_env/exec_env.h"
#include "ui/attention_grid.h"
#include "ui/history_panel.h"
#include "ui/inspector.h"
#include "ui/main_window.h"
#include "ui/method_panel.h"
#include "ui/model_panel.h"
#include "visualization/figure.h"

using varscope::gui::MainWindow;

namespace {

// "History": the history dock raised with its two newest runs compared side by side.
bool show_history_comparison(MainWindow& w) {
    for (auto* d : w.findChildren<QDockWidget*>())
        if (d->objectName() == "historyDock") d->raise();
    QListWidget* list = w.historyPanel()->list();
    if (list->count() < 2) {
        qWarning("--tabs History: %d run(s) in the history; --runs 2 compares two", list->count());
        return list->count() > 0;
    }
    list->clearSelection();
    list->item(0)->setSelected(true);
    list->item(1)->setSelected(true);
    auto* compare = w.historyPanel()->findChild<QPushButton*>("historyCompare");
    if (!compare || !compare->isEnabled()) return false;
    compare->click();
    return true;
}

// The grid tab, once shown, asks the worker for its analysis: wait for it (up to 5 minutes).
void wait_for_grid(QWidget* tab) {
    auto* grid = qobject_cast<varscope::gui::AttentionGrid*>(tab);
    if (!grid) return;
    QElapsedTimer t;
    t.start();
    while (!grid->current() && t.elapsed() < 300000)
        QApplication::processEvents(QEventLoop::AllEvents | QEventLoop::WaitForMoreEvents, 100);
    if (!grid->current()) qWarning("--screenshots: the grid's analysis did not finish");
}

// After `runs` runs (seed, seed + 1, …), saves the window once per listed inspector tab (or
// "History"), then quits.
void take_screenshots(MainWindow& w, const QString& dir, const QStringList& tabs, int runs) {
    // Once, after the last run: the grid's analysis finishes a job of its own.
    auto done = std::make_shared<int>(0);
    auto once = std::make_shared<QMetaObject::Connection>();
    *once = QObject::connect(&w, &MainWindow::jobFinished, &w, [&w, dir, tabs, runs, done, once] {
        if (++*done < runs) {  // the next seed, at once (not after the seed box's debounce)
            w.modelPanel()->seedBox()->setValue(w.modelPanel()->seedBox()->value() + 1);
            w.generate();
            return;
        }
        QObject::disconnect(*once);
        QTimer::singleShot(400, &w, [&w, dir, tabs] {
            bool failed = false;
            for (const QString& tab : tabs) {
                if (tab == "History") {
                    failed |= !show_history_comparison(w);
                    QApplication::processEvents();
                    const QString path = QDir(dir).filePath("window-history.png");
                    QString error;  // through QSaveFile, as every file the app writes
                    if (!varscope::viz::write_image(w.grab().toImage(), path, {}, &error)) {
                        qWarning("--screenshots: %s", qPrintable(error));
                        failed = true;
                    }
                    continue;
                }
                auto* insp = w.inspector();
                QStringList titles;
                int found = -1;
                for (int i = 0; i < insp->count(); ++i) {
                    titles << insp->tabText(i);
                    if (insp->tabText(i) == tab) found = i;
                }
                if (found < 0) {  // saving the current tab under this name would mislead
                    qWarning("--tabs: no inspector tab '%s' (tabs: %s); not saved", qPrintable(tab),
                             qPrintable(titles.join(", ")));
                    continue;
                }
                insp->setCurrentIndex(found);
                QApplication::processEvents();
                wait_for_grid(insp->currentWidget());
                // The grid also as its exported figure (what Export ▸ Figure writes).
                if (auto* grid = qobject_cast<varscope::gui::AttentionGrid*>(insp->currentWidget());
                    grid && grid->current()) {
                    QString error;
                    for (const char* name : {"grid-figure.png", "grid-figure.svg"})
                        if (!grid->exportTo(QDir(dir).filePath(name),
                                            varscope::gui::AttentionGrid::ExportKind::Figure,
                                            &error)) {
                            qWarning("grid figure: %s", qPrintable(error));
                            failed = true;
                        }
                }
                QString name = tab.toLower().replace(' ', '-');
                const QString path = QDir(dir).filePath("window-" + name + ".png");
                QString shot_error;
                if (!varscope::viz::write_image(w.grab().toImage(), path, {}, &shot_error)) {
                    qWarning("--screenshots: %s", qPrintable(shot_error));
                    failed = true;
                }
            }
            // A comparison figure with the last tab's panel, as File > Export would write it.
            varscope::gui::ExportOptions o;
            o.title = "VARScope comparison";
            o.path = QDir(dir).filePath("figure.png");
            QString error;
            if (!w.exportFigure(o, &error, true)) {
                qWarning("figure: %s", qPrintable(error));
                failed = true;
            }
            QApplication::exit(failed ? 3 : 0);  // a run that saved nothing must not say done
        });
    });
}

// Without a display Qt aborts in the QApplication constructor with a plugin message that does
// not say what to do. Say it instead; --help and --version still work (offscreen platform).
bool display_available_or_explained(int argc, char** argv) {
#if defined(Q_OS_LINUX)
    const auto set = [](const char* name) {
        const char* v = std::getenv(name);
        return v != nullptr && *v != '\0';
    };
    if (set("QT_QPA_PLATFORM") || set("DISPLAY") || set("WAYLAND_DISPLAY")) return true;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help" || a == "--help-all" || a == "-v" || a == "--version") {
            setenv("QT_QPA_PLATFORM", "offscreen", 1);
            return true;
        }
    }
    std::fprintf(stderr,
                 "varscope: no display (neither DISPLAY nor WAYLAND_DISPLAY is set).\n"
                 "Start it from a desktop session, or headless with QT_QPA_PLATFORM=offscreen "
                 "(e.g. with --screenshots DIR),\nor use varscope-cli, which needs no display.\n");
    return false;
#else
    (void)argc;
    (void)argv;
    return true;
#endif
}

}  // namespace

int main(int argc, char** argv) {
    if (!display_available_or_explained(argc, argv)) return 2;
    QApplication app(argc, argv);
    QApplication::setOrganizationName("VARScope");
    QApplication::setApplicationName("VARScope");
    QApplication::setApplicationVersion("0.1.0");
    QApplication::setWindowIcon(QIcon(":/varscope.svg"));
    QApplication::setDesktopFileName("varscope");  // packaging/varscope.desktop

    QCommandLineParser cli;
    cli.setApplicationDescription("VARScope: visual autoregressive models and their accelerations");
    cli.addHelpOption();
    cli.addVersionOption();
    QCommandLineOption prompt("prompt", "Prompt (class name) to start with.", "text");
    QCommandLineOption seed("seed", "Seed to start with.", "n");
    QCommandLineOption preset("preset", "Accelerator preset to start with.", "name");
    QCommandLineOption shots("screenshots", "Generate once, save screenshots to DIR, quit.", "dir");
    QCommandLineOption tabs("tabs",
                            "Inspector tabs for --screenshots (comma-separated titles; History: "
                            "the history dock with its two newest runs compared).",
                            "list", "Attention");
    QCommandLineOption runs("runs", "Runs before --screenshots (seeds N, N+1, …; default 1).", "n",
                            "1");
    QCommandLineOption size("size", "Window size WxH.", "size");
    QCommandLineOption overlay("overlay",
                               "Start with the attention map's method-mask overlay on (kept "
                               "entries bright, dropped ones dimmed).");
    QCommandLineOption model(
        "model",
        "Embedded model to start with: t2i (the emoji text-to-image model), var or mar (default: "
        "the last session's model; the first start: t2i when it is shipped, else var).",
        "family");
    QCommandLineOption device("device", "Device to start with: cpu or cuda.", "device");
    QCommandLineOption precision(
        "precision",
        QString::fromStdString("Transformer precision on CUDA to start with: " +
                               varscope::gui::model_precision_names() + "."),
        "name");
    QCommandLineOption sweep("sweep", "Open a sweep result (sweep.json of varscope-cli sweep).",
                             "file");
    cli.addOptions(
        {prompt, seed, preset, shots, tabs, runs, size, overlay, model, device, precision, sweep});
    cli.process(app);
    try {  // the VARSCOPE_* variables (the engine reads them again): a malformed one stops here
        varscope::exec_env::policy_from_environment();
        varscope::exec_env::apply_resource_dir_from_environment();
    } catch (const std::invalid_argument& e) {
        qCritical("%s", e.what());
        return 2;
    }
    const QString family = cli.value(model).toLower();  // "" when not given
    if (cli.isSet(model) && family != "var" && family != "mar" && family != "t2i") {
        qCritical("--model: expected 't2i', 'var' or 'mar', got '%s'",
                  qPrintable(cli.value(model)));
        return 2;
    }
    const QString device_name = cli.value(device).toLower();
    if (cli.isSet(device) && device_name != "cpu" && device_name != "cuda") {
        qCritical("--device: expected 'cpu' or 'cuda', got '%s'", qPrintable(cli.value(device)));
        return 2;
    }
    if (device_name == "cuda" && !varscope::gui::Engine::cuda_available()) {
        qCritical("--device cuda: no CUDA device here (or LibTorch without CUDA)");
        return 2;
    }
    const QString precision_name = cli.value(precision).toLower();
    if (cli.isSet(precision) && !varscope::gui::is_model_precision(precision_name.toStdString())) {
        qCritical("--precision: expected %s, got '%s'",
                  varscope::gui::model_precision_names().c_str(), qPrintable(cli.value(precision)));
        return 2;
    }

    const bool first_start = !QSettings().contains("lastRequest");
    MainWindow w;
    if (cli.isSet(model)) {  // else the restored session's model stays
        varscope::gui::ModelSource src;
        src.kind = varscope::gui::ModelSource::Kind::Embedded;
        src.family = family == "mar"   ? varscope::gui::Family::Mar
                     : family == "t2i" ? varscope::gui::Family::Infinity
                                       : varscope::gui::Family::Var;
        if (!w.modelPanel()->pickModel(src)) {
            qCritical("--model %s: that embedded model is not installed", qPrintable(family));
            return 2;
        }
    }
    if (cli.isSet(device) || cli.isSet(precision)) {
        varscope::gui::ModelSource src = w.modelPanel()->modelSource();
        if (cli.isSet(device)) src.device = device_name.toStdString();
        if (cli.isSet(precision)) src.precision = precision_name.toStdString();
        if (src.device != "cuda" && src.precision != "fp32")
            qWarning("--precision %s: the CPU runs fp32 (precision applies on CUDA)",
                     qPrintable(precision_name));
        w.modelPanel()->setModelSource(src);
    }
    if (cli.isSet(size)) {
        const QStringList wh = cli.value(size).split('x');
        bool ok_w = false, ok_h = false;
        const int width = wh.value(0).toInt(&ok_w), height = wh.value(1).toInt(&ok_h);
        constexpr int kMaxSide = 8192;  // the geometry is saved: a typo must not stick
        if (wh.size() != 2 || !ok_w || !ok_h || width <= 0 || height <= 0 || width > kMaxSide ||
            height > kMaxSide) {
            qCritical("--size: expected WxH in pixels up to %dx%d, e.g. 1600x1000, got '%s'",
                      kMaxSide, kMaxSide, qPrintable(cli.value(size)));
            return 2;
        }
        w.resize(width, height);
    }
    // The very first start shows an emoji the embedded models draw well, not class 0 ("hash");
    // later starts restore the last request.
    const QString start_prompt = cli.isSet(prompt) ? cli.value(prompt)
                                 : first_start     ? QStringLiteral("red heart")
                                                   : QString();
    if (!start_prompt.isEmpty()) w.modelPanel()->setPrompt(start_prompt);
    if (cli.isSet(seed)) {
        bool ok = false;
        const int value = cli.value(seed).toInt(&ok);
        if (!ok || value < 0) {  // toInt gives 0 for "abc": a silent seed 0 would mislead
            qCritical("--seed: expected a whole number from 0 to %d, got '%s'",
                      w.modelPanel()->seedBox()->maximum(), qPrintable(cli.value(seed)));
            return 2;
        }
        w.modelPanel()->seedBox()->setValue(value);
    }
    if (cli.isSet(preset) && !w.methodPanel()->applyPreset(cli.value(preset))) {
        qCritical("--preset: no preset '%s' for this model (presets: %s)",
                  qPrintable(cli.value(preset)),
                  qPrintable(w.methodPanel()->presetNames().join(", ")));
        return 2;
    }
    if (cli.isSet(overlay)) w.inspector()->attention()->setMaskShown(true);
    QString sweep_error;
    if (cli.isSet(sweep) && !w.openSweepResult(cli.value(sweep), &sweep_error)) {
        qCritical("--sweep: %s", qPrintable(sweep_error));
        return 2;
    }
    if (cli.isSet(shots)) {
        const QString dir = cli.value(shots);
        if (!QDir().mkpath(dir) || !QFileInfo(dir).isWritable()) {  // before the generation
            qCritical("--screenshots: cannot write in '%s'", qPrintable(dir));
            return 2;
        }
        bool ok = false;
        const int n = cli.value(runs).toInt(&ok);
        if (!ok || n < 1 || n > 100) {
            qCritical("--runs: expected a whole number from 1 to 100, got '%s'",
                      qPrintable(cli.value(runs)));
            return 2;
        }
        take_screenshots(w, dir, cli.value(tabs).split(','), n);
    }
    w.show();
    // First impression: generate with whatever the panels hold (the embedded model by default).
    QTimer::singleShot(0, &w, &MainWindow::generate);
    return app.exec();
}
