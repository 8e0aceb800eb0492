// Qt Test of the sweep view (issue #34; offscreen platform): a real sweep result opens with core's
// points and front, a click on a point loads its config into the method panel (another model's
// only when asked), a malformed file is named and changes nothing, the plot exports.
#include "ui/sweep_view.h"

#include <qcustomplot.h>

#include <QDragEnterEvent>
#include <QDropEvent>
#include <QImageReader>
#include <QMenu>
#include <QMenuBar>
#include <QMimeData>
#include <QPushButton>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>
#include <fstream>

#include "core/eval/sweep_result.h"
#include "tests/ui/tiny_engine.h"
#include "tests/ui/window_test_util.h"
#include "ui/main_window.h"
#include "ui/method_panel.h"

using namespace varscope;
using namespace varscope::gui;

using varscope::testing::test_loader;
using varscope::testing::wait_job;

namespace {

// `varscope-cli sweep` on the embedded VAR, CPU, 2026-11-29: base.json {"model": {"embedded":
// "var"}, "classes": [1, 5], "seeds": {"first": 0, "count": 1}, "batch": 2, "configs":
// {"base": {}}}, --param skip.last_n=1,2,3 --param sparvar.top_k=0.2,0.5 (sweep.json as the CLI
// wrote it before the points carried their configs; result.json beside it).
QString fixture() {
    return QStringLiteral(VARSCOPE_SOURCE_DIR "/tests/fixtures/sweep/sweep.json");
}

// A sweep.json as core's writer (sweep_summary) writes it, with the points' configs and result
// entries: two skip points and a FastVAR point, the model not recorded. (Written out here: this
// Qt test does not link LibTorch; EvalSweep.RunsAsAnEvalJob reads the writer's file with core.)
QString write_sweep(const QDir& dir) {
    nlohmann::json points = nlohmann::json::array();
    auto add = [&](const std::string& name, const nlohmann::json& accel,
                   const nlohmann::json& values, double speedup, double ssim, bool pareto) {
        nlohmann::json metrics = {{"speedup", speedup}, {"images_per_s", speedup}};
        if (name != "baseline") {
            metrics["ssim"] = {{"mean", ssim}, {"n", 2}};
            metrics["psnr_db"] = {{"mean", 20 + 10 * ssim}, {"n", 2}, {"identical", 0}};
        }
        points.push_back({{"name", name},
                          {"speedup", speedup},
                          {"images_per_s", speedup},
                          {"quality", ssim},
                          {"pareto", pareto},
                          {"values", values},
                          {"accel", accel},
                          {"metrics", metrics}});
    };
    add("baseline", nullptr, nullptr, 1.0, 1.0, true);
    add("skip.last_n=1", {{"skip", {{"enabled", true}, {"last_n", 1}}}}, {{"skip.last_n", 1}}, 1.5,
        0.9, true);
    add("skip.last_n=2", {{"skip", {{"enabled", true}, {"last_n", 2}}}}, {{"skip.last_n", 2}}, 2.5,
        0.7, true);
    add("fastvar.ratios=[0.3,0.6]", {{"fastvar", {{"enabled", true}, {"ratios", {0.3, 0.6}}}}},
        {{"fastvar.ratios", {0.3, 0.6}}}, 1.2, 0.85, false);  // beaten by skip.last_n=1
    const nlohmann::json sweep = {{"quality_metric", "ssim"},
                                  {"points", points},
                                  {"pareto_front", {"baseline", "skip.last_n=1", "skip.last_n=2"}},
                                  {"family", "var"}};
    const QString path = dir.filePath("sweep.json");
    std::ofstream(path.toStdString()) << sweep.dump(2);
    return path;
}

int index_of(const SweepView* v, const std::string& name) {
    const auto& pts = v->result()->points;
    for (size_t i = 0; i < pts.size(); ++i)
        if (pts[i].name == name) return int(i);
    return -1;
}

void click_point(SweepView* v, int index) {
    const auto at = v->pointPosition(index);
    QVERIFY2(at.has_value(), "point not drawn");
    QCOMPARE(v->pointAt(*at), index);
    QTest::mouseClick(v->plot(), Qt::LeftButton, {}, *at);
}

std::vector<int> drawn_front_count(const SweepView* v) {
    return {v->plot()->graph(0)->dataCount(), v->plot()->graph(1)->dataCount()};
}

}  // namespace

class SweepViewTest : public QObject {
    Q_OBJECT
  private slots:
    void initTestCase() {
        QCoreApplication::setOrganizationName("VARScopeTest");
        QCoreApplication::setApplicationName("varscope_ui_sweep_tests");
        QStandardPaths::setTestModeEnabled(true);
        QSettings().clear();
    }

    // The committed CLI result: the view's points and front are core's, over the CLI's axes and
    // over others picked in the view.
    void opensARealSweepResult() {
        MainWindow w(test_loader);
        w.resize(1400, 900);
        w.show();
        QString error;
        QVERIFY2(w.openSweepResult(fixture(), &error), qPrintable(error));
        SweepView* v = w.sweepView();
        QVERIFY(v->isVisible());
        const SweepResult core = read_sweep_result(fixture().toStdString());
        QCOMPARE(v->result()->points.size(), core.points.size());
        QCOMPARE(core.points.size(), size_t(7));
        QCOMPARE(v->xAxis().field, std::string("speedup"));
        QCOMPARE(v->yAxis().field, std::string("ssim"));
        const auto front =
            sweep_pareto_front(core.points, {"speedup", Better::Higher}, {"ssim", Better::Higher});
        QCOMPARE(v->front(), front);
        for (size_t i = 0; i < core.points.size(); ++i)  // the CLI's own front
            QCOMPARE(bool(v->front()[i]), core.points[i].pareto_in_file);
        const int on = int(std::count(front.begin(), front.end(), true));
        QCOMPARE(drawn_front_count(v), (std::vector<int>{7 - on, on}));

        // Other axes: latency (lower is better by default) against PSNR.
        QVERIFY(v->setAxes("latency_ms_per_image.p50", "psnr_db"));
        QVERIFY(v->xAxis().better == Better::Lower);
        QCOMPARE(v->front(),
                 sweep_pareto_front(core.points, {"latency_ms_per_image.p50", Better::Lower},
                                    {"psnr_db", Better::Higher}));
        QVERIFY(!v->setAxes("speedup", "no_such_field"));
        // Token agreement is offered too (from result.json beside the file).
        QVERIFY(v->setAxes("images_per_s", "token_agreement"));
        v->setBetter(Better::Higher, Better::Lower);
        QCOMPARE(v->front(), sweep_pareto_front(core.points, {"images_per_s", Better::Higher},
                                                {"token_agreement", Better::Lower}));

        // The hover text names the settings and the numbers.
        const int i = index_of(v, "skip.last_n=2 sparvar.top_k=0.2");
        QVERIFY(i >= 0);
        const QString tip = v->pointToolTip(i);
        QVERIFY2(tip.contains("skip.last_n = 2") && tip.contains("sparvar.top_k = 0.2") &&
                     tip.contains("SSIM vs baseline: 0.75278"),
                 qPrintable(tip));
    }

    // A click on a point sets the panel to its config; the baseline's switches everything off.
    void clickLoadsThePointsConfig() {
        QTemporaryDir dir;
        MainWindow w(test_loader);
        w.resize(1400, 900);
        w.show();
        QVERIFY(w.openSweepResult(write_sweep(QDir(dir.path()))));
        SweepView* v = w.sweepView();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        v->plot()->replot();
        QCOMPARE(v->front(), (std::vector<bool>{true, true, true, false}));

        const int skip2 = index_of(v, "skip.last_n=2");
        click_point(v, skip2);
        auto c = w.methodPanel()->config();
        QCOMPARE(c["skip"]["enabled"], nlohmann::json(true));
        QCOMPARE(c["skip"]["last_n"], nlohmann::json(2));
        QCOMPARE(c["fastvar"]["enabled"], nlohmann::json(false));
        QVERIFY2(v->notice().contains("Loaded the settings of 'skip.last_n=2'"),
                 qPrintable(v->notice()));

        click_point(v, index_of(v, "fastvar.ratios=[0.3,0.6]"));  // off the front: loads too
        c = w.methodPanel()->config();
        QCOMPARE(c["skip"]["enabled"], nlohmann::json(false));
        QCOMPARE(c["fastvar"]["enabled"], nlohmann::json(true));
        QCOMPARE(c["fastvar"]["ratios"], (nlohmann::json{0.3, 0.6}));

        click_point(v, index_of(v, "baseline"));
        c = w.methodPanel()->config();
        for (const auto& [id, m] : c.items()) QVERIFY2(!m.value("enabled", false), id.c_str());

        // A click beside the points loads nothing.
        w.methodPanel()->setConfig({{"skip", {{"enabled", true}, {"last_n", 1}}}});
        const auto before = w.methodPanel()->config();
        QTest::mouseClick(v->plot(), Qt::LeftButton, {}, QPoint(3, 3));
        QCOMPARE(w.methodPanel()->config(), before);
    }

    // A sweep of another model than the loaded one is named, not loaded, until "Load anyway".
    void anotherModelsSweepIsNamedFirst() {
        MainWindow w(test_loader);
        w.resize(1400, 900);
        w.show();
        Request r;
        r.model.kind = ModelSource::Kind::Custom;
        r.model.custom_name = "small-random";
        r.model.device = "cpu";
        r.gen.class_id = 3;
        r.gen.seed = 7;
        w.applyRequest(r, true);
        QVERIFY(wait_job(w));
        QVERIFY(w.openSweepResult(fixture()));  // the embedded VAR d16's sweep
        SweepView* v = w.sweepView();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        v->plot()->replot();
        const auto before = w.methodPanel()->config();
        const int i = index_of(v, "skip.last_n=1 sparvar.top_k=0.5");
        click_point(v, i);
        QCOMPARE(w.methodPanel()->config(), before);
        QVERIFY2(v->notice().contains("This sweep ran on VAR d16") &&
                     v->notice().contains("was not loaded"),
                 qPrintable(v->notice()));
        QVERIFY(v->loadAnywayButton()->isVisible());
        v->loadAnywayButton()->click();
        const auto c = w.methodPanel()->config();
        QCOMPARE(c["skip"]["enabled"], nlohmann::json(true));
        QCOMPARE(c["skip"]["last_n"], nlohmann::json(1));
        QCOMPARE(c["sparvar"]["enabled"], nlohmann::json(true));
        QCOMPARE(c["sparvar"]["top_k"].get<double>(), 0.5);
        QVERIFY(!v->loadAnywayButton()->isVisible());
        w.cancel();  // the run the new settings started
        QVERIFY(wait_job(w));
    }

    // Bad files are named with the key; the sweep on show and the panel stay as they were.
    void malformedFileChangesNothing() {
        QTemporaryDir dir;
        MainWindow w(test_loader);
        w.resize(1400, 900);
        w.show();
        const QString good = write_sweep(QDir(dir.path()));
        QVERIFY(w.openSweepResult(good));
        SweepView* v = w.sweepView();
        w.methodPanel()->setConfig({{"fastvar", {{"enabled", true}}}});
        const auto panel = w.methodPanel()->config();
        const auto points = v->result()->points.size();

        auto bad = [&](const char* name, const std::string& text, const QString& expected) {
            const QString path = QDir(dir.path()).filePath(name);
            std::ofstream(path.toStdString()) << text;
            QString error;
            QVERIFY(!w.openSweepResult(path, &error));
            QVERIFY2(error.contains(path) && error.contains(expected), qPrintable(error));
            QVERIFY2(v->notice().contains("Could not open the sweep result") &&
                         v->notice().contains(expected),
                     qPrintable(v->notice()));
            QCOMPARE(QString::fromStdString(v->result()->path), good);
            QCOMPARE(v->result()->points.size(), points);
            QCOMPARE(w.methodPanel()->config(), panel);
        };
        bad("truncated.json", "{\"points\": [", "sweep result");
        bad("no-points.json", "{\"quality_metric\": \"ssim\"}", "missing key 'points'");
        bad("bad-speedup.json",
            R"({"quality_metric": "ssim", "points": [{"name": "a", "speedup": "fast",
                "images_per_s": 1, "quality": 1, "pareto": true}]})",
            "'speedup' is not a number");
        bad("result.json", R"({"configs": []})", "not a sweep.json");
        QString error;
        QVERIFY(!w.openSweepResult(QDir(dir.path()).filePath("missing.json"), &error));
        QVERIFY2(error.contains("missing.json"), qPrintable(error));
    }

    // A sweep.json dropped on the view opens; other files are not taken.
    void dropOpensASweep() {
        QTemporaryDir dir;
        SweepView v;
        const QString path = write_sweep(QDir(dir.path()));
        // Not a JSON file: the view does not take it.
        QMimeData png;
        png.setUrls({QUrl::fromLocalFile(QDir(dir.path()).filePath("image.png"))});
        QDragEnterEvent refused(QPoint(5, 5), Qt::CopyAction, &png, Qt::LeftButton, {});
        QCoreApplication::sendEvent(&v, &refused);
        QVERIFY(!refused.isAccepted());
        // Qt delivers a drop to the widget that accepted the drag's entry.
        QMimeData mime;
        mime.setUrls({QUrl::fromLocalFile(path)});
        QDragEnterEvent enter(QPoint(5, 5), Qt::CopyAction, &mime, Qt::LeftButton, {});
        QCoreApplication::sendEvent(&v, &enter);
        QVERIFY(enter.isAccepted());
        QDropEvent drop(QPointF(5, 5), Qt::CopyAction, &mime, Qt::LeftButton, {});
        QCoreApplication::sendEvent(&v, &drop);
        QVERIFY(v.result().has_value());
        QCOMPARE(v.result()->points.size(), size_t(4));
    }

    // The window: the tab is hidden until a sweep opens (it would cost the images the height of
    // a tab bar), and a sweep.json dropped anywhere on the window opens in it.
    void windowDropOpensTheHiddenTab() {
        QTemporaryDir dir;
        const QString path = write_sweep(QDir(dir.path()));
        MainWindow w(test_loader);
        w.resize(1280, 800);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QVERIFY(!w.sweepView()->isVisible());
        QMimeData mime;
        mime.setUrls({QUrl::fromLocalFile(path)});
        QDragEnterEvent enter(QPoint(5, 5), Qt::CopyAction, &mime, Qt::LeftButton, {});
        QCoreApplication::sendEvent(&w, &enter);
        QVERIFY(enter.isAccepted());
        QDropEvent drop(QPointF(5, 5), Qt::CopyAction, &mime, Qt::LeftButton, {});
        QCoreApplication::sendEvent(&w, &drop);
        QVERIFY(w.sweepView()->isVisible());
        QVERIFY(w.sweepView()->result().has_value());
        QCOMPARE(w.sweepView()->result()->points.size(), size_t(4));
    }

    // The plot as PNG and SVG; nothing to export before a file is open.
    void exportsThePlot() {
        QTemporaryDir dir;
        SweepView v;
        v.resize(800, 500);
        QString error;
        QVERIFY(!v.exportPlot(QDir(dir.path()).filePath("none.png"), &error));
        QVERIFY(error.contains("open a sweep result"));
        QVERIFY(v.open(fixture()));
        const QString png = QDir(dir.path()).filePath("front.png");
        const QString svg = QDir(dir.path()).filePath("front.svg");
        QVERIFY2(v.exportPlot(png, &error), qPrintable(error));
        QVERIFY2(v.exportPlot(svg, &error), qPrintable(error));
        const QImage image = QImageReader(png).read();
        QVERIFY(!image.isNull() && image.width() >= 1280);  // 2x
        QFile f(svg);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QByteArray text = f.readAll();
        QVERIFY(text.contains("<svg") && text.contains("</svg>"));
        QVERIFY(!v.exportPlot(QDir(dir.path()).filePath("no/such/dir/x.png"), &error));
    }

    // File ▸ Open sweep result… sits after Open checkpoints…; the menus keep their order.
    void fileMenuOffersIt() {
        MainWindow w(test_loader);
        QStringList titles;
        for (QAction* a : w.menuBar()->actions()) titles << a->text().remove('&');
        QCOMPARE(titles, QStringList({"File", "Edit", "View", "Help"}));
        const auto items = w.menuBar()->actions()[0]->menu()->actions();
        QVERIFY(items.size() > 2);
        QCOMPARE(items[1]->objectName(), QString("openSweepResultAction"));
        QVERIFY(items[0]->text().startsWith("Open checkpoints"));
    }
};

QTEST_MAIN(SweepViewTest)
#include "sweep_view_test.moc"
