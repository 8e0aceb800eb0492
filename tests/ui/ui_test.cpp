// Qt Test suite of the desktop app (offscreen platform): widgets build, the method panel follows
// the accelerators' ParamSpec tables, generations on tiny random models run through the worker
// and fill the panels, exports write valid files that restore their settings.
#include <qcustomplot.h>

#include <QCheckBox>
#include <QDialog>
#include <QDockWidget>
#include <QElapsedTimer>
#include <QFile>
#include <QImageReader>
#include <QImageWriter>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QMenu>
#include <QMenuBar>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QSignalSpy>
#include <QSlider>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QStatusBar>
#include <QStyleOptionComboBox>
#include <QTemporaryDir>
#include <QToolButton>
#include <QVBoxLayout>
#include <QtTest>
#include <cmath>
#include <numeric>

#include "core/analysis/measure_grid.h"
#include "tests/ui/tiny_engine.h"
#include "tests/ui/window_test_util.h"
#include "ui/attention_grid.h"
#include "ui/comparison_view.h"
#include "ui/elided_combo_box.h"
#include "ui/elided_label.h"
#include "ui/filmstrip.h"
#include "ui/history_panel.h"
#include "ui/image_export.h"
#include "ui/inspector.h"
#include "ui/inspector_empty.h"
#include "ui/main_window.h"
#include "ui/mar_settings.h"
#include "ui/method_panel.h"
#include "ui/metrics_model.h"
#include "ui/model_panel.h"
#include "ui/plots_panel.h"
#include "ui/results_model.h"
#include "ui/run_history.h"
#include "ui/save_images_dialog.h"
#include "visualization/colormap.h"
#include "visualization/figure.h"
#include "visualization/float_grid.h"
#include "visualization/grid_figure.h"
#include "visualization/heatmap_view.h"
#include "visualization/image_canvas.h"

using namespace varscope::gui;

using varscope::testing::kJobTimeoutMs;
using varscope::testing::test_loader;
using varscope::testing::wait_job;

namespace {

// The embedded emoji MAR at settings small enough for the 2-core CI machine.
Request mar_request() {
    Request r;
    r.model.kind = ModelSource::Kind::Embedded;
    r.model.family = Family::Mar;
    r.model.device = "cpu";
    r.model.diffusion_steps = "20";
    r.gen.class_id = 5;
    r.gen.seed = 3;
    r.gen.cfg = 3.0;
    r.gen.num_iter = 4;
    r.gen.cfg_schedule = "linear";
    r.gen.temperature = 1.0;
    return r;
}

Request tiny_request(bool small = false) {
    Request r;
    r.model.kind = ModelSource::Kind::Custom;
    r.model.custom_name = small ? "small-random" : "tiny-random";
    r.model.device = "cpu";
    r.gen.class_id = 3;
    r.gen.seed = 7;
    r.gen.cfg = 2.0;
    r.gen.top_k = 0;
    r.gen.top_p = 0;
    return r;
}

QImage noise_image(int w, int h, unsigned seed) {
    QImage img(w, h, QImage::Format_RGB32);
    unsigned x = seed;
    for (int y = 0; y < h; ++y)
        for (int c = 0; c < w; ++c) {
            x = x * 1664525u + 1013904223u;
            img.setPixel(c, y, qRgb(int(x >> 24), int((x >> 16) & 255), int((x >> 8) & 255)));
        }
    return img;
}

// A side with per-scale times, FLOPs, tokens (some pruned) and its KV size: what a live run
// hands the history.
std::shared_ptr<SideResult> scaled_side(Side s, int shade, double scale_ms) {
    auto r = std::make_shared<SideResult>();
    r->side = s;
    r->accelerated = s == Side::Accelerated;
    r->run.image = {64, 64, std::vector<uint8_t>(64 * 64 * 3, uint8_t(shade))};
    r->image = to_qimage(r->run.image);
    r->run.accel_summary = s == Side::Accelerated ? "FastVAR" : "baseline";
    r->run.kv_bytes = 3000 + shade;
    for (int i = 0; i < 4; ++i) {
        ScaleOutput o;
        o.scale = i;
        o.patch_num = i + 1;
        o.millis = scale_ms * (i + 1) + 0.125 * shade;
        o.attention_flops = 1e6 * (i + 1) * (i + 1) + shade;
        // The step's work by part: the accelerated side computes 10 of the last scale's 16
        // tokens' FFN rows.
        o.work_counted = true;
        o.part_flops[size_t(varscope::CostPart::Attention)] = o.attention_flops;
        o.part_flops[size_t(varscope::CostPart::Projection)] = 4e6 * (i + 1) * (i + 1);
        o.part_flops[size_t(varscope::CostPart::Ffn)] =
            8e6 * (i + 1) * (i + 1) * (s == Side::Accelerated && i == 3 ? 10.0 / 16.0 : 1.0);
        // Timed parts (a CPU run): the accelerated side spends 0.5 ms a scale on its own work.
        o.parts_timed = true;
        o.part_ms[size_t(varscope::CostPart::Ffn)] = 0.25 * o.millis;
        o.part_ms[size_t(varscope::CostPart::Overhead)] = s == Side::Accelerated ? 0.5 : 0.0;
        o.tokens.assign(size_t((i + 1) * (i + 1)), 5);
        if (s == Side::Accelerated && i == 3) std::fill_n(o.tokens.begin(), 6, -1);
        r->run.scales.push_back(o);
        r->run.total_ms += o.millis;
    }
    return r;
}

}  // namespace

class UiTest : public QObject {
    Q_OBJECT
  private slots:
    void initTestCase() {
        QCoreApplication::setOrganizationName("VARScopeTest");
        QCoreApplication::setApplicationName("varscope_ui_tests");
        QStandardPaths::setTestModeEnabled(true);  // the run history goes to ~/.qttest
        QSettings().clear();
    }

    // --- visualization ----------------------------------------------------------------------
    // The app's PSNR/SSIM (core/metrics through the engine) on 8-bit images.
    void metricsOfIdenticalAndDifferentImages() {
        using varscope::gui::Engine;
        auto rgb = [](const QImage& q) {
            const QImage c = q.convertToFormat(QImage::Format_RGB888);
            varscope::gui::RgbImage im{c.width(), c.height(), {}};
            for (int y = 0; y < c.height(); ++y)
                im.rgb.insert(im.rgb.end(), c.constScanLine(y), c.constScanLine(y) + 3 * c.width());
            return im;
        };
        const auto a = rgb(noise_image(48, 40, 1));
        QVERIFY(std::isinf(Engine::image_quality(a, a).psnr));
        QCOMPARE(Engine::image_quality(a, a).ssim, 1.0);
        auto b = a;
        b.rgb[3 * (4 * 48 + 3)] = 0;
        const double p = Engine::image_quality(a, b).psnr;
        QVERIFY(p > 30 && std::isfinite(p));
        const auto c = rgb(noise_image(48, 40, 2));
        QVERIFY(Engine::image_quality(a, c).psnr < 12);  // unrelated noise
        QVERIFY(Engine::image_quality(a, c).ssim < 0.2);
        // A uniform shift of 10 levels: MSE = 100 exactly.
        varscope::gui::RgbImage d{16, 16, std::vector<uint8_t>(16 * 16 * 3, 100)}, e = d;
        std::fill(e.rgb.begin(), e.rgb.end(), uint8_t(110));
        QVERIFY(std::abs(Engine::image_quality(d, e).psnr -
                         10 * std::log10(255.0 * 255.0 / 100.0)) < 1e-4);
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, Engine::image_quality(a, d));
    }

    // The metrics line under the images: KV bytes only where a model keeps a KV cache (VAR), not
    // "KV 0 B → 0 B" for MAR.
    // The previews decoded after every scale are the tool's work: the time shown (and the
    // speedups) leave them out, and the tooltip names them.
    void runTimeLeavesOutThePreviews() {
        Engine e;
        varscope::testing::install_tiny_model(e, /*small=*/true);
        GenerationSettings g;
        g.class_id = 1;
        g.filmstrip = true;
        QElapsedTimer wall;
        wall.start();
        const RunOutput with = e.run(g, false);
        const double wall_ms = wall.nsecsElapsed() / 1e6;
        QVERIFY(with.overhead_ms > 0);
        QVERIFY(with.total_ms + with.overhead_ms <= wall_ms + 1e-6);
        double sum = 0;
        for (const auto& s : with.scales) {
            QVERIFY(!s.fhat.empty());
            sum += s.millis;
        }
        QVERIFY(with.total_ms + 1e-6 >= sum + with.decode_ms);
        varscope::gui::ComparisonMetrics m;
        m.valid = true;
        m.base_overhead_ms = 12.34, m.accel_overhead_ms = 3;
        QVERIFY2(m.toolTip().contains("baseline 12.3 ms, accelerated 3.0 ms"),
                 qPrintable(m.toolTip()));
    }

    void metricsLineNamesKvOnlyWhenThereIsACache() {
        varscope::gui::ComparisonMetrics m;
        QVERIFY(m.text().isEmpty());  // not valid yet
        m.valid = true;
        m.psnr = 30, m.ssim = 0.9, m.speedup = 2, m.base_ms = 100, m.accel_ms = 50;
        QVERIFY2(!m.text().contains("KV"), qPrintable(m.text()));
        QVERIFY2(m.text().contains("speedup 2.00×"), qPrintable(m.text()));
        m.base_kv = 1 << 20, m.accel_kv = 512 << 10;
        QVERIFY2(m.text().endsWith(" · KV 1.00 MiB → 512.0 KiB"), qPrintable(m.text()));
    }

    // SparVAR on its reference path (the CPU, fp32) computes every score: the metrics line and its
    // tooltip say so, so that its speedup is not read as the method's.
    void sparvarReferencePathIsNamed() {
        using namespace varscope::gui;
        RunOutput run;
        QVERIFY(!ranSparVarReference(run));
        AccelOutput rec;
        rec.method = "sparvar";
        rec.kind = "csla_token_mask";
        rec.scale = 9;
        rec.values = {{"sparsity", 0.8}, {"cuda_kernels", 1.0}};
        run.accel.push_back(rec);
        QVERIFY(!ranSparVarReference(run));  // the CUDA kernel ran
        run.accel.back().values["cuda_kernels"] = 0.0;
        QVERIFY(ranSparVarReference(run));
        run.accel.back().kind = "csla_block_mask";  // only the token mask record carries it
        QVERIFY(!ranSparVarReference(run));

        ComparisonMetrics m;
        m.valid = true;
        m.psnr = 30, m.ssim = 0.9, m.speedup = 0.94, m.base_ms = 100, m.accel_ms = 106;
        QVERIFY(!m.text().contains("SparVAR"));
        QVERIFY(!m.toolTip().contains("SparVAR"));
        m.sparvar_reference = true;
        QVERIFY2(m.text().endsWith(" · SparVAR on its reference path"), qPrintable(m.text()));
        QVERIFY2(m.toolTip().contains("CUDA kernels"), qPrintable(m.toolTip()));
    }

    // The window and the exported figure caption the accelerated image alike; with nothing on
    // the figure said "baseline · 1384.0 ms" under a second copy of the baseline.
    void acceleratedCaptionSaysWhenItIsTheBaseline() {
        using namespace varscope::gui;
        SideResult r;
        r.run.accel_summary = "baseline";
        r.run.total_ms = 1384.0;
        r.same_as_baseline = true;
        QCOMPARE(acceleratedCaption(r), QString("Accelerated: none enabled (= baseline)"));
        r.same_as_baseline = false;
        r.run.accel_summary = "FastVAR";
        QCOMPARE(acceleratedCaption(r), QString("FastVAR · 1384.0 ms"));
    }

    // A long metrics line wraps: with SparVAR's note it made the window 130 px wider than asked.
    void metricsLineWrapsInsteadOfWideningTheWindow() {
        using namespace varscope::gui;
        ComparisonView view;
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        auto* label = view.findChild<QLabel*>("metricsLabel");
        QVERIFY(label);
        label->setText("PSNR 27.62 dB");
        QApplication::processEvents();
        const int narrow = view.minimumSizeHint().width();
        ComparisonMetrics m;
        m.valid = true;
        m.psnr = 27.62, m.ssim = 0.9216, m.speedup = 0.86, m.base_ms = 1395.5, m.accel_ms = 1627.3;
        m.base_kv = m.accel_kv = 42.5 * 1024 * 1024;
        m.sparvar_reference = true;
        label->setText(m.text() + " · " + m.text());
        QApplication::processEvents();
        QVERIFY2(view.minimumSizeHint().width() <= narrow,
                 qPrintable(QString("%1 px wide with the long line, %2 without")
                                .arg(view.minimumSizeHint().width())
                                .arg(narrow)));
    }

    // On CUDA the line names how each side ran (CUDA graph replays or eager steps): times compare
    // only alike. Nothing is said on the CPU, where there are no graphs.
    void cudaGraphsAreNamedPerSide() {
        using namespace varscope::gui;
        ComparisonMetrics m;
        m.valid = true;
        m.psnr = 30, m.ssim = 0.9, m.speedup = 1.5, m.base_ms = 30, m.accel_ms = 20;
        QVERIFY(!m.text().contains("graphs") && !m.text().contains("eager"));
        m.cuda = true;
        QVERIFY2(m.text().endsWith(" · eager"), qPrintable(m.text()));
        QVERIFY2(m.toolTip().contains("Both sides ran eagerly"), qPrintable(m.toolTip()));
        m.base_graphs = m.accel_graphs = true;
        QVERIFY2(m.text().endsWith(" · CUDA graphs"), qPrintable(m.text()));
        QVERIFY(!m.toolTip().contains("eagerly"));
        m.accel_graphs = false;
        QVERIFY2(m.text().endsWith(" · baseline as CUDA graphs, accelerated eager"),
                 qPrintable(m.text()));
        QVERIFY2(m.toolTip().contains("mixes two ways"), qPrintable(m.toolTip()));
        m.base_graphs = false;
        m.matched_eager = true;
        QVERIFY2(m.toolTip().contains("ran again eagerly"), qPrintable(m.toolTip()));

        // Which side the worker runs again eagerly: the one that replayed graphs.
        RunOutput base, accel;
        QVERIFY(!sideToRunAgainEagerly(base, accel));  // both eager (the CPU)
        base.cuda_graphs = true;
        QCOMPARE(sideToRunAgainEagerly(base, accel), std::optional<Side>(Side::Baseline));
        accel.cuda_graphs = true;
        QVERIFY(!sideToRunAgainEagerly(base, accel));  // both graphed
        base.cuda_graphs = false;
        QCOMPARE(sideToRunAgainEagerly(base, accel), std::optional<Side>(Side::Accelerated));
    }

    // The engine keeps accelerator records only when asked (sweeps ask for none, so that
    // methods with a graph form replay graphs on CUDA); records change nothing drawn. A graphed
    // and an eager baseline are cached apart (their times differ).
    void accelRecordsOnlyWhenAsked() {
        using namespace varscope::gui;
        Engine e;
        varscope::testing::install_tiny_model(e, true);
        GenerationSettings g;
        g.class_id = 1;
        g.seed = 3;
        g.top_k = 20;
        g.filmstrip = false;
        g.accel_json = R"({"fastvar": {"enabled": true, "ratios": [0.4, 0.5]}})";
        const RunOutput with = e.run(g, true);
        QVERIFY(!with.accel.empty());
        QVERIFY(!with.cuda && !with.cuda_graphs);
        g.accel_records = false;
        const RunOutput without = e.run(g, true);
        QVERIFY(without.accel.empty());
        QVERIFY(with.image.rgb == without.image.rgb);
        GenerationSettings eager = g;
        eager.cuda_graphs = false;
        QVERIFY(g.baseline_key("m") != eager.baseline_key("m"));
    }

    // The baseline cache key: every setting but the accelerated side's changes it, to the last
    // digit of a double (the old key wrote 6 digits: cfg 4.0000001 reused the baseline of 4.0).
    void baselineKeyCoversEverySettingButTheAccelerators() {
        const GenerationSettings g;
        const std::string k = g.baseline_key("m");
        QVERIFY(k != g.baseline_key("n"));
        auto differs = [&](auto change) {
            GenerationSettings o = g;
            change(o);
            return o.baseline_key("m") != k;
        };
        QVERIFY(differs([](GenerationSettings& o) { o.class_id = 1; }));
        QVERIFY(differs([](GenerationSettings& o) { o.prompt = "red apple"; }));
        QVERIFY(differs([](GenerationSettings& o) { o.seed = 1; }));
        QVERIFY(differs([](GenerationSettings& o) { o.cfg = 4.0000001; }));
        QVERIFY(differs([](GenerationSettings& o) { o.top_k = 901; }));
        QVERIFY(differs([](GenerationSettings& o) { o.top_p = 0.9500001; }));
        QVERIFY(differs([](GenerationSettings& o) { o.num_iter = 65; }));
        QVERIFY(differs([](GenerationSettings& o) { o.cfg_schedule = "constant"; }));
        QVERIFY(differs([](GenerationSettings& o) { o.temperature = 1.1; }));
        QVERIFY(differs([](GenerationSettings& o) { o.attention_layer = 0; }));
        QVERIFY(differs([](GenerationSettings& o) { o.filmstrip = false; }));
        QVERIFY(differs([](GenerationSettings& o) { o.cuda_graphs = false; }));
        QVERIFY(!differs([](GenerationSettings& o) { o.accel_json = R"({"fastvar": {}})"; }));
        QVERIFY(!differs([](GenerationSettings& o) { o.accel_records = false; }));
        // Fields cannot run together: class 1 seed 23 is not class 12 seed 3.
        GenerationSettings a = g, b = g;
        a.class_id = 1;
        a.seed = 23;
        b.class_id = 12;
        b.seed = 3;
        QVERIFY(a.baseline_key("m") != b.baseline_key("m"));
    }

    // The method-mask overlay (issue #35): the accelerated run's kept set over the dense map,
    // dropped entries dimmed (values unchanged), the recall of the kept entries in the corner.
    void methodMaskDimsDroppedEntries() {
        using namespace varscope::gui;
        auto base = std::make_shared<SideResult>();
        for (int64_t si : {0, 1}) {
            ScaleOutput s;
            s.scale = si;
            s.patch_num = si + 1;
            base->run.scales.push_back(s);
        }
        AttentionOutput att;  // scale 1 (2x2 queries) over 5 keys, 2 heads
        att.scale = 1;
        att.probs.shape = {2, 4, 5};
        for (int h = 0; h < 2; ++h)
            for (int i = 0; i < 4; ++i)
                for (int j = 0; j < 5; ++j)
                    att.probs.values.push_back(float(h == 0 ? j + 1 : 5 - j) / 15.f);
        base->run.attention.push_back(att);
        auto accel = std::make_shared<SideResult>(*base);
        accel->side = Side::Accelerated;
        MaskOutput m;  // per head; head 0 keeps keys {0, 4} of rows 0-1 and key 1 of rows 2-3
        m.scale = 1;
        m.heads = 2;
        m.queries = 4;
        m.keys = 5;
        m.kept.assign(2 * 4 * 5, 1);
        for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 5; ++j)
                m.kept[size_t(i * 5 + j)] = i < 2 ? (j == 0 || j == 4) : j == 1;
        accel->run.masks.push_back(m);

        AttentionInspector insp;
        insp.setDepth(1, 2);
        insp.setResults(base, accel);
        insp.setScale(1);
        insp.showMap(1, 0, 0);
        auto* box = insp.findChild<QCheckBox*>("attentionMask");
        QVERIFY(box);
        const auto before = insp.view()->grid();
        QCOMPARE(before.cols, 5);
        QVERIFY(std::isnan(insp.overlayRecall()));
        box->setChecked(true);
        QCOMPARE(insp.view()->grid().values, before.values);  // dimmed, not changed
        const auto& kept = insp.view()->keptMask();
        QCOMPARE(kept.size(), size_t(20));
        QCOMPARE(int(kept[4]), 1);          // row 0 keeps key 4
        QCOMPARE(int(kept[2]), 0);          // row 0 drops key 2
        QCOMPARE(int(kept[2 * 5 + 1]), 1);  // row 2 keeps key 1
        QCOMPARE(int(kept[2 * 5 + 4]), 0);  // row 2 drops key 4
        // Head 0: rows 0-1 keep (1 + 5) / 15, rows 2-3 keep 2 / 15.
        const double want = (2 * 6.0 / 15 + 2 * 2.0 / 15) / 4;
        QVERIFY(std::abs(insp.overlayRecall() - want) < 1e-6);
        QVERIFY(insp.view()->cornerText().contains(QString::number(want, 'f', 3)));
        // Head 1 keeps everything (its mask is all ones): recall 1.
        insp.showMap(1, 0, 1);
        QVERIFY(std::abs(insp.overlayRecall() - 1.0) < 1e-6);
        // The rendered map: a dropped cell is darker than the same colour kept.
        insp.showMap(1, 0, 0);
        box->setChecked(false);
        QVERIFY(insp.view()->keptMask().empty());
        QVERIFY(insp.view()->cornerText().isEmpty());
        QCOMPARE(insp.view()->grid().values, before.values);
    }

    // The grid view on the embedded VAR (CPU): it fills from the worker's analysis, its hover
    // numbers are core's, switching views reuses the cached analysis, a click opens that map,
    // the exports parse, and the overlay's recall is the analysis' recall.
    void attentionGridOnTheEmbeddedModel() {
        if (!Engine::embedded_available()) QSKIP("embedded model missing");
        using varscope::analysis::GridMeasure;
        MainWindow w(test_loader);
        w.resize(1400, 900);
        w.show();
        Request r;
        r.model.kind = ModelSource::Kind::Embedded;
        r.model.family = Family::Var;
        r.model.device = "cpu";
        r.gen.class_id = 4;
        r.gen.seed = 11;
        r.accel = Engine::presets(Family::Var).at("fastvar+ams_kv");
        w.applyRequest(r, true);
        QVERIFY(wait_job(w));
        QVERIFY(w.results()->accelerated() && w.results()->accelerated()->accelerated);
        auto* grid = w.inspector()->grid();
        QVERIFY(grid && !grid->current());
        QCOMPARE(grid->methodCount(), 3);       // together, FastVAR alone, AMS-KV alone
        w.inspector()->setCurrentWidget(grid);  // shown: the analysis is requested
        QTRY_VERIFY_WITH_TIMEOUT(grid->current() != nullptr, kJobTimeoutMs);
        const AnalysisOutput& a = *grid->current();
        const int scales = int(a.sides.size()), layers = int(a.layers);
        QCOMPARE(a.records.size(), size_t(scales * layers * a.heads_total));
        QVERIFY(!a.json.empty() && !a.csv.empty());

        // Scale x layer, recall: each cell the mean over heads of core's records, and the hover
        // text (the tooltip) names that number.
        QVERIFY(grid->selectMeasure(GridMeasure::Recall));
        grid->showScaleLayer();
        auto* view = grid->view();
        QCOMPARE(view->grid().rows, scales);
        QCOMPARE(view->grid().cols, layers);
        bool dropped = false;
        for (int s = 0; s < scales; ++s)
            for (int l = 0; l < layers; ++l) {
                double sum = 0;
                for (int64_t h = 0; h < a.heads_total; ++h) sum += a.find(s, l, h)->recall;
                QVERIFY(std::abs(grid->grid().at(s, l) - sum / a.heads_total) < 1e-12);
                dropped = dropped || sum / a.heads_total < 0.999;
            }
        QVERIFY(dropped);  // FastVAR + AMS-KV drop something somewhere
        const auto cell_pos = [view](int row, int col) {
            for (int y = 0; y < view->height(); y += 2)
                for (int x = 0; x < view->width(); x += 2)
                    if (view->cellAt(QPointF(x, y)) == QPoint(col, row))
                        return QPoint(x + 1, y + 1);
            return QPoint(-1, -1);
        };
        const auto number_after_equals = [](const QString& text) {
            const int i = text.indexOf(" = ");
            return i < 0 ? std::nan("")
                         : text.mid(i + 3).section(' ', 0, 0).section(':', 0, 0).toDouble();
        };
        const int hs = scales - 1, hl = layers - 1;
        const QPoint p = cell_pos(hs, hl);
        QVERIFY(p.x() >= 0);
        QTest::mouseMove(view, p);
        QVERIFY(view->toolTip().contains(QString("scale %1").arg(hs)));
        QVERIFY(std::abs(number_after_equals(view->toolTip()) - grid->grid().at(hs, hl)) < 1e-7);

        // Every measure and both views from the cache: timed (printed, not asserted).
        QElapsedTimer t;
        t.start();
        int switches = 0;
        for (size_t m = 0; m < varscope::analysis::grid_measure_names().size(); ++m) {
            QVERIFY(grid->selectMeasure(GridMeasure(m)));
            view->repaint();  // the switch as the user sees it: the grid and its picture
            grid->showLayerHead(scales - 1);
            view->repaint();
            grid->showScaleLayer();
            view->repaint();
            switches += 3;
        }
        qInfo(
            "grid view switch: %.2f ms each, painted (%d switches, embedded VAR, cached "
            "analysis)",
            double(t.nsecsElapsed()) / 1e6 / switches, switches);

        // Layer x head at the last scale: each cell is one record.
        QVERIFY(grid->selectMeasure(GridMeasure::OutputError));
        QVERIFY(grid->showLayerHead(scales - 1));
        QCOMPARE(view->grid().rows, layers);
        QCOMPARE(view->grid().cols, int(a.heads_total));
        for (int l = 0; l < layers; ++l)
            for (int h = 0; h < int(a.heads_total); ++h)
                QCOMPARE(grid->grid().at(l, h), a.find(scales - 1, l, h)->output_error);
        QTest::mouseMove(view, cell_pos(0, 1));
        QVERIFY(std::abs(number_after_equals(view->toolTip()) -
                         a.find(scales - 1, 0, 1)->output_error) < 1e-7);

        // Exports: the labelled figure (PNG, SVG), the cells, and analyze's JSON and CSV.
        QTemporaryDir dir;
        QString error;
        for (const QString name : {"grid.png", "grid.svg"})
            QVERIFY2(grid->exportTo(dir.filePath(name), AttentionGrid::ExportKind::Figure, &error),
                     qPrintable(error));
        const QImage png(dir.filePath("grid.png"));
        QVERIFY(png.width() > 200 && png.height() > 100);
        QFile svg(dir.filePath("grid.svg"));
        QVERIFY(svg.open(QIODevice::ReadOnly));
        const QByteArray svg_text = svg.readAll();
        QVERIFY(svg_text.contains("<svg") && svg_text.contains("head") &&
                svg_text.contains("layer"));
        QVERIFY(
            grid->exportTo(dir.filePath("cells.csv"), AttentionGrid::ExportKind::GridCsv, &error));
        QFile cells(dir.filePath("cells.csv"));
        QVERIFY(cells.open(QIODevice::ReadOnly));
        const QStringList lines = QString::fromUtf8(cells.readAll()).trimmed().split('\n');
        QCOMPARE(lines.size(), 1 + layers * int(a.heads_total));
        QCOMPARE(lines[0], QString("scale,layer,head,output_error"));
        const QStringList first = lines[1].split(',');
        QCOMPARE(first.size(), 4);
        QVERIFY(std::abs(first[3].toDouble() -
                         a.find(first[0].toLongLong(), first[1].toLongLong(), first[2].toLongLong())
                             ->output_error) < 1e-7);
        QVERIFY(grid->exportTo(dir.filePath("measures.json"),
                               AttentionGrid::ExportKind::MeasuresJson, &error));
        QFile js(dir.filePath("measures.json"));
        QVERIFY(js.open(QIODevice::ReadOnly));
        const auto j = nlohmann::json::parse(js.readAll().toStdString());
        QCOMPARE(j["records"].size(), a.records.size());
        QCOMPARE(j["schedule"].size(), size_t(scales));
        QVERIFY(j.contains("typing_rule") && j.contains("head_types"));
        QVERIFY(grid->exportTo(dir.filePath("measures.csv"), AttentionGrid::ExportKind::MeasuresCsv,
                               &error));
        QVERIFY(QFileInfo(dir.filePath("measures.csv")).size() > 100);

        // A click on a cell: that map (scale, layer, head) in the attention tab.
        QTest::mouseClick(view, Qt::LeftButton, {}, cell_pos(0, 1));
        auto* att = w.inspector()->attention();
        QCOMPARE(w.inspector()->currentWidget(), static_cast<QWidget*>(att));
        QCOMPARE(att->scale(), scales - 1);
        QCOMPARE(att->layer(), 0);
        QCOMPARE(att->head(), 1);
        QVERIFY(att->view()->hasData());

        // The overlay's recall on the baseline's map is the analysis' recall (the together
        // method, the run's mask), head by head, at every scale of the recorded layer 0.
        auto* box = att->findChild<QCheckBox*>("attentionMask");
        QVERIFY(box);
        box->setChecked(true);
        for (int s = 0; s < scales; ++s)
            for (int h = 0; h < int(a.heads_total); ++h) {
                att->showMap(s, 0, h);
                const double core = a.find(s, 0, h)->recall;
                QVERIFY2(std::abs(att->overlayRecall() - core) < 1e-4,
                         qPrintable(QString("scale %1 head %2: overlay %3, core %4")
                                        .arg(s)
                                        .arg(h)
                                        .arg(att->overlayRecall())
                                        .arg(core)));
            }
        QVERIFY(att->view()->cornerText().startsWith("recall"));

        // Another method: a second analysis; back to the first comes from the cache at once.
        w.inspector()->setCurrentWidget(grid);
        QVERIFY(grid->selectMethod(1));
        QVERIFY(!grid->current());
        QTRY_VERIFY_WITH_TIMEOUT(grid->current() != nullptr, kJobTimeoutMs);
        QCOMPARE(grid->cachedAnalyses(), 2);
        QVERIFY(grid->selectMethod(0));
        QVERIFY(grid->current() == &a);
        QVERIFY(wait_job(w));
    }

    // The attention inspector in a 420-px dock (narrower than the app's default) keeps the scale
    // and head boxes' whole text (before, its one-row bar needed ~640 px, and "9: 16×16" was cut
    // to "9: 16×1").
    void attentionBarKeepsItsTextWhenNarrow() {
        using namespace varscope::gui;
        auto base = std::make_shared<SideResult>();
        for (int64_t si : {0, 1, 2}) {
            ScaleOutput s;
            s.scale = si;
            s.patch_num = 8 * si + 8;
            base->run.scales.push_back(s);
        }
        QWidget dock;
        auto* layout = new QVBoxLayout(&dock);
        auto* insp = new AttentionInspector(&dock);
        layout->addWidget(insp);
        insp->setDepth(1, 4);
        insp->setResults(base, nullptr);
        insp->setScale(2);
        dock.setFixedSize(420, 300);
        dock.show();
        QVERIFY(QTest::qWaitForWindowExposed(&dock));
        for (const char* name : {"attentionScale", "attentionHead"}) {
            auto* box = insp->findChild<QComboBox*>(name);
            QVERIFY2(box, name);
            QVERIFY2(!box->currentText().isEmpty(), name);
            QVERIFY2(box->width() >= box->sizeHint().width(),
                     qPrintable(QString("%1: %2 px for a hint of %3")
                                    .arg(name)
                                    .arg(box->width())
                                    .arg(box->sizeHint().width())));
        }
    }

    // The accelerator tabs keep the record kind's whole name in a 420-px dock (in one row it read
    // "cs4a_sele"), and the SparVAR tab opens on the CSLA token mask although CS4A's records come
    // first; a kind the user picked is kept over the preference on the next run.
    void accelBarKeepsItsTextAndSparVarOpensOnTheMask() {
        using namespace varscope::gui;
        auto run = [](const std::vector<std::string>& kinds) {
            auto r = std::make_shared<SideResult>();
            r->side = Side::Accelerated;
            for (int64_t si : {0, 1}) {
                ScaleOutput s;
                s.scale = si;
                s.patch_num = 4 * si + 4;
                r->run.scales.push_back(s);
            }
            for (const auto& k : kinds) {
                AccelOutput a;
                a.method = "sparvar";
                a.kind = k;
                a.scale = 1;
                a.data.shape = {2, 3};
                a.data.values = {1, 0, 1, 0, 1, 1};
                r->run.accel.push_back(a);
            }
            return r;
        };
        const auto first =
            run({"cs4a_selected", "cs4a_mapped", "csla_token_mask", "csla_block_mask"});
        QWidget dock;
        auto* layout = new QVBoxLayout(&dock);
        auto* all = new AccelInspector("", "hint", &dock);
        auto* sparvar = new AccelInspector("sparvar", "hint", &dock);
        sparvar->setPreferredKind("sparvar/csla_token_mask");
        layout->addWidget(all);
        layout->addWidget(sparvar);
        all->setResults(nullptr, first);
        sparvar->setResults(nullptr, first);
        dock.setFixedSize(420, 600);
        dock.show();
        QVERIFY(QTest::qWaitForWindowExposed(&dock));
        QCOMPARE(sparvar->currentKind(), QString("sparvar/csla_token_mask"));
        QCOMPARE(all->currentKind(), QString("sparvar/cs4a_selected"));  // no preference there
        for (auto* tab : {all, sparvar}) {
            auto* box = tab->findChild<QComboBox*>("kind");
            QVERIFY(box);
            QVERIFY2(box->width() >= box->sizeHint().width(),
                     qPrintable(QString("%1: %2 px for a hint of %3")
                                    .arg(box->currentText())
                                    .arg(box->width())
                                    .arg(box->sizeHint().width())));
        }
        QVERIFY(sparvar->selectKind("sparvar/cs4a_mapped"));
        sparvar->setResults(nullptr, run({"cs4a_selected", "cs4a_mapped", "csla_block_mask"}));
        QCOMPARE(sparvar->currentKind(), QString("sparvar/cs4a_mapped"));
        sparvar->setResults(nullptr, run({"cs4a_selected"}));  // CSLA off: the first kind
        QCOMPARE(sparvar->currentKind(), QString("sparvar/cs4a_selected"));
    }

    // Known 2-D records name their axes in the title and the hover readout (AMS-KV's occupancy:
    // layers × source scales; before, "[1, 2]"), and the AMS-KV tab opens on the occupancy.
    void accelRecordsNameTheirAxes() {
        using namespace varscope::gui;
        auto r = std::make_shared<SideResult>();
        r->side = Side::Accelerated;
        for (int64_t si : {0, 1, 2}) {
            ScaleOutput s;
            s.scale = si;
            s.patch_num = si + 1;
            r->run.scales.push_back(s);
        }
        for (const char* kind : {"kv_bytes", "kv_occupancy"}) {
            AccelOutput a;
            a.method = "ams_kv";
            a.kind = kind;
            a.scale = 2;
            a.data.shape = std::string(kind) == "kv_bytes" ? std::vector<int64_t>{4}
                                                           : std::vector<int64_t>{4, 3};
            a.data.values.assign(std::string(kind) == "kv_bytes" ? 4 : 12, 1.f);
            r->run.accel.push_back(a);
        }
        AccelInspector tab("ams_kv", "hint");
        tab.setPreferredKind("ams_kv/kv_occupancy");  // as Inspector sets it
        tab.setResults(nullptr, r);
        QCOMPARE(tab.currentKind(), QString("ams_kv/kv_occupancy"));
        QVERIFY2(tab.view()->title().endsWith(" · layer × source scale"),
                 qPrintable(tab.view()->title()));
        // Shown as the share of each source scale's tokens (scales of 1, 4 and 9 tokens here).
        QCOMPARE(tab.view()->cellLabel(1, 2), QString("layer 1, source scale 2 (1 of 9 tokens)"));
        QCOMPARE(tab.view()->grid().at(1, 0), 1.f);
        QCOMPARE(tab.view()->grid().at(1, 1), 0.25f);
        QVERIFY(tab.selectKind("ams_kv/kv_bytes"));
        QVERIFY2(!tab.view()->title().contains("source scale"), qPrintable(tab.view()->title()));
        Inspector insp;  // the real tabs get the preferences
        bool found = false;
        for (auto* t : insp.findChildren<AccelInspector*>()) {
            if (t->objectName() != "inspector.ams_kv") continue;
            t->setResults(nullptr, r);
            QCOMPARE(t->currentKind(), QString("ams_kv/kv_occupancy"));
            found = true;
        }
        QVERIFY(found);
    }

    // Filmstrip captions never run into their neighbours, and one strip uses one form: 16 MAR
    // steps in a narrow strip read "1 … 16" (before, "step 1" … "step 9" overlapped, then
    // "10" … "16"); a wide strip keeps "step 1".
    void filmstripCaptionsFitTheirFrames() {
        using varscope::gui::Filmstrip;
        QVector<QImage> frames;
        QStringList captions;
        for (int i = 1; i <= 16; ++i) {
            QImage img(8, 8, QImage::Format_RGB32);
            img.fill(Qt::gray);
            frames << img;
            captions << QString("step %1").arg(i);
        }
        Filmstrip strip;
        strip.setFrames(frames, captions);
        strip.resize(400, strip.sizeHint().height());
        const QStringList shown = strip.shownCaptions();
        QCOMPARE(shown.size(), 16);
        const int pitch = (400 - 2) / 16;  // Filmstrip::frameRect's side + 2
        QFont f = strip.font();
        f.setPointSizeF(f.pointSizeF() * 0.85);
        const QFontMetrics fm(f);
        for (int i = 0; i < 16; ++i) {
            QCOMPARE(shown[i], QString::number(i + 1));
            QVERIFY2(fm.horizontalAdvance(shown[i]) <= pitch, qPrintable(shown[i]));
        }
        Filmstrip wide;
        wide.setFrames(frames.mid(0, 3), captions.mid(0, 3));
        wide.resize(400, wide.sizeHint().height());
        QCOMPARE(wide.shownCaptions(), QStringList({"step 1", "step 2", "step 3"}));
    }

    // Figure notes wrap instead of running off the right edge: a long JSON note (no spaces) takes
    // several lines and the figure grows to hold them; short notes keep one line each.
    void figureNotesWrap() {
        using namespace varscope::viz;
        Figure f;
        f.panels.push_back({QImage(64, 64, QImage::Format_RGB32), "baseline"});
        f.columns = 1;
        f.cell = 200;
        f.notes = {"Class 1891 (heart)", "seed 0"};
        const int short_h = figure_size(f).height();
        QString json = "Accelerators: {";
        for (int i = 0; i < 40; ++i) json += QString("\"key_%1\":%2,").arg(i).arg(i * 0.125);
        f.notes = {"Class 1891 (heart)", json + "}"};
        const QSize long_size = figure_size(f);
        QCOMPARE(long_size.width(), 480);  // the width stays; the note wraps
        QVERIFY2(long_size.height() >= short_h + 3 * 12,
                 qPrintable(QString("%1 vs %2").arg(long_size.height()).arg(short_h)));
        // The wrapped lines are drawn: ink on the figure's last text rows, above the padding.
        const QImage img = render_figure(f, 1.0);
        int dark = 0;
        for (int y = img.height() - 16 - 24; y < img.height() - 16; ++y)
            for (int x = 0; x < img.width(); ++x) dark += qGray(img.pixel(x, y)) < 128;
        QVERIFY(dark > 20);
    }

    // Legends go where the curves are not: top left for VAR's rising per-scale curves, a bottom
    // corner for MAR's flat per-step latencies (which cross the top left).
    void legendsAvoidTheCurves() {
        auto plot_of = [](const QVector<double>& y) {
            auto* p = new QCustomPlot;
            p->addGraph();
            QVector<double> x;
            for (int i = 0; i < y.size(); ++i) x << i;
            p->graph(0)->setData(x, y);
            p->rescaleAxes();
            p->yAxis->setRange(0, *std::max_element(y.begin(), y.end()) * 1.1);
            return std::unique_ptr<QCustomPlot>(p);
        };
        const auto rising = plot_of({1, 2, 4, 8, 16, 30, 60, 120, 200, 400});
        QCOMPARE(emptiest_corner(rising.get()), Qt::AlignTop | Qt::AlignLeft);
        const auto flat = plot_of({90, 80, 85, 95, 100, 92, 88, 97, 99, 100, 96, 94, 98, 95, 100});
        QVERIFY(emptiest_corner(flat.get()) & Qt::AlignBottom);
        const auto falling = plot_of({400, 200, 120, 60, 30, 16, 8, 4, 2, 1});
        QCOMPARE(emptiest_corner(falling.get()), Qt::AlignTop | Qt::AlignRight);
        // Data in every corner (LazyMAR's computed fraction high, its drift low): the y axis
        // grows upwards until a corner is free, and the legend goes there.
        const auto crowded = plot_of({100, 5, 95, 3, 100, 90, 4, 98, 2, 97, 100, 6, 99, 1, 100});
        int under = -1;
        emptiest_corner(crowded.get(), &under);
        QVERIFY(under > 0);
        place_legend(crowded.get());
        QVERIFY(emptiest_corner(crowded.get(), &under) & Qt::AlignTop);
        QCOMPARE(under, 0);
        QVERIFY(crowded->yAxis->range().upper > 110);
    }

    void heatmapsAndOverlays() {
        using namespace varscope::viz;
        FloatGrid g(2, 3, {0, 1, 2, 3, 4, NAN});
        QCOMPARE(g.range().first, 0.f);
        QCOMPARE(g.range().second, 4.f);
        const QImage img = render_heatmap(g, Colormap::Gray, {0, 4});
        QCOMPARE(img.size(), QSize(3, 2));
        QCOMPARE(qRed(img.pixel(0, 0)), 0);
        QCOMPARE(qRed(img.pixel(1, 1)), 255);
        QCOMPARE(colormap_rgb(Colormap::Viridis, 0.0), qRgb(68, 1, 84));
        QImage base(30, 20, QImage::Format_RGB32);
        base.fill(Qt::black);
        const QImage over =
            token_overlay(base, FloatGrid(1, 2, {0, 1}), Colormap::Gray, {0, 1}, 1.0);
        QCOMPARE(qRed(over.pixel(25, 10)), 255);
        QCOMPARE(qRed(over.pixel(2, 10)), 0);
        const FloatGrid d = image_difference(base, over.convertToFormat(QImage::Format_RGB32));
        QCOMPARE(d.at(10, 25), 1.f);
        QCOMPARE(d.at(10, 2), 0.f);
        HeatmapView view;
        view.resize(300, 200);
        view.setGrid(g);
        view.show();
        QVERIFY(view.hasData());
        QVERIFY(!view.grab().isNull());
        // A kept mask dims the dropped cells to a quarter of their colour; the values stay.
        const auto cell_centre = [&view](int row, int col) {
            for (int y = 0; y < view.height(); ++y)
                for (int x = 0; x < view.width(); ++x)
                    if (view.cellAt(QPointF(x, y)) == QPoint(col, row)) {
                        int x1 = x, y1 = y;
                        while (view.cellAt(QPointF(x1 + 1, y)) == QPoint(col, row)) ++x1;
                        while (view.cellAt(QPointF(x, y1 + 1)) == QPoint(col, row)) ++y1;
                        return QPoint((x + x1) / 2, (y + y1) / 2);
                    }
            return QPoint(-1, -1);
        };
        view.setColormap(Colormap::Gray);
        const QPoint bright = cell_centre(1, 1);  // value 4: white
        QVERIFY(bright.x() >= 0);
        const int before = qRed(view.grab().toImage().pixel(bright * view.devicePixelRatio()));
        view.setKeptMask({1, 1, 1, 1, 0, 1});
        const int after = qRed(view.grab().toImage().pixel(bright * view.devicePixelRatio()));
        QVERIFY2(before > 200 && std::abs(after - before / 4) <= 2,
                 qPrintable(QString("%1 -> %2").arg(before).arg(after)));
        QCOMPARE(view.grid().at(1, 1), 4.f);
        view.setCornerText("recall 0.5");
        QCOMPARE(view.cornerText(), QString("recall 0.5"));
        view.setGrid(g);  // a new grid drops the mask and its note
        QVERIFY(view.keptMask().empty() && view.cornerText().isEmpty());
        // Clicks name their cell; hover tooltips when asked for.
        QSignalSpy clicked(&view, &HeatmapView::cellClicked);
        view.setCellToolTips(true);
        QTest::mouseMove(&view, bright);
        QVERIFY(view.toolTip().startsWith("row 1, col 1"));
        QTest::mouseClick(&view, Qt::LeftButton, {}, bright);
        QCOMPARE(clicked.count(), 1);
        QCOMPARE(clicked[0][0].toInt(), 1);
        QCOMPARE(clicked[0][1].toInt(), 1);
        // A figure's panel is rendered at a fixed size, not the widget's: a wide, flat view's
        // title would otherwise shrink to a few points in the figure's square cell.
        HeatmapView flat;  // a wide, flat view
        flat.setGrid(g);
        flat.resize(1400, 180);
        flat.setTitle("Scale 6 attention");
        flat.setKeepAspect(false);  // as the attention tab: the map fills the panel
        const QImage panel = flat.render(QSize(320, 320), 2.0);
        QCOMPARE(panel.size(), QSize(640, 640));
        QCOMPARE(panel.devicePixelRatio(), 2.0);
        auto dark_pixels = [&panel](QRect r) {  // text is dark on the light base
            int n = 0;
            for (int y = r.top(); y <= r.bottom(); ++y)
                for (int x = r.left(); x <= r.right(); ++x) n += qGray(panel.pixel(x, y)) < 100;
            return n;
        };
        QVERIFY(dark_pixels(QRect(0, 0, 300, 40)) > 50);  // the title, in the top rows
        // The map fills the render's height (320), not the widget's (180).
        QVERIFY(qGray(panel.pixel(120, 500)) != qGray(panel.pixel(2, 500)));
    }

    // The exported grid figure: labelled axes and a colour scale around the cells, grey where
    // nothing was measured, PNG and SVG.
    void gridFigureIsLabelled() {
        using namespace varscope::viz;
        GridFigure f;
        f.grid = FloatGrid(2, 3, {0, 1, 2, 3, 4, NAN});
        f.title = "recall · test";
        f.row_axis = "scale";
        f.col_axis = "layer";
        f.row_labels = {"0 (1×1)", "1 (2×2)"};
        f.legend = "recall";
        f.cmap = Colormap::Gray;
        const QSize size = grid_figure_size(f);
        QVERIFY(size.width() > 3 * f.cell + 60 && size.height() > 2 * f.cell + 40);
        const QImage img = render_grid_figure(f, 1.0);
        QCOMPARE(img.size(), size);
        // The NaN cell is grey ("not measured"): one cell's worth of that grey.
        int grey = 0;
        for (int y = 0; y < img.height(); ++y)
            for (int x = 0; x < img.width(); ++x) grey += img.pixel(x, y) == qRgb(190, 190, 190);
        QVERIFY(grey >= (f.cell - 2) * (f.cell - 2));
        QTemporaryDir dir;
        QString error;
        QVERIFY2(write_grid_figure(f, dir.filePath("g.svg"), &error), qPrintable(error));
        QFile svg(dir.filePath("g.svg"));
        QVERIFY(svg.open(QIODevice::ReadOnly));
        const QString text = QString::fromUtf8(svg.readAll());
        for (const char* label : {"scale", "layer", "recall", "1 (2×2)"})
            QVERIFY2(text.contains(label), qPrintable(label));
        QVERIFY(write_grid_figure(f, dir.filePath("g.png"), &error));
        QCOMPARE(QImage(dir.filePath("g.png")).size(), size * 2);
        QVERIFY(!write_grid_figure(f, "/proc/varscope-no/g.png", &error));
        QVERIFY(error.contains("/proc/varscope-no/g.png"));
    }

    // --- widgets ----------------------------------------------------------------------------
    void methodPanelFollowsSpecs() {
        MethodPanel panel;
        const auto& methods = Engine::methods();
        QVERIFY(!methods.empty());
        for (const auto& m : methods) {
            auto* enable = panel.findChild<QCheckBox*>(QString::fromStdString(m.id + ".enabled"));
            QVERIFY2(enable, m.id.c_str());
            QVERIFY(!panel.config()[m.id]["enabled"].get<bool>());
            enable->setChecked(true);
            QVERIFY(panel.config()[m.id]["enabled"].get<bool>());
            enable->setChecked(false);
            for (const auto& p : m.params) {
                const QString name = QString::fromStdString(m.id + "." + p.key);
                QVERIFY2(panel.findChild<QWidget*>(name), qPrintable(name));
                const auto value = panel.config()[m.id][p.key];  // the paper default
                if (p.kind == varscope::ParamKind::Real)
                    QVERIFY(std::abs(value.get<double>() - p.default_value.get<double>()) < 1e-4);
                else
                    QVERIFY2(value == p.default_value, qPrintable(name));
                if (p.kind == varscope::ParamKind::Int) {
                    auto* spin = panel.findChild<QSpinBox*>(name);
                    auto* slider = panel.findChild<QSlider*>(name + ".slider");
                    QVERIFY(spin && slider);
                    slider->setValue(slider->maximum());
                    QCOMPARE(panel.config()[m.id][p.key].get<int64_t>(), int64_t(p.max));
                    QVERIFY(
                        spin->toolTip().contains(QString::fromStdString(p.symbol).toHtmlEscaped()));
                } else if (p.kind == varscope::ParamKind::Real) {
                    auto* slider = panel.findChild<QSlider*>(name + ".slider");
                    slider->setValue(slider->maximum());
                    QVERIFY(std::abs(panel.config()[m.id][p.key].get<double>() - p.max) < 1e-9);
                } else if (p.kind == varscope::ParamKind::IntList ||
                           p.kind == varscope::ParamKind::RealList) {
                    auto* edit = panel.findChild<QLineEdit*>(name);
                    edit->setText("1e9");  // out of every sensible range
                    emit edit->editingFinished();
                    QVERIFY(!panel.valid());
                    QVERIFY(panel.validationError().contains(
                        QString::fromStdString(m.id + "." + p.key)));
                    edit->setText(
                        QString::fromStdString(p.default_value.dump()).remove('[').remove(']'));
                    emit edit->editingFinished();
                    QVERIFY2(panel.valid(), qPrintable(panel.validationError()));
                }
            }
        }
        // Presets switch methods on with their defaults.
        for (const auto& m : methods) {
            QVERIFY(panel.applyPreset(QString::fromStdString(m.id)));
            QVERIFY(panel.config()[m.id]["enabled"].get<bool>());
        }
        QVERIFY(panel.applyPreset("baseline"));
        for (const auto& m : methods) QVERIFY(!panel.config()[m.id]["enabled"].get<bool>());
        // Names match whatever the case (users type "FastVAR"); unknown names change nothing.
        QVERIFY(panel.applyPreset("FastVAR"));
        QVERIFY(panel.config()["fastvar"]["enabled"].get<bool>());
        const auto before = panel.config();
        QVERIFY(!panel.applyPreset("fastvar2"));
        QCOMPARE(panel.config(), before);
    }

    // Settings that count scales, tokens, steps or blocks are bounded by the loaded model: the
    // slider spans what the model accepts (LazyMAR's first cached step was 0..4096 for 16
    // steps), a value above is lowered with one configChanged, unknown counts give the spec's.
    void slidersFollowTheModelCounts() {
        MethodPanel panel;
        auto* last_n = panel.findChild<QSpinBox*>("skip.last_n");
        auto* last_n_slider = panel.findChild<QSlider*>("skip.last_n.slider");
        auto* c_min = panel.findChild<QSpinBox*>("ams_kv.c_min");
        QVERIFY(last_n && last_n_slider && c_min);
        last_n->setValue(12);
        QSignalSpy spy(&panel, &MethodPanel::configChanged);
        varscope::ModelCounts var;
        var.scales = 10;
        var.tokens = 680;
        panel.setModelCounts(var);
        QCOMPARE(last_n->maximum(), 9);
        QCOMPARE(last_n_slider->maximum(), 9);
        QCOMPARE(last_n->value(), 9);
        QCOMPARE(panel.config()["skip"]["last_n"].get<int>(), 9);
        QCOMPARE(spy.count(), 1);
        QCOMPARE(c_min->maximum(), 680);
        QVERIFY(last_n->toolTip().contains("Range on this model: [0, 9]"));
        panel.setModelCounts(varscope::ModelCounts{});  // unknown: the spec's range again
        QCOMPARE(last_n->maximum(), 12);
        QCOMPARE(c_min->maximum(), 100000);

        panel.setFamily(Family::Mar);
        auto* start = panel.findChild<QSpinBox*>("lazymar.start_step");
        auto* start_slider = panel.findChild<QSlider*>("lazymar.start_step.slider");
        QVERIFY(start && start_slider);
        varscope::ModelCounts mar;
        mar.steps = 16;
        mar.decoder_blocks = 4;
        panel.setModelCounts(mar);
        QCOMPARE(start->maximum(), 15);
        QCOMPARE(start_slider->maximum(), 15);  // one slider step per decoding step
        start_slider->setValue(7);
        QCOMPARE(start->value(), 7);
        // A value the bound lowered comes back when the bound rises again (the user's setting
        // is not lost by trying fewer steps), also for a preset's value.
        mar.steps = 64;
        panel.setModelCounts(mar);
        start->setValue(20);
        mar.steps = 16;
        panel.setModelCounts(mar);
        QCOMPARE(start->value(), 15);
        mar.steps = 64;
        panel.setModelCounts(mar);
        QCOMPARE(start->value(), 20);
        nlohmann::json cfg = panel.config();
        cfg["lazymar"]["start_step"] = 40;
        mar.steps = 16;
        panel.setModelCounts(mar);
        panel.setConfig(cfg);
        QCOMPARE(start->value(), 15);
        mar.steps = 64;
        panel.setModelCounts(mar);
        QCOMPARE(start->value(), 40);
        QCOMPARE(panel.findChild<QSpinBox*>("lazymar.similarity_layer")->maximum(), 3);
    }

    // The sweep's range is the chosen setting's whole range on the loaded model.
    void sweepRangeFollowsTheModel() {
        PlotsPanel plots;
        auto* method = plots.findChild<QComboBox*>("sweepMethod");
        auto* param = plots.findChild<QComboBox*>("sweepParam");
        auto* to = plots.findChild<QDoubleSpinBox*>("sweepTo");
        QVERIFY(method && param && to);
        method->setCurrentIndex(method->findData("skip"));
        param->setCurrentIndex(param->findData("last_n"));
        QCOMPARE(to->value(), 12.0);
        varscope::ModelCounts var;
        var.scales = 10;
        plots.setModelCounts(var);
        QCOMPARE(to->value(), 9.0);
        QCOMPARE(to->maximum(), 9.0);
        to->setValue(5);  // the user's range stays while the setting's bound does
        var.tokens = 680;
        plots.setModelCounts(var);
        QCOMPARE(to->value(), 5.0);
        plots.setFamily(Family::Mar);
        varscope::ModelCounts mar;
        mar.steps = 16;
        plots.setModelCounts(mar);
        method->setCurrentIndex(method->findData("lazymar"));
        param->setCurrentIndex(param->findData("start_step"));
        QCOMPARE(to->value(), 15.0);
        const auto values = plots.sweepValues();
        QVERIFY(!values.empty() && values.back() == 15.0);
    }

    // A preset whose start scale is an index for a longer schedule (LazyVAR's, 10 scales) on the
    // 7-scale embedded text-to-image model: fitted with a note (the pruned scales stay the last
    // ones), one configChanged, the hooks build; a larger model gets the preset's value back.
    void presetsFitTheModelsSchedule() {
        MethodPanel panel;
        panel.setFamily(Family::Infinity);
        QVERIFY(panel.presetNames().contains("infinity-lazyvar"));  // the papers' Infinity settings
        varscope::ModelCounts seven;
        seven.scales = 7;
        seven.tokens = 521;
        panel.setModelCounts(seven);
        QSignalSpy spy(&panel, &MethodPanel::configChanged);
        QVERIFY(panel.applyPreset("lazyvar"));
        QCOMPARE(spy.count(), 1);
        const nlohmann::json cfg = panel.config();
        QCOMPARE(cfg["lazyvar"]["start_scale"].get<int64_t>(), int64_t(4));
        QCOMPARE(cfg["lazyvar"]["ratios"].size(), size_t(3));
        QVERIFY(panel.valid());
        QVERIFY2(panel.fitNote().contains("start_scale 7 -> 4"), qPrintable(panel.fitNote()));
        QCOMPARE(panel.findChild<QLabel*>("methodMessage")->text(), panel.fitNote());
        // What the accelerated run builds from it (the field's message otherwise): a setting
        // that fits leaves the fit alone.
        std::vector<std::string> notes;
        QCOMPARE(Engine::fit_accel(cfg, Family::Infinity, 7, &notes), cfg);
        QVERIFY(notes.empty());

        varscope::ModelCounts ten;
        ten.scales = 10;
        ten.tokens = 680;
        panel.setModelCounts(ten);
        QCOMPARE(panel.config()["lazyvar"]["start_scale"].get<int64_t>(), int64_t(7));
        QVERIFY(panel.fitNote().isEmpty());
        // Back on the small model the fit (and its note) return; moving a setting clears the note.
        panel.setModelCounts(seven);
        QCOMPARE(panel.config()["lazyvar"]["start_scale"].get<int64_t>(), int64_t(4));
        QVERIFY(!panel.fitNote().isEmpty());
        panel.findChild<QSpinBox*>("lazyvar.group_size")->setValue(1);
        QVERIFY(panel.fitNote().isEmpty());
        // Infinity-2B's preset (13 scales) on the same model: start 9 -> 3.
        QVERIFY(panel.applyPreset("infinity-lazyvar"));
        QCOMPARE(panel.config()["lazyvar"]["start_scale"].get<int64_t>(), int64_t(3));
        QVERIFY(panel.valid());
    }

    void sliderChangesEmitConfig() {
        MethodPanel panel;
        QSignalSpy spy(&panel, &MethodPanel::configChanged);
        auto* slider = panel.findChild<QSlider*>("skip.last_n.slider");
        if (!slider) QSKIP("scale skipping exposes no last_n slider");
        panel.findChild<QCheckBox*>("skip.enabled")->setChecked(true);
        slider->setValue(2);
        QVERIFY(spy.count() >= 2);
        QCOMPARE(panel.config()["skip"]["last_n"].get<int64_t>(), int64_t(2));
        QCOMPARE(panel.findChild<QSpinBox*>("skip.last_n")->value(), 2);
    }

    void devicePickerReflectsCuda() {
        ModelPanel panel;
        auto* combo = panel.findChild<QComboBox*>();
        QVERIFY(combo);
        bool found = false;
        for (auto* c : panel.findChildren<QComboBox*>()) {
            const int i = c->findData("cuda");
            if (i < 0) continue;
            found = true;
            auto* items = qobject_cast<QStandardItemModel*>(c->model());
            QCOMPARE(items->item(i)->isEnabled(), Engine::cuda_available());
        }
        QVERIFY(found);
    }

    void promptSuggestsClasses() {
        if (!Engine::embedded_available()) QSKIP("embedded model missing");
        ModelPanel panel;
        panel.setFamily(Family::Var);  // class prompts: the first launch may open the t2i model
        const QString list =
            QString::fromStdString(varscope_source_dir()) + "/resources/models/emoji-classes.json";
        if (!QFile::exists(list)) QSKIP("no emoji class list");
        panel.setClassList(list, 1911);
        panel.promptEdit()->setText("red heart");
        emit panel.promptEdit()->textEdited("red heart");
        QVERIFY(panel.suggestions()->count() > 0);
        QVERIFY(panel.suggestions()->item(0)->text().contains("HEART", Qt::CaseInsensitive));
        QCOMPARE(panel.classBox()->value(),
                 panel.suggestions()->item(0)->data(Qt::UserRole).toInt());
    }

    void modelRecommendationSetsSampling() {
        if (!Engine::embedded_available()) QSKIP("embedded model missing");
        const varscope::SamplingRecommendation rec = Engine::embedded_recommendation();
        QVERIFY(rec.top_k.has_value());
        ModelPanel panel;  // first launch: the embedded model's recommendation
        auto* top_k = panel.findChild<QSpinBox*>("topK");
        QVERIFY(top_k);
        if (Engine::embedded_t2i_available()) {
            // The first launch opens the text-to-image model (its official top-k 900); picking
            // the embedded VAR applies the VAR's recommendation.
            QCOMPARE(panel.family(), Family::Infinity);
            QCOMPARE(top_k->value(), 900);
            QVERIFY(panel.pickModel(ModelSource{}));
        }
        QCOMPARE(int64_t(top_k->value()), *rec.top_k);
        auto* button = panel.findChild<QToolButton*>("useRecommended");
        QVERIFY(button && button->isEnabled());
        top_k->setValue(500);
        QSignalSpy changed(&panel, &ModelPanel::settingsChanged);
        button->click();
        QCOMPARE(int64_t(top_k->value()), *rec.top_k);
        QCOMPARE(changed.count(), 1);
        // A model without a recommendation loaded without the user picking it: nothing moves.
        top_k->setValue(500);
        panel.setLoadedModelRecommendation({});
        QCOMPARE(top_k->value(), 500);
        QVERIFY(!button->isEnabled());
    }

    // A text-to-image model: the prompt box is its text (no class picker, no suggestions); the
    // text is announced after a pause or on Enter, as the class prompt is; back on a class model
    // the class picker returns.
    void textToImagePromptReplacesTheClassPicker() {
        ModelPanel panel;
        panel.setFamily(Family::Infinity);
        QVERIFY(panel.promptEdit()->isEnabled());
        QVERIFY(panel.promptEdit()->isVisibleTo(&panel));
        QVERIFY(!panel.classBox()->isVisibleTo(&panel));
        QVERIFY(!panel.suggestions()->isVisibleTo(&panel));
        QSignalSpy changed(&panel, &ModelPanel::settingsChanged);
        QSignalSpy run(&panel, &ModelPanel::runRequested);
        panel.promptEdit()->setText("thumbs up, dark skin tone");
        emit panel.promptEdit()->textEdited(panel.promptEdit()->text());
        QCOMPARE(changed.count(), 0);  // not per keystroke
        QCOMPARE(panel.suggestions()->count(), 0);
        QVERIFY(changed.wait(panel.promptPauseMs() + 2000));
        QCOMPARE(changed.count(), 1);
        QCOMPARE(panel.sampling().prompt, std::string("thumbs up, dark skin tone"));
        panel.promptEdit()->setText("red apple");
        emit panel.promptEdit()->returnPressed();
        QCOMPARE(run.count(), 1);
        QCOMPARE(changed.count(), 2);
        QCOMPARE(panel.sampling().prompt, std::string("red apple"));
        // The text encoder's unknown words: left out unless the box says keep them; a setting
        // of its own (another baseline key), saved and restored with the request.
        auto* keep = panel.findChild<QCheckBox*>("keepUnknownWords");
        QVERIFY(keep);
        QVERIFY(keep->isVisibleTo(&panel));
        QVERIFY(!keep->isChecked());
        QVERIFY(!panel.sampling().keep_unknown_words);
        keep->setChecked(true);
        QCOMPARE(changed.count(), 3);
        QVERIFY(panel.sampling().keep_unknown_words);
        GenerationSettings filtered = panel.sampling();
        filtered.keep_unknown_words = false;
        QVERIFY(panel.sampling().baseline_key("m") != filtered.baseline_key("m"));
        Request saved;
        saved.model.family = Family::Infinity;
        saved.prompt = "red apple";
        saved.gen = panel.sampling();
        const Request restored = Request::from_json(saved.to_json());
        QVERIFY(restored.gen.keep_unknown_words);
        keep->setChecked(false);
        panel.applyRequest(restored);
        QVERIFY(keep->isChecked());
        // Back on a class-conditional model: the class picker, and no text in the settings.
        panel.setFamily(Family::Var);
        QVERIFY(panel.classBox()->isVisibleTo(&panel));
        QVERIFY(panel.suggestions()->isVisibleTo(&panel));
        QVERIFY(!keep->isVisibleTo(&panel));
        QVERIFY(panel.sampling().prompt.empty());
        QVERIFY(!panel.sampling().keep_unknown_words);
    }

    // The open dialog's T5 folder travels with the model in saved settings (and the prompt is the
    // text of a text-to-image request).
    void textToImageRequestRoundTrips() {
        Request r;
        r.model.kind = ModelSource::Kind::Files;
        r.model.family = Family::Infinity;
        r.model.var_path = "/m/infinity.safetensors";
        r.model.vae_path = "/m/bsq.safetensors";
        r.model.t5_path = "/m/t5";
        r.prompt = "red apple";
        const Request back = Request::from_json(r.to_json());
        QCOMPARE(back.model.t5_path, std::string("/m/t5"));
        QCOMPARE(back.model.family, Family::Infinity);
        QCOMPARE(back.gen.prompt, std::string("red apple"));
        ModelSource no_t5 = r.model;
        no_t5.t5_path.clear();
        QVERIFY(no_t5.key() != r.model.key());
        // The low-memory mode travels too, and loads other weights (another key).
        QVERIFY(!back.model.low_memory);
        Request low = r;
        low.model.low_memory = true;
        QVERIFY(Request::from_json(low.to_json()).model.low_memory);
        QVERIFY(low.model.key() != r.model.key());
    }

    // The Open-checkpoints dialog's Low-memory mode box reaches the model source (and only with
    // a T5 folder: it is the text-to-image models' mode).
    void openCheckpointsCarriesTheLowMemoryMode() {
        const QString fixtures =
            QString::fromStdString(varscope_source_dir() + "/tests/fixtures/infinity_tiny/");
        for (const bool with_t5 : {true, false}) {
            ModelPanel panel;
            QSignalSpy changed(&panel, &ModelPanel::modelChanged);
            bool shown = false;
            QTimer::singleShot(0, &panel, [&] {
                auto* d = qobject_cast<QDialog*>(QApplication::activeModalWidget());
                if (!d) return;
                auto* box = d->findChild<QCheckBox*>("lowMemory");
                auto edits = d->findChildren<QLineEdit*>();
                if (!box || edits.size() != 3) return d->reject();
                shown = true;
                edits[0]->setText(fixtures + "infinity_tiny.pth");
                edits[1]->setText(fixtures + "infinity_tiny.pth");  // a file; not loaded here
                edits[2]->setText(with_t5 ? fixtures : QString());
                box->setChecked(true);
                d->accept();
            });
            panel.openCheckpoints();
            QVERIFY(shown);
            QCOMPARE(changed.size(), 1);
            QCOMPARE(panel.modelSource().low_memory, with_t5);
        }
    }

    // An Infinity transformer opened without its T5 folder: said when it loads, not at the run.
    void infinityWithoutItsT5IsExplained() {
        ModelSource src;
        src.kind = ModelSource::Kind::Files;
        src.var_path = varscope_source_dir() + "/tests/fixtures/infinity_tiny/infinity_tiny.pth";
        Engine e;
        try {
            e.load(src);
            QFAIL("loaded an Infinity model without its BSQ VAE and T5 folder");
        } catch (const std::invalid_argument& ex) {
            QVERIFY2(std::string(ex.what()).find("T5 encoder folder") != std::string::npos,
                     ex.what());
        }
        QVERIFY(!e.loaded());
    }

    // The embedded text-to-image model in the app: the first launch opens it, a prompt runs it
    // (baseline and accelerated, 64x64 images), and picking the VAR brings the class picker back.
    void embeddedTextToImageRunsAPrompt() {
        if (!Engine::embedded_t2i_available()) QSKIP("embedded text-to-image model missing");
        QSettings().clear();
        MainWindow w(test_loader);
        QCOMPARE(w.modelPanel()->modelSource().family, Family::Infinity);  // first launch
        QVERIFY(!w.modelPanel()->classBox()->isVisibleTo(w.modelPanel()));
        Request r;
        r.model.kind = ModelSource::Kind::Embedded;
        r.model.family = Family::Infinity;
        r.model.device = "cpu";
        r.prompt = "thumbs up, dark skin tone, twemoji style";
        r.gen.seed = 1;
        r.gen.top_k = 900;
        r.gen.top_p = 0.97;
        r.accel = {{"skip", {{"enabled", true}, {"last_n", 1}}}};
        w.applyRequest(r, true);
        QVERIFY(wait_job(w));
        const auto base = w.results()->baseline(), accel = w.results()->accelerated();
        QVERIFY(base && accel);
        QCOMPARE(base->image.size(), QSize(64, 64));
        QCOMPARE(accel->image.size(), QSize(64, 64));
        QCOMPARE(base->run.family, Family::Infinity);
        QCOMPARE(base->run.scales.size(), size_t(7));  // the model's own size: 0.06M
        QVERIFY(accel->accelerated);
        QCOMPARE(accel->run.accel_summary, std::string("skip-1"));
        QVERIFY(accel->run.scales.back().skipped);
        QVERIFY(w.modelPanel()->promptEdit()->isEnabled());
        QVERIFY(!w.modelPanel()->classBox()->isVisibleTo(w.modelPanel()));
        // The inspector's cross-attention: a map per scale over the prompt's tokens.
        QVERIFY(!base->run.text_tokens.empty());
        QCOMPARE(base->run.text_tokens.back(), std::string("</s>"));
        auto* text_tab = w.inspector()->methodTab("text");
        QVERIFY(text_tab);
        QVERIFY(text_tab->recordCount() > 0);
        QCOMPARE(text_tab->currentKind(), QStringLiteral("text/cross_attention"));
        size_t maps = 0;
        for (const auto& a : base->run.accel)
            if (a.kind == "cross_attention") {
                ++maps;
                QCOMPARE(a.data.dim(0), int64_t(base->run.text_tokens.size()));
            }
        QCOMPARE(maps, size_t(7));
        // Same text and seed: the same image; another text: another image.
        Engine e;
        ModelSource src = r.model;
        e.load(src);
        QVERIFY(e.info().text_to_image());
        QCOMPARE(e.info().image_size, int64_t(64));
        GenerationSettings g;
        g.prompt = r.prompt.toStdString();
        g.seed = 1;
        g.top_p = 0.97;
        const RunOutput a = e.run(g, false), b = e.run(g, false);
        QCOMPARE(a.image.width, 64);
        QVERIFY(a.image.rgb == b.image.rgb);
        QVERIFY(a.image.rgb == std::vector<uint8_t>(base->run.image.rgb));
        QVERIFY(a.notices.empty());
        g.prompt = "red apple";
        const RunOutput apple = e.run(g, false);
        QVERIFY(apple.image.rgb != a.image.rgb);
        // A word the text encoder never saw is left out, and the run says so; with
        // keep_unknown_words (the panel's box) the prompt is read as typed, without a notice.
        g.prompt = "zorblat red apple";
        const RunOutput left_out = e.run(g, false);
        QCOMPARE(left_out.notices.size(), size_t(1));
        QVERIFY2(left_out.notices[0].find("zorblat") != std::string::npos,
                 left_out.notices[0].c_str());
        QVERIFY(left_out.image.rgb == apple.image.rgb);  // the filtered text is "red apple"
        g.keep_unknown_words = true;
        const RunOutput kept = e.run(g, false);
        QVERIFY(kept.notices.empty());
        QVERIFY(kept.image.rgb != left_out.image.rgb);
        g.keep_unknown_words = false;
        // A prompt past the encoder's limit runs cut, and the run says so (the status bar
        // shows RunOutput::notices).
        g.prompt.clear();
        for (int i = 0; i < 200; ++i) g.prompt += "red apple ";
        const RunOutput cut = e.run(g, false);
        QVERIFY(!cut.notices.empty());
        QVERIFY2(cut.notices[0].find("cut to fit") != std::string::npos, cut.notices[0].c_str());
        g.prompt.clear();
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, e.run(g, false));
        // Back to the class-conditional VAR: the class picker returns.
        QVERIFY(w.modelPanel()->pickModel(ModelSource{}));
        QCOMPARE(w.modelPanel()->family(), Family::Var);
        QVERIFY(w.modelPanel()->classBox()->isVisibleTo(w.modelPanel()));
        QSettings().clear();
    }

    // --- end to end -------------------------------------------------------------------------
    void generationFillsPanels() {
        MainWindow w(test_loader);
        w.resize(1400, 900);
        w.show();
        QSignalSpy results(&w, &MainWindow::resultsUpdated);
        w.applyRequest(tiny_request(), true);
        QVERIFY(wait_job(w));
        auto base = w.results()->baseline();
        QVERIFY(base);
        QVERIFY(base->image.width() >= 4 && base->image.width() == base->image.height());
        QCOMPARE(base->filmstrip.size(), 3);
        for (const auto& f : base->filmstrip) QVERIFY(!f.isNull());
        QCOMPARE(base->run.label, int64_t(3));
        // No accelerator enabled: the accelerated side is the baseline.
        QVERIFY(w.results()->accelerated());
        QVERIFY(w.results()->accelerated()->same_as_baseline);
        QVERIFY(w.results()->metrics().valid);
        QVERIFY(std::isinf(w.results()->metrics().psnr));
        // Attention of layer 0 at every scale: (heads, q, k) with k = all tokens so far.
        QCOMPARE(base->run.attention.size(), size_t(3));
        const auto& last = base->run.attention.back().probs;
        QCOMPARE(last.shape, (std::vector<int64_t>{2, 16, 21}));
        double row = 0;
        for (int k = 0; k < 21; ++k) row += last.values[size_t(k)];
        QVERIFY(std::abs(row - 1.0) < 1e-4);  // probabilities
        QVERIFY(w.inspector()->attention()->view()->hasData());
        QCOMPARE(w.inspector()->attention()->view()->grid().cols, 21);
        QCOMPARE(w.metricsModel()->rowCount(), 3);
        // The per-scale table's attention FLOPs come from the run (columns 9 and 10), in GFLOP.
        {
            auto* mm = w.metricsModel();
            QCOMPARE(mm->columnCount(), 15);
            QCOMPARE(mm->headerData(9, Qt::Horizontal, Qt::DisplayRole).toString(),
                     QString("baseline attn GFLOP"));
            for (int row = 0; row < 3; ++row) {
                const double flops = base->run.scales[size_t(row)].attention_flops;
                QVERIFY(flops > 0);
                QCOMPARE(mm->data(mm->index(row, 9), Qt::UserRole).toDouble(), flops);
                QCOMPARE(mm->data(mm->index(row, 9), Qt::DisplayRole).toString(),
                         QString::number(flops / 1e9, 'f', 3));
            }
            // The whole step's FLOPs (columns 11-13) from the run's cost model: more than its
            // attention; the accelerator is off, so the work ratio is 1.
            for (int row = 0; row < 3; ++row) {
                const auto& sc = base->run.scales[size_t(row)];
                QVERIFY(sc.work_counted);
                QVERIFY(sc.part_flops[size_t(varscope::CostPart::Ffn)] > 0);
                QCOMPARE(mm->data(mm->index(row, 11), Qt::UserRole).toDouble(),
                         std::accumulate(sc.part_flops.begin(), sc.part_flops.end(), 0.0));
                QVERIFY(mm->data(mm->index(row, 11), Qt::UserRole).toDouble() > sc.attention_flops);
                QCOMPARE(mm->data(mm->index(row, 13), Qt::UserRole).toDouble(), 1.0);
                // A CPU run: its parts were timed by the host clock; no method, no overhead.
                QVERIFY(sc.parts_timed);
                QVERIFY(sc.part_ms[size_t(varscope::CostPart::Attention)] > 0);
                QCOMPARE(mm->data(mm->index(row, 14), Qt::UserRole).toDouble(), 0.0);
            }
            QVERIFY(QString::fromUtf8(mm->toCsv())
                        .section('\n', 0, 0)
                        .endsWith("baseline_attn_GFLOP,accelerated_attn_GFLOP,baseline_GFLOP,"
                                  "accelerated_GFLOP,work_ratio,method_ms"));
        }
        QCOMPARE(w.plots()->latencyPlot()->graph(0)->dataCount(), 3);
        QVERIFY(results.count() >= 2);

        // Another seed re-samples the baseline; the same seed again comes from the cache.
        Request r = tiny_request();
        r.gen.seed = 8;
        w.applyRequest(r, true);
        QVERIFY(wait_job(w));
        QVERIFY(!w.results()->baseline()->cached);
        w.applyRequest(tiny_request(), true);
        QVERIFY(wait_job(w));
        QVERIFY(w.results()->baseline()->cached);
        QCOMPARE(w.results()->baseline()->image, base->image);
    }

    void everyMethodRunsOrReportsItsError() {
        MainWindow w(test_loader);
        w.show();
        w.applyRequest(tiny_request(true), true);
        QVERIFY(wait_job(w));
        QVERIFY(w.results()->baseline());
        for (const auto& m : Engine::methods()) {
            QVERIFY(w.methodPanel()->applyPreset(QString::fromStdString(m.id)));
            w.generate();
            QVERIFY(wait_job(w));
            QVERIFY(w.results()->baseline()->cached);  // only the accelerated side re-ran
            auto acc = w.results()->accelerated();
            auto* message = w.methodPanel()->findChild<QLabel*>("methodMessage");
            if (acc) {
                QVERIFY2(!acc->same_as_baseline, m.id.c_str());
                QVERIFY2(acc->run.accel_summary != "baseline", m.id.c_str());
                QVERIFY(!acc->image.isNull());
                QVERIFY(w.results()->metrics().valid);
                // Its kept set of the recorded layer at every scale (the attention tab's mask
                // overlay): dense (heads, side², tokens so far), nothing kept where it skipped.
                QCOMPARE(acc->run.masks.size(), acc->run.scales.size());
                int64_t keys = 0;
                bool skipped = false;
                for (size_t i = 0; i < acc->run.masks.size(); ++i) {
                    const MaskOutput& mask = acc->run.masks[i];
                    const int64_t side = acc->run.scales[i].patch_num;
                    keys += side * side;
                    QCOMPARE(mask.queries, side * side);
                    QCOMPARE(mask.keys, keys);
                    QCOMPARE(mask.kept.size(), size_t(mask.heads * mask.queries * mask.keys));
                    skipped = skipped || acc->run.scales[i].skipped;
                    if (acc->run.scales[i].skipped)
                        QVERIFY2(std::all_of(mask.kept.begin(), mask.kept.end(),
                                             [](uint8_t k) { return k == 0; }),
                                 m.id.c_str());
                }
                if (m.id == "skip") QVERIFY(skipped);  // its preset skips the last scale
            } else {
                // e.g. "not implemented yet": shown in the panel, no crash, no dialog.
                QVERIFY2(!message->text().isEmpty(), m.id.c_str());
            }
        }
    }

    void debouncedSliderRerunsAcceleratedSide() {
        MainWindow w(test_loader);
        w.show();
        w.applyRequest(tiny_request(true), true);
        QVERIFY(wait_job(w));
        auto* slider = w.methodPanel()->findChild<QSlider*>("skip.last_n.slider");
        if (!slider) QSKIP("scale skipping exposes no last_n slider");
        w.methodPanel()->findChild<QCheckBox*>("skip.enabled")->setChecked(true);
        slider->setValue(1);
        slider->setValue(2);
        QVERIFY(!w.busy());  // debounced: nothing submitted yet
        QSignalSpy finished(&w, &MainWindow::jobFinished);
        QVERIFY(finished.wait(kJobTimeoutMs));
        QCOMPARE(finished.count(), 1);  // one run for both slider moves
        QVERIFY(w.results()->baseline()->cached);
    }

    void sweepRunsOnTheWorker() {
        MainWindow w(test_loader);
        w.applyRequest(tiny_request(true), true);
        QVERIFY(wait_job(w));
        const auto& methods = Engine::methods();
        const bool has_skip = std::any_of(methods.begin(), methods.end(), [](const auto& m) {
            return m.id == "skip" && !m.params.empty() && m.params.front().key == "last_n";
        });
        if (!has_skip) QSKIP("scale skipping exposes no last_n");
        // The loaded model bounds the slider and the sweep (MainWindow::applyModelCounts).
        const int scales = int(w.results()->baseline()->run.scales.size());
        QCOMPARE(w.methodPanel()->findChild<QSpinBox*>("skip.last_n")->maximum(), scales - 1);
        QCOMPARE(w.plots()->findChild<QDoubleSpinBox*>("sweepTo")->value(), scales - 1.0);
        emit w.plots()->sweepRequested("skip", "last_n", {0.0, 1.0, 2.0});
        // The points arrive one by one from the worker; a finished signal of the earlier job can
        // end wait_job() first (seen after the debounced-slider test): wait for all three.
        QTRY_VERIFY_WITH_TIMEOUT(w.plots()->sweep().size() == 3 && !w.busy(), kJobTimeoutMs);
        const auto& pts = w.plots()->sweep();
        QCOMPARE(pts.size(), size_t(3));
        QCOMPARE(pts[0].value, 0.0);
        QVERIFY(std::isinf(pts[0].psnr));  // nothing skipped: the baseline image
        // On the CPU every run is eager: the shown baseline times every point.
        for (const auto& p : pts) {
            QVERIFY(!p.cuda && !p.cuda_graphs);
            QCOMPARE(p.baseline_millis, w.results()->baseline()->run.total_ms);
        }
        const auto* status = w.plots()->findChild<QLabel*>("sweepStatus");
        QVERIFY(status);
        QCOMPARE(status->text(), QString("3 points"));  // no CUDA note on the CPU
        QVERIFY(pts[2].speedup > 0 && std::isfinite(pts[2].psnr));
        // Skipping scales computes less attention: more work saved at each step of the sweep.
        QCOMPARE(pts[0].work_ratio, 1.0);
        QVERIFY(pts[1].work_ratio > 1.0);
        QVERIFY(pts[2].work_ratio > pts[1].work_ratio);
        // The plotted values (the graph keeps them sorted by PSNR), against the points'.
        auto plotted = [&] {
            std::vector<double> v;
            const auto* g = w.plots()->sweepPlot()->graph(0);
            for (int i = 0; i < g->dataCount(); ++i) v.push_back(g->data()->at(i)->value);
            std::sort(v.begin(), v.end());
            return v;
        };
        auto expected = [&](double SweepPoint::*field) {
            std::vector<double> v;
            for (const auto& p : pts) v.push_back(p.*field);
            std::sort(v.begin(), v.end());
            return v;
        };
        QCOMPARE(plotted(), expected(&SweepPoint::speedup));
        auto* y = w.plots()->findChild<QComboBox*>("sweepY");
        QVERIFY(y);
        y->setCurrentIndex(y->findData("work"));  // the same points, plotted as work saved
        QCOMPARE(plotted(), expected(&SweepPoint::work_ratio));
        QCOMPARE(w.plots()->sweepPlot()->yAxis->label(), QString("attention work saved ×"));
        QVERIFY(w.results()->baseline()->cached);
    }

    // View ▸ Record for the inspector, off: the runs record no attention maps or accelerator
    // records (so on CUDA both sides replay graphs), and the tabs say why they are empty; on
    // again, the maps come back.
    void recordingOffKeepsNoInspectorData() {
        MainWindow w(test_loader);
        QVERIFY(w.recordAction() && w.recordAction()->isChecked());
        Request r = tiny_request(true);
        r.accel = {{"fastvar", {{"enabled", true}, {"ratios", {0.4, 0.5}}}}};
        w.applyRequest(r, true);
        QVERIFY(wait_job(w));
        QVERIFY(!w.results()->baseline()->run.attention.empty());
        QVERIFY(!w.results()->accelerated()->run.accel.empty());
        w.recordAction()->setChecked(false);
        QCOMPARE(w.currentRequest().gen.attention_layer, int64_t(-1));
        QVERIFY(!w.currentRequest().gen.accel_records);
        QVERIFY(w.inspector()->attention()->view()->emptyText().startsWith("Recording is off"));
        QVERIFY(wait_job(w) && (w.busy() || true));
        QSignalSpy finished(&w, &MainWindow::jobFinished);
        QVERIFY(finished.wait(kJobTimeoutMs));  // the toggle re-runs (debounced)
        QVERIFY(w.results()->baseline()->run.attention.empty());
        QVERIFY(w.results()->accelerated()->run.accel.empty());
        QVERIFY(w.inspector()->methodTab("fastvar")->view()->emptyText().startsWith(
            "Recording is off"));
        w.recordAction()->setChecked(true);
        QVERIFY(finished.wait(kJobTimeoutMs));
        QVERIFY(!w.results()->baseline()->run.attention.empty());
        QVERIFY(!w.results()->accelerated()->run.accel.empty());
    }

    void cancelStopsTheRun() {
        MainWindow w(test_loader);
        w.applyRequest(tiny_request(true), false);
        QSignalSpy failed(w.worker(), &GenerationWorker::sideFailed);
        w.generate();
        w.cancel();
        QVERIFY(wait_job(w));
        QCOMPARE(failed.count(), 1);
        QCOMPARE(failed.front().at(3).toBool(), true);  // cancelled, not an error
        QVERIFY(!w.results()->baseline());
        // The next generation runs normally.
        w.generate();
        QVERIFY(wait_job(w));
        QVERIFY(w.results()->baseline());
    }

    // Esc after changing the seed: the export wrote the previous run's images with the
    // cancelled run's settings (caption and PNG chunk), so a restore gave another image.
    void exportAfterCancelDescribesTheShownImages() {
        MainWindow w(test_loader);
        w.applyRequest(tiny_request(true), false);
        w.generate();
        QVERIFY(wait_job(w));
        QVERIFY(w.results()->baseline());
        const QImage shown = w.results()->baseline()->image;
        Request other = tiny_request(true);
        other.gen.seed = 99;
        w.applyRequest(other, false);
        QSignalSpy failed(w.worker(), &GenerationWorker::sideFailed);
        w.generate();
        // A preview of the run being cancelled (Esc in a real window caught one on show beside
        // the previous run's caption): it goes when the run is cancelled.
        auto* canvas = w.comparison()->findChild<varscope::viz::ImageCanvas*>("baselineCanvas");
        QVERIFY(canvas);
        w.comparison()->setPreview(Side::Baseline, noise_image(8, 8, 3));
        w.cancel();
        QVERIFY(wait_job(w));
        QCOMPARE(failed.count(), 1);
        QCOMPARE(w.results()->baseline()->image, shown);
        QCOMPARE(canvas->image(), shown);
        QVERIFY2(w.figureNotes().join('|').contains("seed 7"),
                 qPrintable(w.figureNotes().join('|')));
        QTemporaryDir dir;
        QString error;
        ExportOptions o;
        o.path = dir.filePath("figure.png");
        QVERIFY2(w.exportFigure(o, &error), qPrintable(error));
        QVERIFY2(w.saveImage(Side::Baseline, dir.filePath("base.png"), &error), qPrintable(error));
        for (const char* name : {"figure.png", "base.png"}) {
            QImageReader reader(dir.filePath(name));
            const Request back = Request::from_json(
                nlohmann::json::parse(reader.text(kSettingsTextKey).toStdString()));
            QCOMPARE(back.gen.seed, uint64_t(7));
        }
    }

    // Settings with a key this version does not know are refused (it was dropped: "top_kk": 5
    // restored top-k 900), as are duplicate keys and deep nesting in a PNG's settings chunk.
    void settingsWithUnknownKeysAreRefused() {
        nlohmann::json j = tiny_request().to_json();
        QCOMPARE(Request::from_json(j).gen.seed, uint64_t(7));
        j["top_kk"] = 5;
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, Request::from_json(j));
        // What Request::from_json refuses with (std::invalid_argument), or "accepted".
        auto refusal = [](const nlohmann::json& settings) -> QString {
            try {
                Request::from_json(settings);
            } catch (const std::invalid_argument& e) {
                return e.what();
            }
            return "accepted";
        };
        j = tiny_request().to_json();
        j["model"]["devise"] = "cuda";
        QVERIFY2(refusal(j).contains("settings: model: unknown field 'devise'"),
                 qPrintable(refusal(j)));
        // A count that is not a whole number in range is refused, not cast (2.5 ran 2).
        for (const nlohmann::json& bad : {nlohmann::json(2.5), nlohmann::json(1e40)}) {
            j = tiny_request().to_json();
            j["top_k"] = bad;
            QVERIFY2(refusal(j).contains("settings: 'top_k' has the wrong type"),
                     qPrintable(refusal(j)));
        }
        QTemporaryDir dir;
        for (const std::string& text :
             {std::string(R"({"varscope": 1, "varscope": 1})"), std::string(100000, '[')}) {
            QImage img(4, 4, QImage::Format_RGB32);
            img.fill(Qt::red);
            QImageWriter writer(dir.filePath("s.png"));
            writer.setText(kSettingsTextKey, QString::fromStdString(text));
            QVERIFY(writer.write(img));
            MainWindow w(test_loader);
            QString error;
            QVERIFY(!w.restoreFromPng(dir.filePath("s.png"), &error));
            QVERIFY2(error.contains("appears twice") || error.contains("nested deeper"),
                     qPrintable(error));
        }
    }

    void badCheckpointIsReported() {
        QTemporaryDir dir;
        const QString bad = dir.filePath("bad.safetensors");
        QFile f(bad);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("not a checkpoint");
        f.close();
        GenerationWorker worker;
        worker.setLoader(test_loader);
        QSignalSpy failed(&worker, &GenerationWorker::modelFailed);
        QSignalSpy done(&worker, &GenerationWorker::jobFinished);
        Job job;
        job.request.model.kind = ModelSource::Kind::Files;
        job.request.model.var_path = bad.toStdString();
        job.request.model.vae_path = bad.toStdString();
        worker.submit(job);
        QVERIFY(done.wait(kJobTimeoutMs));
        QCOMPARE(failed.count(), 1);
        QVERIFY(!failed.front().at(1).toString().isEmpty());
    }

    // --- MAR ---------------------------------------------------------------------------------
    // A MAR request applied while the window shows a VAR model (a restored MAR session, or
    // `--model mar --preset lazymar`) keeps its LazyMAR settings: the accelerator panel switches
    // to MAR's methods before the settings are filled in, not only once the model has loaded.
    void marRequestKeepsItsAcceleratorSettings() {
        if (!Engine::embedded_mar_available()) QSKIP("embedded MAR missing");
        MainWindow w(test_loader);
        w.applyRequest(tiny_request(), false);
        QCOMPARE(w.methodPanel()->family(), Family::Var);
        Request r = mar_request();
        r.accel = nlohmann::json::parse(R"({"lazymar": {"enabled": true, "keep_ratio": 0.3}})");
        w.applyRequest(r, false);
        QCOMPARE(w.methodPanel()->family(), Family::Mar);
        const nlohmann::json cfg = w.methodPanel()->config();
        QVERIFY2(cfg.contains("lazymar") && cfg["lazymar"].value("enabled", false),
                 cfg.dump().c_str());
        QCOMPARE(cfg["lazymar"]["keep_ratio"].get<double>(), 0.3);
        QVERIFY(w.methodPanel()->applyPreset("lazymar-released"));
    }

    void embeddedMarGeneratesWithStepPreviews() {
        if (!Engine::embedded_mar_available()) QSKIP("embedded MAR missing");
        MainWindow w(test_loader);
        w.resize(1400, 900);
        w.show();
        QSignalSpy previews(w.worker(), &GenerationWorker::preview);
        w.applyRequest(mar_request(), true);
        QVERIFY(wait_job(w));
        const auto base = w.results()->baseline();
        QVERIFY(base);
        QCOMPARE(base->run.family, Family::Mar);
        QCOMPARE(base->image.size(), QSize(64, 64));
        QCOMPARE(base->run.label, int64_t(5));
        // The figure notes give MAR's sampling settings, not VAR's top-k/top-p.
        const QString sampling = w.figureNotes().value(1);
        QVERIFY2(sampling.contains("4 steps") && sampling.contains("CFG 3 (linear)") &&
                     sampling.contains("20 diffusion steps") && !sampling.contains("top-k"),
                 qPrintable(sampling));
        // One preview per decoding step (the baseline side), each the latents so far decoded.
        // (Counted for the last job: the window may have started a first-launch run before.)
        const quint64 job = previews.back().at(0).toULongLong();
        int job_previews = 0;
        for (const auto& args : previews)
            if (args.at(0).toULongLong() == job) {
                ++job_previews;
                QCOMPARE(args.at(1).toInt(), int(Side::Baseline));
                QCOMPARE(args.at(3).value<QImage>().size(), QSize(64, 64));
            }
        QCOMPARE(job_previews, 4);
        QCOMPARE(base->filmstrip.size(), 4);
        for (const auto& f : base->filmstrip) QCOMPARE(f.size(), QSize(64, 64));
        QCOMPARE(base->filmstrip.back(), base->image);  // after the last step: the result
        // Decode order: every grid position decoded exactly once, no earlier than its step.
        const auto& last = base->run.scales.back();
        QCOMPARE(last.tokens.size(), size_t(last.patch_num * last.patch_num));
        for (int64_t t : last.tokens) QVERIFY(t >= 0 && t < 4);
        QVERIFY(std::count(base->run.scales.front().tokens.begin(),
                           base->run.scales.front().tokens.end(), int64_t{-1}) > 0);
        auto* tab = w.inspector()->methodTab("mar");
        QVERIFY(tab);
        // Per step: the decode-order map and the step's scalars (cfg, decoded, masked).
        QCOMPARE(tab->recordCount(), 8);
        QVERIFY(tab->selectKind("mar/step"));
        QVERIFY(tab->selectKind("mar/decode_order"));
        QVERIFY(tab->view()->hasData());
        // MAR records are per decoding step: labelled as steps, not scales.
        QVERIFY2(tab->view()->title().contains("step"), qPrintable(tab->view()->title()));
        QVERIFY2(!tab->view()->title().contains("scale"), qPrintable(tab->view()->title()));
        // The panels switched to MAR's controls.
        QCOMPARE(w.modelPanel()->family(), Family::Mar);
        QCOMPARE(w.methodPanel()->family(), Family::Mar);
        QVERIFY(w.methodPanel()->config().contains("lazymar"));
        QVERIFY(!w.methodPanel()->config().contains("fastvar"));
        QVERIFY(!w.modelPanel()->findChild<QSpinBox*>("topK")->isVisibleTo(w.modelPanel()));
        QVERIFY(w.modelPanel()->findChild<QSpinBox*>("marNumIter")->isVisibleTo(w.modelPanel()));
        // The request (and so exported PNGs) carries the MAR settings.
        const Request back = Request::from_json(w.currentRequest().to_json());
        QCOMPARE(back.model.family, Family::Mar);
        QCOMPARE(back.gen.num_iter, int64_t(4));
        QCOMPARE(back.model.diffusion_steps, std::string("20"));

        // LazyMAR on (both caches, the paper's 4 / 5 schedule scaled to 4 steps): the
        // accelerated side runs, reports computed/reused maps and the CFG residual drift.
        nlohmann::json accel = {
            {"lazymar",
             {{"enabled", true}, {"start_step", 1}, {"period", 2}, {"keep_ratio", 0.3}}}};
        Request r = mar_request();
        r.accel = accel;
        w.applyRequest(r, true);
        QVERIFY(wait_job(w));
        const auto acc = w.results()->accelerated();
        QVERIFY(acc && !acc->same_as_baseline);
        QVERIFY(w.results()->baseline()->cached);
        QCOMPARE(acc->image.size(), QSize(64, 64));
        int maps = 0;
        for (const auto& rec : acc->run.accel)
            if (rec.kind == "lazymar_computed_map") {
                ++maps;
                QCOMPARE(rec.data.shape, (std::vector<int64_t>{last.patch_num, last.patch_num}));
                double computed = 0;
                for (float v : rec.data.values) {
                    QVERIFY(v == 0.f || v == 1.f);
                    computed += v;
                }
                QVERIFY(computed < double(rec.data.values.size()));  // some tokens reused
            }
        QVERIFY(maps > 0);
        QVERIFY(w.inspector()->methodTab("lazymar")->recordCount() > 0);
        QVERIFY(w.plots()->lazyMarPlot()->graph(0)->dataCount() > 0);
        QVERIFY(w.results()->metrics().valid);
        QCOMPARE(w.plots()->lazyMarPlot()->graphCount(), 2);  // no head caches: no head series

        // With the released code's DiffLoss head caches: their drift per step is plotted.
        r.accel["lazymar"]["head_mlp_period"] = 3;
        r.accel["lazymar"]["head_cfg_period"] = 3;
        w.applyRequest(r, true);
        QVERIFY(wait_job(w));
        auto* plot = w.plots()->lazyMarPlot();
        QCOMPARE(plot->graphCount(), 4);
        QCOMPARE(plot->graph(2)->name(), QString("head MLP drift"));
        QCOMPARE(plot->graph(3)->name(), QString("head CFG drift"));
        QVERIFY(plot->graph(2)->dataCount() > 0);
        QVERIFY(plot->graph(3)->dataCount() > 0);
    }

    void lazyMarOffEqualsTheBaselinePixels() {
        if (!Engine::embedded_mar_available()) QSKIP("embedded MAR missing");
        Engine e;
        e.load(mar_request().model);
        QCOMPARE(e.family(), Family::Mar);
        QVERIFY(!e.info().mar_recommended.empty());
        QCOMPARE(e.info().diffusion_steps, std::string("20"));
        GenerationSettings g = mar_request().gen;
        g.filmstrip = false;
        const RunOutput base = e.run(g, false);
        g.accel_json = R"({"lazymar": {"enabled": false, "keep_ratio": 0.3}})";
        const RunOutput off = e.run(g, true);
        QVERIFY(base.image.rgb == off.image.rgb);
        g.accel_json =
            R"({"lazymar": {"enabled": true, "start_step": 1, "period": 2, "keep_ratio": 0.3}})";
        const RunOutput on = e.run(g, true);
        QCOMPARE(on.image.width, 64);
        QVERIFY(on.accel_summary != "baseline");
        QVERIFY(Engine::image_quality(base.image, on.image).psnr > 5);
    }

    // The transformer's precision: part of the settings (exports restore it) and of the model's
    // cache key; the panel offers it on CUDA only; the engine loads it (bf16 here on the CPU).
    void precisionTravelsWithTheModel() {
        Request r = mar_request();
        r.model.precision = "bf16";
        QCOMPARE(Request::from_json(r.to_json()).model.precision, std::string("bf16"));
        auto j = r.to_json();
        j["model"]["precision"] = "fp8";
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, Request::from_json(j));
        j["model"].erase("precision");  // settings saved before the field existed
        QCOMPARE(Request::from_json(j).model.precision, std::string("fp32"));
        ModelSource a, b;
        b.precision = "fp16";
        QVERIFY(a.key() != b.key());

        ModelPanel panel;
        auto* device = panel.findChild<QComboBox*>("device");
        auto* precision = panel.findChild<QComboBox*>("precision");
        QVERIFY(device && precision);
        precision->setCurrentIndex(precision->findData("bf16"));
        device->setCurrentIndex(device->findData("cpu"));
        QVERIFY(!precision->isEnabled());
        QCOMPARE(panel.modelSource().precision, std::string("fp32"));  // the CPU runs fp32
        if (Engine::cuda_available()) {
            device->setCurrentIndex(device->findData("cuda"));
            QVERIFY(precision->isEnabled());
            QCOMPARE(panel.modelSource().precision, std::string("bf16"));
        }

        Engine e;
        ModelSource src;  // the embedded VAR
        src.precision = "bf16";
        e.load(src);
        QCOMPARE(e.info().precision, std::string("bf16"));
        GenerationSettings g;
        g.class_id = 1;
        const RunOutput out = e.run(g, false);
        QVERIFY(!out.image.empty());
        if (!Engine::embedded_mar_available()) QSKIP("embedded MAR missing");
        Request mar = mar_request();
        mar.model.precision = "bf16";
        e.load(mar.model);
        QCOMPARE(e.info().precision, std::string("bf16"));
        QVERIFY(!e.run(mar.gen, false).image.empty());
    }

    void pickingTheEmbeddedMarAppliesItsRecommendation() {
        if (!Engine::embedded_mar_available()) QSKIP("embedded MAR missing");
        const auto rec = Engine::embedded_mar_recommendation();
        QVERIFY(rec.num_iter && rec.cfg);
        MainWindow w(test_loader);
        auto* panel = w.modelPanel();
        panel->marSettings()->numIterBox()->setValue(int(*rec.num_iter) + 7);  // not the file's
        ModelSource mar;
        mar.kind = ModelSource::Kind::Embedded;
        mar.family = Family::Mar;
        QVERIFY(panel->pickModel(mar));
        // Before any load: the first run already uses the file's settings.
        QCOMPARE(panel->family(), Family::Mar);
        QCOMPARE(panel->marSettings()->numIterBox()->value(), int(*rec.num_iter));
        QCOMPARE(panel->sampling().cfg, *rec.cfg);
        QCOMPARE(w.methodPanel()->family(), Family::Mar);
        ModelSource missing;
        missing.kind = ModelSource::Kind::Files;
        missing.var_path = "/nonexistent/var.pth";
        missing.vae_path = "/nonexistent/vae.pth";
        QVERIFY(!panel->pickModel(missing));  // not listed: refused, nothing changes
        QCOMPARE(panel->family(), Family::Mar);
    }

    void invalidMarSettingsAreRejected() {
        // Accelerator settings: the method panel names the field and offers no run.
        MethodPanel panel;
        panel.setFamily(Family::Mar);
        QVERIFY(panel.presetNames().contains("lazymar"));
        panel.setConfig({{"lazymar", {{"enabled", true}, {"keep_ratio", 5.0}}}});
        QVERIFY(panel.valid());  // the editor clamps to the spec's range...
        QVERIFY(panel.config()["lazymar"]["keep_ratio"].get<double>() <= 1.0);
        QVERIFY(Engine::validate_accel({{"lazymar", {{"keep_ratio", 5.0}}}}, Family::Mar)
                    .find("keep_ratio") != std::string::npos);  // ...the JSON path names it
        QVERIFY(!Engine::validate_accel({{"fastvar", {{"enabled", true}}}}, Family::Mar).empty());
        // Sampling settings outside what the loop accepts: a clear error, no crash.
        if (!Engine::embedded_mar_available()) QSKIP("embedded MAR missing");
        Engine e;
        e.load(mar_request().model);
        GenerationSettings g = mar_request().gen;
        g.num_iter = 0;
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, e.run(g, false));
        g = mar_request().gen;
        g.cfg_schedule = "cosine";
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, e.run(g, false));
        // A MAR checkpoint without its KL VAE: refused with a message saying what to open.
        ModelSource files;
        files.kind = ModelSource::Kind::Files;
        files.var_path = QString::fromStdString(varscope_source_dir()).toStdString() +
                         "/resources/models/emoji-mar.safetensors";
        try {
            e.load(files);
            QFAIL("loaded a MAR model without a VAE");
        } catch (const std::exception& ex) {
            QVERIFY(QString(ex.what()).contains("KL VAE"));
        }
    }

    void exportsWriteValidFilesAndRestore() {
        MainWindow w(test_loader);
        w.resize(1400, 900);
        w.show();
        w.applyRequest(tiny_request(), true);
        QVERIFY(wait_job(w));
        QVERIFY2(w.figureNotes().value(1).contains("top-k"), qPrintable(w.figureNotes().join('|')));
        QTemporaryDir dir;
        QString error;
        ExportOptions o;
        o.plots = true;
        for (const char* suffix : {"png", "svg", "pdf"}) {
            o.path = dir.filePath(QStringLiteral("figure.") + suffix);
            QVERIFY2(w.exportFigure(o, &error), qPrintable(error));
            QVERIFY(QFileInfo(o.path).size() > 100);
            QVERIFY(!w.exportFigure(o, &error));  // never overwrites without asking
        }
        QFile svg(dir.filePath("figure.svg"));
        QVERIFY(svg.open(QIODevice::ReadOnly));
        QVERIFY(svg.readAll().contains("<svg"));
        QFile pdf(dir.filePath("figure.pdf"));
        QVERIFY(pdf.open(QIODevice::ReadOnly));
        QVERIFY(pdf.read(5) == "%PDF-");
        QImageReader reader(dir.filePath("figure.png"));
        const QString settings = reader.text(kSettingsTextKey);
        const QImage png = reader.read();
        QVERIFY(!png.isNull());
        QVERIFY(png.width() > 500);
        const Request back = Request::from_json(nlohmann::json::parse(settings.toStdString()));
        QCOMPARE(back.gen.seed, uint64_t(7));
        QCOMPARE(back.gen.class_id, int64_t(3));
        QCOMPARE(back.model.custom_name, std::string("tiny-random"));

        QVERIFY2(w.exportMetrics(dir.filePath("m.csv"), &error), qPrintable(error));
        QFile csv(dir.filePath("m.csv"));
        QVERIFY(csv.open(QIODevice::ReadOnly));
        const QList<QByteArray> lines = csv.readAll().trimmed().split('\n');
        QCOMPARE(lines.size(), 4);  // header + 3 scales
        QVERIFY(lines[0].startsWith("scale,tokens,baseline_ms"));
        QVERIFY2(w.exportMetrics(dir.filePath("m.json"), &error), qPrintable(error));
        QFile js(dir.filePath("m.json"));
        QVERIFY(js.open(QIODevice::ReadOnly));
        const auto j = nlohmann::json::parse(js.readAll().toStdString());
        QCOMPARE(j["scales"].size(), size_t(3));
        QCOMPARE(j["settings"]["seed"].get<int>(), 7);
        // The times leave the previews out; the wall time they added is exported beside them.
        QVERIFY(j["comparison"]["baseline_overhead_ms"].get<double>() > 0);
        QVERIFY(j["comparison"]["accelerated_overhead_ms"].get<double>() >= 0);

        // Restoring from the PNG brings the seed back (and regenerates).
        Request other = tiny_request();
        other.gen.seed = 99;
        w.applyRequest(other, false);
        QCOMPARE(w.modelPanel()->seedBox()->value(), 99);
        QVERIFY2(w.restoreFromPng(dir.filePath("figure.png"), &error), qPrintable(error));
        QCOMPARE(w.modelPanel()->seedBox()->value(), 7);
        QVERIFY(wait_job(w));
        QVERIFY(w.results()->baseline()->cached);
        // A PNG without settings is refused with a message.
        QImage plain(4, 4, QImage::Format_RGB32);
        plain.fill(Qt::red);
        QVERIFY(plain.save(dir.filePath("plain.png")));
        QVERIFY(!w.restoreFromPng(dir.filePath("plain.png"), &error));
        QVERIFY(error.contains("no VARScope settings"));
    }

    // --- results model and typed settings ----------------------------------------------------
    // The results live in a model the views observe. A baseline of other settings than the
    // accelerated side on show drops that side (no PSNR between two different samples); a
    // side of the same settings keeps the other and the pair is compared.
    void resultsModelKeepsOnlyComparablePairs() {
        auto side = [](Side s, int shade) {
            auto r = std::make_shared<SideResult>();
            r->side = s;
            r->run.image = {4, 4, std::vector<uint8_t>(48, uint8_t(shade))};
            r->image = to_qimage(r->run.image);
            r->run.total_ms = s == Side::Baseline ? 20 : 10;
            return r;
        };
        ResultsModel m;
        ComparisonView view;
        view.setResultsModel(&m);
        QSignalSpy changed(&m, &ResultsModel::changed);
        Request a = tiny_request();
        m.setSide(side(Side::Baseline, 100), a);
        m.setSide(side(Side::Accelerated, 110), a);
        QCOMPARE(changed.count(), 2);
        QVERIFY(m.metrics().valid);
        QCOMPARE(m.metrics().speedup, 2.0);
        QVERIFY(!m.differenceImage().isNull());
        QVERIFY(view.metricsText().startsWith("PSNR"));
        QCOMPARE(m.request().gen.seed, a.gen.seed);
        Request b = a;
        b.accel = {{"fastvar", {{"enabled", true}}}};  // a slider moved: the baseline stays
        m.setSide(side(Side::Baseline, 100), b);
        QVERIFY(m.accelerated() && m.metrics().valid);
        Request c = a;
        c.gen.seed = a.gen.seed + 1;  // another sample
        m.setSide(side(Side::Baseline, 90), c);
        QVERIFY(m.baseline() && !m.accelerated());
        QVERIFY(!m.metrics().valid && m.differenceImage().isNull());
        QVERIFY(view.metricsText().isEmpty());
        QCOMPARE(m.request().gen.seed, c.gen.seed);
        m.clear();
        QVERIFY(m.empty());
    }

    // A record tab's overviews are typed choices in the scale box, not scale numbers −2/−3.
    void recordOverviewsAreTypedChoices() {
        auto r = std::make_shared<SideResult>();
        r->side = Side::Accelerated;
        r->accelerated = true;
        for (int64_t si : {0, 1, 2}) {
            ScaleOutput s;
            s.scale = si;
            s.patch_num = si + 1;
            r->run.scales.push_back(s);
            AccelOutput a;  // one 1-D record per scale: stackable
            a.method = "ams_kv";
            a.kind = "kv_bytes";
            a.scale = si;
            a.data.shape = {4};
            a.data.values = {1, 2, 3, float(si)};
            r->run.accel.push_back(a);
            AccelOutput t;  // scalar values only: a layer x scale table
            t.method = "ams_kv";
            t.kind = "bytes";
            t.scale = si;
            t.layer = 0;
            t.values["total"] = double(si);
            r->run.accel.push_back(t);
        }
        AccelInspector tab("ams_kv", "hint");
        tab.setResults(nullptr, r);
        auto* box = tab.findChild<QComboBox*>("scale");
        QVERIFY(box);
        QCOMPARE(tab.currentKind(), QString("ams_kv/kv_bytes"));
        QVERIFY(box->currentData().canConvert<ScaleChoice>());
        QVERIFY(box->currentData().value<ScaleChoice>().view == ScaleChoice::View::Stacked);
        QVERIFY2(tab.view()->title().contains("per entry"), qPrintable(tab.view()->title()));
        tab.setScale(1);
        QVERIFY(box->currentData().value<ScaleChoice>() == ScaleChoice::of(1));
        QVERIFY(tab.selectKind("ams_kv/bytes"));
        QVERIFY(box->currentData().value<ScaleChoice>().view == ScaleChoice::View::Table);
        QVERIFY2(tab.view()->title().contains("per layer"), qPrintable(tab.view()->title()));
        // An accelerated run without this tab's records says so; the baseline shown as the
        // accelerated side (nothing on) does not.
        AccelInspector fast("fastvar", "hint");
        fast.setResults(nullptr, r);
        QVERIFY2(
            fast.view()->emptyText().startsWith("FastVAR reported no records in the run on show."),
            qPrintable(fast.view()->emptyText()));
        QVERIFY(fast.view()->emptyText().endsWith("hint"));
        auto same = std::make_shared<SideResult>(*r);
        same->accelerated = false;
        same->same_as_baseline = true;
        fast.setResults(nullptr, same);
        QVERIFY2(fast.view()->emptyText().startsWith("No accelerator is on"),
                 qPrintable(fast.view()->emptyText()));
    }

    // --- no input traps (#37) -----------------------------------------------------------------
    // The wheel changes a spin box, slider or combo box only when it has the focus; one it merely
    // passes over keeps its value (and takes no focus from the wheel).
    void wheelChangesOnlyFocusedSettings() {
        MainWindow w(test_loader);
        auto* slider = new QSlider(Qt::Horizontal);
        slider->setRange(0, 10);
        slider->setValue(5);
        w.statusBar()->addWidget(slider);
        w.show();
        QVERIFY(QTest::qWaitForWindowActive(&w));
        auto* seed = w.modelPanel()->seedBox();
        auto* to = w.plots()->findChild<QDoubleSpinBox*>("sweepTo");
        auto* y = w.plots()->findChild<QComboBox*>("sweepY");
        QVERIFY(seed && to && y);
        seed->setValue(5);
        y->setCurrentIndex(0);
        const double to_before = to->value();
        auto wheel = [](QWidget* t) {
            const QPointF c = QRectF(t->rect()).center();
            QWheelEvent e(c, t->mapToGlobal(c), QPoint(), QPoint(0, -120), Qt::NoButton,
                          Qt::NoModifier, Qt::NoScrollPhase, false);
            QApplication::sendEvent(t, &e);
        };
        w.modelPanel()->promptEdit()->setFocus();
        for (QWidget* t : std::initializer_list<QWidget*>{seed, to, y, slider}) {
            QVERIFY2(t->focusPolicy() != Qt::WheelFocus, t->metaObject()->className());
            wheel(t);
        }
        QCOMPARE(seed->value(), 5);
        QCOMPARE(to->value(), to_before);
        QCOMPARE(y->currentIndex(), 0);
        QCOMPARE(slider->value(), 5);
        // With the focus the wheel works as ever.
        for (QWidget* t : std::initializer_list<QWidget*>{seed, y, slider}) {
            t->setFocus();
            QTRY_VERIFY(t->hasFocus());
            wheel(t);
        }
        QCOMPARE(seed->value(), 4);
        QCOMPARE(y->currentIndex(), 1);
        QVERIFY(slider->value() != 5);
    }

    // Typing a prompt picks its class at once but starts no run per keystroke: one after a
    // pause, none while the user is in the suggestion list, at once on Enter.
    void promptRunsAfterAPauseOrOnEnter() {
        ModelPanel p;
        // The class prompt: the first launch may open the text-to-image model (no classes).
        p.setFamily(Family::Var);
        p.setClassList(QString::fromStdString(Engine::embedded_class_list()), -1);
        if (!p.promptEdit()->isEnabled()) QSKIP("no class names (resources/models missing)");
        p.show();
        QVERIFY(QTest::qWaitForWindowActive(&p));
        QSignalSpy changed(&p, &ModelPanel::settingsChanged);
        QSignalSpy run(&p, &ModelPanel::runRequested);
        const int before = p.classBox()->value();
        p.promptEdit()->setFocus();
        QTest::keyClicks(p.promptEdit(), "red heart");
        QCOMPARE(changed.count(), 0);
        QVERIFY(p.classBox()->value() != before);  // the suggestion is applied while typing
        QTRY_COMPARE_WITH_TIMEOUT(changed.count(), 1, 4 * p.promptPauseMs());
        QTest::qWait(p.promptPauseMs() + 200);
        QCOMPARE(changed.count(), 1);
        QCOMPARE(run.count(), 0);

        p.promptEdit()->clear();
        QTest::keyClicks(p.promptEdit(), "rocket");
        p.suggestions()->setFocus();
        QTRY_VERIFY(p.suggestions()->hasFocus());
        QTest::qWait(2 * p.promptPauseMs());
        QCOMPARE(changed.count(), 1);  // the list is open: nothing yet
        p.suggestions()->setCurrentRow(0);
        QTest::keyClick(p.suggestions(), Qt::Key_Return);
        QCOMPARE(run.count(), 1);
        QCOMPARE(p.classBox()->value(), p.suggestions()->item(0)->data(Qt::UserRole).toInt());

        p.promptEdit()->setFocus();
        QTest::keyClicks(p.promptEdit(), "x");
        QTest::keyClick(p.promptEdit(), Qt::Key_Return);
        QCOMPARE(run.count(), 2);
        const int settled = changed.count();
        QTest::qWait(p.promptPauseMs() + 200);
        QCOMPARE(changed.count(), settled);  // Enter settled it: no second run after the pause
    }

    // Ctrl+E, Ctrl+S and Ctrl+Enter work wherever the focus is, also in a widget that claims
    // keys with a modifier for itself (on X11 key schemes QLineEdit takes Ctrl+E, "end of
    // line": Ctrl+E in the prompt did not export).
    void shortcutsWorkWhereverTheFocusIs() {
        struct Greedy : QLineEdit {
            bool event(QEvent* e) override {
                if (e->type() == QEvent::ShortcutOverride) {
                    e->accept();
                    return true;
                }
                return QLineEdit::event(e);
            }
        };
        MainWindow w(test_loader);
        auto* greedy = new Greedy;
        w.statusBar()->addPermanentWidget(greedy);  // not hidden by status messages
        w.applyRequest(tiny_request(true), false);
        w.show();
        QVERIFY(QTest::qWaitForWindowActive(&w));
        auto* fig = w.findChild<QAction*>("exportFigureAction");
        auto* save = w.findChild<QAction*>("saveImageAction");
        QVERIFY(fig && save);
        QSignalSpy exported(fig, &QAction::triggered), saved(save, &QAction::triggered);
        const std::initializer_list<QWidget*> targets = {greedy, w.modelPanel()->promptEdit(),
                                                         w.modelPanel()->seedBox()};
        for (QWidget* t : targets) {
            t->setFocus();
            QTRY_VERIFY(t->hasFocus());
            QTest::keyClick(t, Qt::Key_E, Qt::ControlModifier);
            QTest::keyClick(t, Qt::Key_S, Qt::ControlModifier);
        }
        QCOMPARE(exported.count(), 3);
        QCOMPARE(saved.count(), 3);
        // Ctrl+L goes to the prompt from any widget (the window test types there).
        w.modelPanel()->seedBox()->setFocus();
        QTRY_VERIFY(w.modelPanel()->seedBox()->hasFocus());
        QTest::keyClick(w.modelPanel()->seedBox(), Qt::Key_L, Qt::ControlModifier);
        QTRY_VERIFY(w.modelPanel()->promptEdit()->hasFocus());
        // Nothing to export yet: a note in the status bar, no dialog.
        QVERIFY2(w.statusBar()->currentMessage().contains("generate first"),
                 qPrintable(w.statusBar()->currentMessage()));
        greedy->setFocus();
        QTRY_VERIFY(greedy->hasFocus());
        QTest::keyClick(greedy, Qt::Key_Return, Qt::ControlModifier);
        QVERIFY(w.busy());
        QVERIFY(wait_job(w));
        QVERIFY(w.results()->baseline());
    }

    // A model that failed to load is not remembered: the next start opens the last that worked.
    void failedModelIsNotRemembered() {
        QSettings().clear();
        QTemporaryDir dir;
        const QString good = dir.filePath("good.pth"), bad = dir.filePath("bad.pth");
        for (const QString& path : {good, bad}) {
            QFile f(path);
            QVERIFY(f.open(QIODevice::WriteOnly));
        }
        auto loader = [bad](Engine& e, const ModelSource& s) {
            if (s.var_path == bad.toStdString()) throw std::runtime_error("not a checkpoint");
            varscope::testing::install_tiny_model(e, true);
        };
        auto files = [](const QString& path) {
            Request r = tiny_request(true);
            r.model = ModelSource{};
            r.model.kind = ModelSource::Kind::Files;
            r.model.var_path = r.model.vae_path = path.toStdString();
            return r;
        };
        QTimer closer;  // the load error's message box
        connect(&closer, &QTimer::timeout, [] {
            if (auto* m = QApplication::activeModalWidget()) m->close();
        });
        closer.start(50);
        {
            MainWindow w(loader);
            w.applyRequest(files(good), true);
            QVERIFY(wait_job(w));
            QVERIFY(w.results()->baseline());
            QSignalSpy failed(w.worker(), &GenerationWorker::modelFailed);
            w.applyRequest(files(bad), true);
            QVERIFY(wait_job(w));
            QCOMPARE(failed.count(), 1);
            QVERIFY(w.results()->empty());  // the good model's images are not shown as the bad's
            QVERIFY(w.close());             // writes the settings
        }
        MainWindow next(loader);
        QCOMPARE(QString::fromStdString(next.modelPanel()->modelSource().var_path), good);
        QSettings().clear();
    }

    // A run of another family clears the previous family's images, plots, records and metrics
    // when it starts; a sweep that ends leaves no "sweeping…" and no badges of its runs.
    void anotherFamilyAndAnEndedSweepLeaveNoStaleState() {
        if (!Engine::embedded_mar_available()) QSKIP("embedded MAR missing");
        MainWindow w(test_loader);
        Request r = tiny_request(true);
        r.accel = {{"fastvar", {{"enabled", true}, {"ratios", {0.4, 0.5}}}}};
        w.applyRequest(r, true);
        QVERIFY(wait_job(w));
        auto* fast = w.inspector()->methodTab("fastvar");
        QVERIFY(fast->recordCount() > 0);
        QVERIFY(w.metricsModel()->rowCount() > 0);
        QVERIFY(!w.comparison()->metricsText().isEmpty());
        QVERIFY(w.plots()->latencyPlot()->graph(0)->dataCount() > 0);

        auto* status = w.plots()->findChild<QLabel*>("sweepStatus");
        QVERIFY(status);
        w.plots()->findChild<QPushButton*>("runSweep")->click();
        QCOMPARE(status->text(), QString("sweeping…"));
        w.cancel();
        QVERIFY(wait_job(w));
        QVERIFY2(!status->text().contains("sweeping"), qPrintable(status->text()));

        w.applyRequest(mar_request(), true);  // a MAR run starts
        QVERIFY(w.busy());
        QVERIFY(w.results()->empty());
        QCOMPARE(fast->recordCount(), 0);
        QCOMPARE(w.metricsModel()->rowCount(), 0);
        QVERIFY(w.comparison()->metricsText().isEmpty());
        QCOMPARE(w.plots()->latencyPlot()->graph(0)->dataCount(), 0);
        w.cancel();
        QVERIFY(wait_job(w));
    }

    // A long model description or class name elides with the whole text in its tooltip and
    // cannot widen the window (the status bar's model line ran out of a 1280-px window).
    void longLabelsElideWithATooltip() {
        ElidedLabel l;
        const QString text = QString("VAR d16 · 310M parameters · ").repeated(8);
        l.setFullText(text);
        l.setDetails("settings");
        QVERIFY(l.minimumSizeHint().width() < 100);
        QVERIFY(l.sizeHint().width() > l.fontMetrics().horizontalAdvance(text) - 1);
        l.show();  // a hidden widget gets its resize events only when shown
        QVERIFY(QTest::qWaitForWindowExposed(&l));
        l.resize(200, l.sizeHint().height());
        QTRY_VERIFY(l.elided());
        QVERIFY(l.text().endsWith(QChar(0x2026)));
        QVERIFY(l.fontMetrics().horizontalAdvance(l.text()) <= 200);
        QVERIFY(l.toolTip().startsWith(text) && l.toolTip().endsWith("settings"));
        l.resize(l.sizeHint());
        QTRY_VERIFY(!l.elided());
        QCOMPARE(l.toolTip(), QString("settings"));
        MainWindow w(test_loader);
        auto* status = w.findChild<ElidedLabel*>("statusModel");
        QVERIFY(status);
        status->setFullText(text);
        w.resize(1280, 800);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QCOMPARE(w.width(), 1280);
        QVERIFY(status->elided());
    }

    // No text is cut off at 1280×800 (the smallest size the layout promises): every label,
    // button and combo box shows its whole text inside the window's visible width, or elides
    // it with the whole text in its tooltip; and the window is not forced wider than asked.
    void noClippedTextAt1280x800() {
        MainWindow w(test_loader);
        w.applyRequest(Request{}, false);  // the embedded VAR's long name in the model box
        w.resize(1280, 800);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QApplication::processEvents();
        QCOMPARE(w.size(), QSize(1280, 800));
        // The part of t's width not cut by an ancestor (a scroll area's viewport, a dock).
        auto visible_width = [&w](QWidget* t) {
            QRect r(t->mapTo(&w, QPoint(0, 0)), t->size());
            for (QWidget* p = t->parentWidget(); p && p != &w; p = p->parentWidget())
                r &= QRect(p->mapTo(&w, QPoint(0, 0)), p->size()).adjusted(0, -1000000, 0, 1000000);
            r &= w.rect().adjusted(0, -1000000, 0, 1000000);
            return r.width();
        };
        auto find_clipped = [&] {
            QStringList clipped;
            for (QWidget* t : w.findChildren<QWidget*>()) {
                // Not in a hidden tab (a tabified dock's widgets stay "visible" with no region).
                if (!t->isVisible() || t->window() != &w || t->visibleRegion().isEmpty()) continue;
                int need = 0;
                QString text;
                if (auto* e = qobject_cast<ElidedLabel*>(t)) {
                    if (e->elided() && !e->toolTip().contains(e->fullText()))
                        clipped << "elided without tooltip: " + e->fullText();
                    continue;
                } else if (auto* l = qobject_cast<QLabel*>(t)) {
                    if (l->wordWrap() || l->text().isEmpty() || l->objectName() == "metricsLabel")
                        continue;
                    text = l->text();
                    need = l->sizeHint().width();
                } else if (auto* b = qobject_cast<QAbstractButton*>(t)) {
                    if (b->text().isEmpty() || qobject_cast<QToolButton*>(t)) continue;
                    text = b->text();
                    need = b->sizeHint().width();
                } else if (auto* c = qobject_cast<QComboBox*>(t)) {
                    if (c->currentText().isEmpty() || c->isEditable()) continue;
                    QStyleOptionComboBox opt;
                    opt.initFrom(c);
                    opt.currentText = c->currentText();
                    const QRect field = c->style()->subControlRect(QStyle::CC_ComboBox, &opt,
                                                                   QStyle::SC_ComboBoxEditField, c);
                    const int room = field.width() + visible_width(c) - c->width();
                    if (c->fontMetrics().horizontalAdvance(c->currentText()) > room &&
                        !c->toolTip().contains(c->currentText()))
                        clipped << QString("%1 (combo %2): %3 px of %4")
                                       .arg(c->currentText(), c->objectName())
                                       .arg(room)
                                       .arg(c->fontMetrics().horizontalAdvance(c->currentText()));
                    continue;
                } else {
                    continue;
                }
                const int have = std::min(t->width(), visible_width(t));
                if (have < need && !t->toolTip().contains(text))
                    clipped << QString("%1 (%2 %3): %4 px of %5")
                                   .arg(text, t->metaObject()->className(), t->objectName())
                                   .arg(have)
                                   .arg(need);
            }
            return clipped;
        };
        QStringList clipped = find_clipped();
        QVERIFY2(clipped.isEmpty(), qPrintable(clipped.join("\n")));
        Request r = tiny_request(true);  // and with a run's labels, plots and records
        r.accel = {{"fastvar", {{"enabled", true}, {"ratios", {0.4, 0.5}}}}};
        w.applyRequest(r, true);
        QVERIFY(wait_job(w));
        QApplication::processEvents();
        QCOMPARE(w.size(), QSize(1280, 800));
        clipped = find_clipped();
        QVERIFY2(clipped.isEmpty(), qPrintable(clipped.join("\n")));
        // The first start's model, the text-to-image one: its long name did not fit the model
        // box and was cut mid-letter; it elides, with the whole name in the tooltip.
        auto* combo = w.modelPanel()->findChild<ElidedComboBox*>("modelCombo");
        QVERIFY(combo);
        ModelSource t2i;
        t2i.kind = ModelSource::Kind::Embedded;
        t2i.family = Family::Infinity;
        t2i.device = "cpu";
        if (w.modelPanel()->pickModel(t2i)) {
            w.cancel();
            QVERIFY(wait_job(w));
            QApplication::processEvents();
            QVERIFY(combo->currentText().contains("text-to-image"));
            combo->resize(120, combo->height());  // narrower than the name, whatever the docks
            QVERIFY(combo->elided());
            QVERIFY2(combo->shownText().endsWith(QChar(0x2026)), qPrintable(combo->shownText()));
            QVERIFY(combo->toolTip().startsWith(combo->currentText()));
            combo->resize(combo->sizeHint().width() + 200, combo->height());
            QVERIFY(!combo->elided());
            QVERIFY(!combo->toolTip().contains(combo->currentText()));
        }
    }

    // --- history of runs (#37) ----------------------------------------------------------------
    // Each finished run is kept on disk (a folder per run, an index written atomically), comes
    // back after a restart, is bounded in number, and leftovers of a crash are removed.
    void runHistoryKeepsRunsOnDisk() {
        QTemporaryDir dir;
        auto side = [](Side s, int shade, double ms) {
            auto r = std::make_shared<SideResult>();
            r->side = s;
            r->accelerated = s == Side::Accelerated;
            r->run.image = {8, 8, std::vector<uint8_t>(192, uint8_t(shade))};
            r->image = to_qimage(r->run.image);
            r->run.total_ms = ms;
            r->run.accel_summary = s == Side::Accelerated ? "FastVAR" : "baseline";
            return r;
        };
        ResultsModel results;
        Request req = tiny_request();
        results.setSide(side(Side::Baseline, 100, 20), req);
        results.setSide(side(Side::Accelerated, 104, 10), req);
        QString error;
        QString first;
        {
            RunHistory h(dir.path(), 2);
            QSignalSpy changed(&h, &RunHistory::changed);
            first = h.add(results, &error);
            QVERIFY2(!first.isEmpty(), qPrintable(error));
            QCOMPARE(changed.count(), 1);
            for (const char* f :
                 {"baseline.png", "accelerated.png", "thumb.png", "settings.json", "metrics.json"})
                QVERIFY2(QFile::exists(dir.filePath(first + "/" + f)), f);
            QVERIFY(QFile::exists(dir.filePath("index.json")));
            // The PNGs carry the settings chunk of an export.
            QImageReader png(dir.filePath(first + "/accelerated.png"));
            QVERIFY(png.text(kSettingsTextKey).contains("\"seed\":7"));
            const HistoryEntry* e = h.find(first);
            QVERIFY(e && e->has_accelerated);
            QCOMPARE(e->methods, QString("FastVAR"));
            QCOMPARE(e->metrics["speedup"].get<double>(), 2.0);
            QVERIFY(e->summary().contains("2.00×"));
        }
        QDir(dir.path()).mkdir("20990101-000000-000.tmp");  // a write cut short
        RunHistory h(dir.path(), 2);                        // a restart
        QCOMPARE(h.entries().size(), 1);
        QCOMPARE(h.entries().front().id, first);
        QVERIFY(!QFileInfo::exists(dir.filePath("20990101-000000-000.tmp")));
        const SideResultPtr back = h.sideResult(first, Side::Baseline);
        QVERIFY(back && back->image.pixelColor(0, 0) == QColor(104, 104, 104));
        QCOMPARE(back->run.total_ms, 10.0);
        QTest::qWait(2);  // another id
        const QString second = h.add(results);
        QTest::qWait(2);
        const QString third = h.add(results);
        QVERIFY(!second.isEmpty() && !third.isEmpty());
        QCOMPARE(h.entries().size(), 2);  // bounded: the oldest went, with its folder
        QCOMPARE(h.entries().front().id, third);
        QVERIFY(!QFileInfo::exists(dir.filePath(first)));
        QVERIFY(h.remove(second));
        QCOMPARE(h.entries().size(), 1);
        QVERIFY(!QFileInfo::exists(dir.filePath(second)));
    }

    // In the window: a finished run enters the history; activating an entry restores its
    // settings; two entries compare side by side.
    void historyRestoresAndComparesRuns() {
        QTemporaryDir dir;
        QSettings().setValue("historyDir", dir.path());
        MainWindow w(test_loader);
        QSettings().remove("historyDir");
        QVERIFY(w.history()->entries().isEmpty());
        Request a = tiny_request(true);
        a.accel = {{"fastvar", {{"enabled", true}, {"ratios", {0.4, 0.5}}}}};
        w.applyRequest(a, true);
        QVERIFY(wait_job(w));
        Request b = a;
        b.gen.seed = 11;
        w.applyRequest(b, true);
        QVERIFY(wait_job(w));
        QCOMPARE(w.history()->entries().size(), 2);
        QCOMPARE(w.historyPanel()->list()->count(), 2);
        QVERIFY(w.historyPanel()->list()->item(0)->text().contains("FastVAR"));
        // Restore the older run (listed second): its seed comes back and it runs.
        emit w.historyPanel()->list()->itemActivated(w.historyPanel()->list()->item(1));
        QCOMPARE(w.modelPanel()->seedBox()->value(), 7);
        QVERIFY(wait_job(w));
        QCOMPARE(w.history()->entries().size(), 3);
        // Compare the two newest side by side.
        auto* list = w.historyPanel()->list();
        list->item(0)->setSelected(true);
        list->item(1)->setSelected(true);
        auto* compare = w.historyPanel()->findChild<QPushButton*>("historyCompare");
        QVERIFY(compare && compare->isEnabled());
        compare->click();
        QVERIFY(w.results()->baseline() && w.results()->accelerated());
        QVERIFY(w.results()->metrics().valid);
        QVERIFY(!std::isinf(w.results()->metrics().psnr));        // seeds 11 and 7 differ
        QCOMPARE(w.results()->request().gen.seed, uint64_t(11));  // the left: the older
        // The captions name the two runs: neither is a baseline.
        QVERIFY2(w.results()->label(Side::Baseline).contains("seed 11 · FastVAR"),
                 qPrintable(w.results()->label(Side::Baseline)));
        QVERIFY2(w.results()->label(Side::Accelerated).contains("seed 7 · FastVAR"),
                 qPrintable(w.results()->label(Side::Accelerated)));
        auto* base_canvas =
            w.comparison()->findChild<varscope::viz::ImageCanvas*>("baselineCanvas");
        QVERIFY(base_canvas);
        QCOMPARE(base_canvas->caption(), w.results()->label(Side::Baseline));
        // The inspector says the history keeps no records (not "FastVAR reported none").
        const QString fast = w.inspector()->methodTab("fastvar")->view()->emptyText();
        QVERIFY2(fast.startsWith("Two runs from the history"), qPrintable(fast));
        // The filter keeps runs of a model or method.
        w.historyPanel()->findChild<QLineEdit*>("historyFilter")->setText("no such method");
        QCOMPARE(list->count(), 0);
    }

    // --- per-scale summaries in the history, the two-run ratio, the layout (#37) --------------
    // Write, restart (a new store on the same folder), read: the same numbers; an entry of an
    // older version (no scales.json) and a newer format say so instead of failing.
    void historyKeepsThePerScaleSummary() {
        QTemporaryDir dir;
        ResultsModel results;
        const Request req = tiny_request();
        const auto base = scaled_side(Side::Baseline, 100, 5.0);
        const auto accel = scaled_side(Side::Accelerated, 104, 2.5);
        results.setSide(base, req);
        results.setSide(accel, req);
        QString id;
        {
            RunHistory h(dir.path());
            id = h.add(results);
            QVERIFY(!id.isEmpty());
            QVERIFY(QFile::exists(dir.filePath(id + "/scales.json")));
        }
        RunHistory h(dir.path());  // a restart
        QString note = "unset";
        const auto bs = h.scales(id, Side::Baseline, &note);
        QVERIFY(note.isEmpty());
        const auto as = h.scales(id, Side::Accelerated);
        QCOMPARE(bs.size(), size_t(4));
        QVERIFY(bs == summarize_scales(base->run));
        QVERIFY(as == summarize_scales(accel->run));
        QCOMPARE(as[2].millis, 2.5 * 3 + 0.125 * 104);
        QCOMPARE(as[3].pruned, 6.0 / 16.0);
        QCOMPARE(bs[3].pruned, 0.0);
        QCOMPARE(as[3].kv_bytes, double(3104));  // the estimate ends at the run's KV size
        QVERIFY(as[3].work_counted);
        QCOMPARE(as[3].part_flops[size_t(varscope::CostPart::Ffn)], 8e6 * 16 * 10.0 / 16.0);
        const SideResultPtr shown = h.sideResult(id, Side::Accelerated, &note);
        QVERIFY(shown && note.isEmpty());
        QVERIFY(shown->stored_scales == as);
        QVERIFY(scale_summary_of(*shown) == as);

        // A newer format is named, not misread.
        QFile f(dir.filePath(id + "/scales.json"));
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(R"({"varscope_scales": 99, "baseline": []})");
        f.close();
        QVERIFY(h.scales(id, Side::Baseline, &note).empty());
        QVERIFY2(note.contains("format version 99"), qPrintable(note));
        // A field of the wrong type is named.
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(R"({"varscope_scales": 1, "baseline": [{"scale": 0, "patch_num": 1, "ms": "x"}]})");
        f.close();
        QVERIFY(h.scales(id, Side::Baseline, &note).empty());
        QVERIFY2(note.contains("\"baseline\"[0]: \"ms\""), qPrintable(note));
        // The work by part: known part names, numbers >= 0.
        for (const auto& [parts, why] : std::vector<std::pair<const char*, const char*>>{
                 {R"("part_flops": {"attention": 1, "unknown": 2})", "names no part \"unknown\""},
                 {R"("part_flops": {"ffn": -1})", "\"ffn\" is not a number >= 0"},
                 {R"("part_flops": [1, 2])", "\"part_flops\" is not an object"},
                 {R"("part_ms": {"overhead": "1"})", "\"part_ms\".\"overhead\" is not a number"}}) {
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write(QByteArray(R"({"varscope_scales": 1, "baseline": [{"scale": 0, "patch_num": 1,
                  "ms": 1, "attention_flops": 0, "kv_bytes": 0, )") +
                    parts + "}]}");
            f.close();
            QVERIFY(h.scales(id, Side::Baseline, &note).empty());
            QVERIFY2(note.contains(why), qPrintable(note));
        }
        // Numbers that are not whole, or out of range, where whole ones belong (not cast).
        for (const char* text :
             {R"({"varscope_scales": 1, "baseline": [{"scale": 1e40, "patch_num": 1, "ms": 1,
                  "attention_flops": 0, "kv_bytes": 0}]})",
              R"({"varscope_scales": 1.5, "baseline": []})"}) {
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write(text);
            f.close();
            QVERIFY(h.scales(id, Side::Baseline, &note).empty());
            QVERIFY2(note.contains("not a whole number") || note.contains("no \"varscope_scales\""),
                     qPrintable(note));
        }
        // An entry of the version before summaries.
        QVERIFY(QFile::remove(dir.filePath(id + "/scales.json")));
        RunHistory old(dir.path());
        QCOMPARE(old.entries().size(), 1);
        const SideResultPtr back = old.sideResult(id, Side::Baseline, &note);
        QVERIFY(back && back->stored_scales.empty());
        QCOMPARE(note, QString("no per-scale records in this entry (saved by an older version)"));
    }

    // The work a method saves against the time it saves (#30): the metrics line's total, the
    // per-scale table's ratio and the plot's two curves; none where a side has no cost model.
    void workAgainstTimeIsShownPerScale() {
        using namespace varscope::gui;
        ResultsModel results;
        const Request req = tiny_request();
        auto base = scaled_side(Side::Baseline, 100, 5.0);
        auto accel = scaled_side(Side::Accelerated, 104, 2.5);
        results.setSide(base, req);
        results.setSide(accel, req);
        const ComparisonMetrics& m = results.metrics();
        QVERIFY(m.valid);
        double bw = 0, aw = 0;
        for (const auto& s : summarize_scales(base->run)) bw += s.work_flops();
        for (const auto& s : summarize_scales(accel->run)) aw += s.work_flops();
        QVERIFY(bw > aw && aw > 0);
        QCOMPARE(m.base_work, bw);
        QCOMPARE(m.accel_work, aw);
        QVERIFY2(m.text().contains(QString(" · work %1× less (%2 GFLOP → ")
                                       .arg(bw / aw, 0, 'f', 2)
                                       .arg(bw / 1e9, 0, 'f', 2)),
                 qPrintable(m.text()));
        QVERIFY(m.toolTip().contains("Work and time per scale"));
        // The method's own time, timed per part (a CPU run): the line's total, the table's column.
        QCOMPARE(m.accel_method_ms, 4 * 0.5);
        QVERIFY2(m.text().contains(" · method overhead 2.0 ms"), qPrintable(m.text()));
        QVERIFY(m.toolTip().contains("Method overhead"));

        MetricsModel table;
        table.setResults(base, accel);
        // Scale 0: the same work but for the sides' shades in the attention FLOPs; scale 3: the
        // FFN of 10 rows of 16.
        QVERIFY(std::abs(table.rows()[0].work_ratio() - 1.0) < 1e-6);
        QVERIFY(table.rows()[3].work_ratio() > 1.1);
        for (const auto& row : table.rows()) QCOMPARE(row.method_ms, 0.5);

        PlotsPanel plots;
        plots.setResults(base, accel);
        auto* work = plots.workPlot();
        QCOMPARE(work->graphCount(), 2);
        QCOMPARE(work->graph(0)->dataCount(), 4);  // less work per scale
        QCOMPARE(work->graph(1)->dataCount(), 4);  // speedup per scale
        QCOMPARE((work->graph(0)->data()->constBegin() + 3)->value, table.rows()[3].work_ratio());
        QCOMPARE((work->graph(1)->data()->constBegin() + 3)->value,
                 base->run.scales[3].millis / accel->run.scales[3].millis);
        plots.setFamily(Family::Mar);  // no cost model there
        QVERIFY(work->isHidden());

        // A side without the cost model (an entry of an older version): no work anywhere.
        for (auto& sc : accel->run.scales) sc.work_counted = sc.parts_timed = false;
        results.setSide(accel, req);
        QCOMPARE(results.metrics().accel_work, 0.0);
        QCOMPARE(results.metrics().accel_method_ms, -1.0);
        QVERIFY(!results.metrics().text().contains("overhead"));
        QVERIFY2(!results.metrics().text().contains("work"), qPrintable(results.metrics().text()));
        plots.setFamily(Family::Var);
        plots.setResults(base, accel);
        QCOMPARE(work->graph(0)->dataCount(), 0);
        QCOMPARE(work->graph(1)->dataCount(), 4);  // the times are still there
    }

    // The ratio of two runs' times is labelled for what it is, with both times.
    void twoRunRatioIsNotCalledASpeedup() {
        ComparisonMetrics m;
        m.valid = true;
        m.psnr = 26.5, m.ssim = 0.8, m.base_ms = 20, m.accel_ms = 12.5, m.speedup = 1.6;
        QVERIFY(m.text().contains("speedup 1.60×"));  // one run's sides: measured side by side
        m.run_a = QDateTime(QDate(2026, 11, 29), QTime(10, 41, 2));
        m.run_b = QDateTime(QDate(2026, 11, 29), QTime(10, 41, 5));
        QCOMPARE(m.text(), QString("PSNR 26.50 dB · SSIM 0.8000 · time A / time B = 1.60× (A 20.0 "
                                   "ms, B 12.5 ms; runs of 2026-11-29 10:41:02, 10:41:05; not "
                                   "measured side by side)"));
        m.run_b = QDateTime(QDate(2026, 11, 30), QTime(9, 0, 0));
        QVERIFY2(m.text().contains("runs of 2026-11-29 10:41:02, 2026-11-30 09:00:00;"),
                 qPrintable(m.text()));
        QVERIFY(m.toolTip().contains("not a speedup measured side by side"));
        // Through the results model: A's time over B's.
        ResultsModel results;
        RunPair pair;
        pair.left_time = m.run_a;
        pair.right_time = m.run_b;
        results.setPair(scaled_side(Side::Baseline, 100, 5.0),
                        scaled_side(Side::Accelerated, 90, 2.5), tiny_request(), pair);
        const ComparisonMetrics& r = results.metrics();
        QVERIFY(r.valid);
        QCOMPARE(r.speedup, r.base_ms / r.accel_ms);
        QVERIFY2(r.text().contains(QString("time A / time B = %1×").arg(r.speedup, 0, 'f', 2)),
                 qPrintable(r.text()));
    }

    // Two entries compared in the window: the plots show both runs' stored curves (times,
    // cumulative time, KV bytes), named A and B; an entry of an older version says it has none.
    void historyComparisonPlotsBothRuns() {
        QTemporaryDir dir;
        QSettings().setValue("historyDir", dir.path());
        MainWindow w(test_loader);
        QSettings().remove("historyDir");
        const Request req = tiny_request();
        QStringList ids;
        for (int k = 0; k < 2; ++k) {
            ResultsModel results;
            results.setSide(scaled_side(Side::Baseline, 100 + k, 6.0), req);
            results.setSide(scaled_side(Side::Accelerated, 120 + 10 * k, 2.0 + k), req);
            ids << w.history()->add(results);
            QTest::qWait(2);  // another id
        }
        auto* list = w.historyPanel()->list();
        QCOMPARE(list->count(), 2);
        auto* compare = w.historyPanel()->findChild<QPushButton*>("historyCompare");
        auto compareBoth = [&] {
            list->clearSelection();
            list->item(0)->setSelected(true);
            list->item(1)->setSelected(true);
            compare->click();  // the older (ids[0]) on the left: A
        };
        compareBoth();
        const auto a = w.history()->scales(ids[0], Side::Accelerated);
        const auto b = w.history()->scales(ids[1], Side::Accelerated);
        QCOMPARE(a.size(), size_t(4));
        auto values = [](const QCustomPlot* p, int g) {
            std::vector<double> v;
            const auto data = p->graph(g)->data();
            for (auto it = data->constBegin(); it != data->constEnd(); ++it) v.push_back(it->value);
            return v;
        };
        auto expect = [](const std::vector<ScaleSummary>& rows, int what) {
            std::vector<double> v;
            double sum = 0;
            for (const auto& r : rows) {
                sum += r.millis;
                v.push_back(what == 0 ? r.millis : what == 1 ? sum : r.kv_bytes / double(1 << 20));
            }
            return v;
        };
        const QCustomPlot* plots[] = {w.plots()->latencyPlot(), w.plots()->cumulativePlot(),
                                      w.plots()->kvPlot()};
        for (int what = 0; what < 3; ++what) {
            QVERIFY(values(plots[what], 0) == expect(a, what));
            QVERIFY(values(plots[what], 1) == expect(b, what));
            QVERIFY(plots[what]->graph(1)->visible());
        }
        QVERIFY2(w.plots()->latencyPlot()->graph(0)->name().startsWith("A ("),
                 qPrintable(w.plots()->latencyPlot()->graph(0)->name()));
        QVERIFY(w.plots()->latencyPlot()->graph(1)->name().startsWith("B ("));
        QVERIFY(w.plots()->note().isEmpty());
        // The per-scale table too.
        QCOMPARE(w.metricsModel()->rows().size(), size_t(4));
        QCOMPARE(w.metricsModel()->rows()[2].accel_ms, b[2].millis);
        QCOMPARE(w.metricsModel()->rows()[3].pruned, b[3].pruned);
        // The metrics line: the ratio of the two runs' times, with both times.
        const QString line = w.comparison()->metricsText();
        QVERIFY2(line.contains("time A / time B = ") && line.contains("not measured side by side"),
                 qPrintable(line));
        QVERIFY(line.contains(QString("A %1 ms").arg(w.results()->metrics().base_ms, 0, 'f', 1)));
        QVERIFY(w.results()->label(Side::Baseline).startsWith("A · run of "));

        // A click on one run shows it as kept: its baseline and accelerated curves, the speedup
        // measured in that run, and the inspector says what the history keeps.
        list->clearSelection();
        list->item(1)->setSelected(true);
        emit list->itemClicked(list->item(1));
        QVERIFY(w.results()->pair().one_run);
        QVERIFY(values(w.plots()->latencyPlot(), 0) ==
                expect(w.history()->scales(ids[0], Side::Baseline), 0));
        QVERIFY(values(w.plots()->kvPlot(), 1) == expect(a, 2));
        QCOMPARE(w.plots()->latencyPlot()->graph(0)->name(), QString("baseline"));
        QVERIFY2(w.comparison()->metricsText().contains("speedup "),
                 qPrintable(w.comparison()->metricsText()));
        QVERIFY(!w.comparison()->metricsText().contains("time A"));
        QVERIFY(w.results()->label(Side::Baseline).startsWith("Baseline · run of "));
        const QString why = w.inspector()->methodTab("fastvar")->view()->emptyText();
        QVERIFY2(why.startsWith("A run from the history is on show"), qPrintable(why));

        // An entry of the version before summaries: its curve stays empty, and the plots say why.
        QVERIFY(QFile::remove(dir.filePath(ids[1] + "/scales.json")));
        compareBoth();
        QCOMPARE(w.plots()->note(),
                 QString("Run B: no per-scale records in this entry (saved by an older version)"));
        QVERIFY(w.plots()->findChild<QLabel*>("plotsNote")->isVisibleTo(w.plots()));
        QVERIFY(values(w.plots()->latencyPlot(), 0) == expect(a, 0));
        QCOMPARE(w.plots()->latencyPlot()->graph(1)->dataCount(), 0);
        // A live run's results replace the pair: no note.
        w.results()->setSide(scaled_side(Side::Baseline, 10, 1.0), req);
        QVERIFY(w.plots()->note().isEmpty());
        QVERIFY(!w.plots()->findChild<QLabel*>("plotsNote")->isVisibleTo(w.plots()));
    }

    // At 1280x800 with the first start's layout the images get the space: a 64x64 emoji is shown
    // at 256 px or more, also with a two-run comparison's long captions and metrics line; the
    // docks' sizes come back after a restart.
    void imagesGetTheSpaceAt1280x800() {
        QSettings().remove("windowState");
        QSettings().remove("geometry");
        QTemporaryDir dir;
        QSettings().setValue("historyDir", dir.path());
        int left_width = 0;
        {
            MainWindow w(test_loader);
            w.resize(1280, 800);
            w.show();
            QVERIFY(QTest::qWaitForWindowExposed(&w));
            w.applyDefaultLayout();
            RunPair pair;
            pair.left_label = "A · run of 2026-11-29 10:41:02 · seed 1 · FastVAR · 20.0 ms";
            pair.right_label = "B · run of 2026-11-29 10:41:05 · seed 2 · FastVAR · 12.5 ms";
            pair.left_time = QDateTime(QDate(2026, 11, 29), QTime(10, 41, 2));
            pair.right_time = QDateTime(QDate(2026, 11, 29), QTime(10, 41, 5));
            w.results()->setPair(scaled_side(Side::Baseline, 100, 5.0),
                                 scaled_side(Side::Accelerated, 90, 2.5), tiny_request(), pair);
            QTest::qWait(50);
            QCOMPARE(w.size(), QSize(1280, 800));
            for (const char* name : {"baselineCanvas", "acceleratedCanvas"}) {
                auto* c = w.comparison()->findChild<varscope::viz::ImageCanvas*>(name);
                QVERIFY(c);
                const QRectF r = c->imageRect();
                QVERIFY2(
                    r.width() >= 256 && r.height() >= 256,
                    qPrintable(QString("%1: %2x%3 px").arg(name).arg(r.width()).arg(r.height())));
            }
            // Docks shrink below their contents' width (the settings column then scrolls
            // sideways instead of cutting its text); the default layout needs no scrolling.
            auto* left = w.findChild<QDockWidget*>("leftDock");
            QVERIFY(left->minimumWidth() <= 250);
            auto* scroll = w.findChild<QScrollArea*>("settingsScroll");
            QVERIFY(scroll && !scroll->horizontalScrollBar()->isVisible());
            QVERIFY(scroll->horizontalScrollBarPolicy() != Qt::ScrollBarAlwaysOff);
            const int inspector_min =
                w.findChild<QDockWidget*>("inspectorDock")->minimumSizeHint().width();
            QVERIFY2(inspector_min <= 360, qPrintable(QString::number(inspector_min)));
            w.resizeDocks({left}, {300}, Qt::Horizontal);
            QTest::qWait(20);
            left_width = left->width();
            w.close();  // saves the window state
        }
        MainWindow again(test_loader);  // a restart: the saved sizes, not the default layout
        QSettings().remove("historyDir");
        again.show();
        QVERIFY(QTest::qWaitForWindowExposed(&again));
        QTest::qWait(50);
        QCOMPARE(again.size(), QSize(1280, 800));
        // The saved width (300), not the default layout's (268 at 1280 px); within a few pixels
        // of the frame the offscreen platform adds to the restored geometry.
        const int restored = again.findChild<QDockWidget*>("leftDock")->width();
        QVERIFY2(std::abs(restored - left_width) <= 6,
                 qPrintable(QString("%1 vs %2").arg(restored).arg(left_width)));
        again.close();
        QSettings().remove("windowState");
        QSettings().remove("geometry");
    }

    // --- full-size outputs (#37) --------------------------------------------------------------
    // Nearest-neighbour upscaling keeps every pixel a sharp block; names follow the settings;
    // a batch is written whole or not at all, and a bad folder is named.
    void upscaledImagesAreSharpAndWrittenWholeOrNotAtAll() {
        const QImage src = noise_image(3, 2, 5);
        const QImage big = upscaleNearest(src, 4);
        QCOMPARE(big.size(), QSize(12, 8));
        for (int y = 0; y < 8; ++y)
            for (int x = 0; x < 12; ++x) QCOMPARE(big.pixel(x, y), src.pixel(x / 4, y / 4));
        QCOMPARE(upscaleNearest(src, 1), src);

        Request r = tiny_request();
        QCOMPARE(savedImageFileName(SavedImage::Baseline, r, "FastVAR", 1),
                 QString("varscope-class3-seed7-baseline.png"));
        QCOMPARE(savedImageFileName(SavedImage::Accelerated, r, "FastVAR + AMS-KV", 8),
                 QString("varscope-class3-seed7-fastvar-ams-kv-accelerated-x8.png"));
        r.model.family = Family::Infinity;  // named by the prompt, not the class
        r.gen.prompt = "Thumbs up, dark skin tone!";
        QCOMPARE(savedImageFileName(SavedImage::Difference, r, "", 2),
                 QString("varscope-thumbs-up-dark-skin-tone-seed7-difference-x2.png"));

        QTemporaryDir dir;
        QString error;
        const QMap<QString, QString> text{{kSettingsTextKey, "{}"}};
        // A missing folder, a file given as the folder, a factor not offered: named, nothing
        // written.
        QVERIFY(
            !writeImagesAtomically({{dir.filePath("nope/a.png"), src}}, 2, text, false, &error));
        QVERIFY2(error.contains("nope") && error.contains("no such folder"), qPrintable(error));
        QFile file(dir.filePath("plain"));
        QVERIFY(file.open(QIODevice::WriteOnly));
        file.close();
        QVERIFY(
            !writeImagesAtomically({{dir.filePath("plain/a.png"), src}}, 2, text, false, &error));
        QVERIFY2(error.contains("not a folder"), qPrintable(error));
        QVERIFY(!writeImagesAtomically({{dir.filePath("a.png"), src}}, 3, text, false, &error));
        QVERIFY2(error.contains("factor 3"), qPrintable(error));
        // The second file cannot be written (a folder of that name): the first is not left
        // behind either.
        QVERIFY(QDir(dir.path()).mkdir("b.png"));
        QVERIFY(!writeImagesAtomically({{dir.filePath("a.png"), src}, {dir.filePath("b.png"), src}},
                                       2, text, true, &error));
        QVERIFY2(error.contains("b.png"), qPrintable(error));
        QVERIFY(!QFileInfo::exists(dir.filePath("a.png")));
        QCOMPARE(QDir(dir.path()).entryList(QDir::Files), QStringList({"plain"}));
        // A good batch: both files, upscaled, with the text chunk; existing files are refused.
        QVERIFY2(writeImagesAtomically({{dir.filePath("a.png"), src}, {dir.filePath("c.png"), big}},
                                       2, text, false, &error),
                 qPrintable(error));
        QImageReader reader(dir.filePath("c.png"));
        QCOMPARE(reader.text(kSettingsTextKey), QString("{}"));
        QCOMPARE(reader.read().size(), QSize(24, 16));
        QVERIFY(!writeImagesAtomically({{dir.filePath("a.png"), src}}, 1, text, false, &error));
        QVERIFY2(error.contains("exists"), qPrintable(error));
    }

    // File ▸ Save images… and the images' context menus: the baseline, accelerated image and
    // difference map at native size or upscaled, with the export's settings chunk.
    void saveImagesWritesFullSizeOutputs() {
        MainWindow w(test_loader);
        QStringList file_menu;
        for (QMenu* m : w.menuBar()->findChildren<QMenu*>())
            if (m->title() == "&File")
                for (QAction* a : m->actions()) file_menu << a->text();
        QVERIFY2(file_menu.contains("Save images…"), qPrintable(file_menu.join('|')));
        QString error;
        QTemporaryDir dir;
        SaveImagesOptions o;
        o.folder = dir.path();
        QVERIFY(!w.saveImages(o, &error));  // nothing generated yet
        QVERIFY2(error.contains("generate first"), qPrintable(error));
        // Nothing on show: the context menu offers nothing.
        QMenu* none = w.comparison()->imageMenu(SavedImage::Baseline);
        QVERIFY(none->isEmpty());
        delete none;

        Request r = tiny_request(true);
        r.accel = {{"fastvar", {{"enabled", true}, {"ratios", {0.4, 0.5}}}}};
        w.applyRequest(r, true);
        QVERIFY(wait_job(w));
        const auto base = w.results()->baseline(), accel = w.results()->accelerated();
        QVERIFY(base && accel && !w.results()->differenceImage().isNull());
        o.difference = true;
        o.factor = 4;
        QStringList written;
        QVERIFY2(w.saveImages(o, &error, false, &written), qPrintable(error));
        QCOMPARE(written.size(), 3);
        const QImage images[] = {base->image, accel->image, w.results()->differenceImage()};
        for (int i = 0; i < 3; ++i) {
            QVERIFY2(written[i].endsWith("-x4.png"), qPrintable(written[i]));
            QImageReader reader(written[i]);
            const Request back = Request::from_json(
                nlohmann::json::parse(reader.text(kSettingsTextKey).toStdString()));
            QCOMPARE(back.gen.seed, uint64_t(7));
            QVERIFY(back.accel["fastvar"]["enabled"].get<bool>());
            const QImage img = reader.read().convertToFormat(QImage::Format_RGB32);
            const QImage native = images[i].convertToFormat(QImage::Format_RGB32);
            QCOMPARE(img.size(), native.size() * 4);
            for (int y = 0; y < img.height(); y += 3)
                for (int x = 0; x < img.width(); x += 3)
                    QCOMPARE(img.pixel(x, y), native.pixel(x / 4, y / 4));
        }
        QVERIFY(written[1].contains("fastvar-accelerated"));
        QVERIFY(!w.saveImages(o, &error));  // never overwrites without asking
        QVERIFY2(error.contains("exists"), qPrintable(error));
        // Native size; a folder that is not there is named and nothing is written.
        o.factor = 1;
        o.difference = false;
        QVERIFY2(w.saveImages(o, &error, false, &written), qPrintable(error));
        QCOMPARE(QImage(written[0]).size(), base->image.size());
        const int files = QDir(dir.path()).entryList(QDir::Files).size();
        o.folder = dir.filePath("missing");
        QVERIFY(!w.saveImages(o, &error));
        QVERIFY2(error.contains(dir.filePath("missing")), qPrintable(error));
        QCOMPARE(QDir(dir.path()).entryList(QDir::Files).size(), files);

        // Each image's context menu asks to save that image.
        QSignalSpy asked(w.comparison(), &ComparisonView::saveImageRequested);
        QMenu* menu = w.comparison()->imageMenu(SavedImage::Accelerated);
        QCOMPARE(menu->actions().size(), 2);
        QVERIFY(menu->actions().front()->text().contains("accelerated"));
        // It opens the dialog with only that image checked (closed here once it shows).
        SaveImagesOptions shown_options;
        bool dialog_shown = false;
        QTimer::singleShot(0, &w, [&] {
            if (auto* d = qobject_cast<SaveImagesDialog*>(QApplication::activeModalWidget())) {
                dialog_shown = true;
                shown_options = d->options();
                d->reject();
            }
        });
        menu->actions().front()->trigger();
        QVERIFY(dialog_shown);
        QVERIFY(shown_options.accelerated && !shown_options.baseline && !shown_options.difference);
        QVERIFY(!shown_options.folder.isEmpty());
        QCOMPARE(asked.size(), 1);
        QVERIFY(asked.front().at(0).value<std::optional<SavedImage>>() == SavedImage::Accelerated);
        delete menu;
        // The dialog names the files at the factor picked.
        SaveImagesDialog dlg(SaveImagesOptions{}, {SavedImage::Baseline, SavedImage::Accelerated},
                             base->image.size(),
                             [&w](SavedImage s, int f) { return w.savedImageName(s, f); });
        QCOMPARE(dlg.factorBox()->count(), 5);
        dlg.factorBox()->setCurrentIndex(dlg.factorBox()->findData(16));
        QVERIFY2(dlg.filesLabel()->text().contains("seed7-baseline-x16.png"),
                 qPrintable(dlg.filesLabel()->text()));
        QVERIFY(!dlg.findChild<QCheckBox*>("saveDifference")->isEnabled());
        QCOMPARE(dlg.options().factor, 16);
    }

    // --- empty inspector tabs say why (#37) ---------------------------------------------------
    // One function decides the text from the run's settings and records: what happened, never
    // "enable FastVAR" while it is enabled.
    void emptyInspectorTabsSayWhatHappened() {
        auto run = [](int scales, std::vector<int> skipped_scales) {
            auto r = std::make_shared<SideResult>();
            r->side = Side::Accelerated;
            r->accelerated = true;
            for (int s = 0; s < scales; ++s) {
                ScaleOutput so;
                so.scale = s;
                so.patch_num = s + 1;
                so.skipped = std::count(skipped_scales.begin(), skipped_scales.end(), s) > 0;
                r->run.scales.push_back(so);
            }
            return r;
        };
        auto base = std::make_shared<SideResult>(*run(6, {}));
        InspectorRunState st;
        st.has_request = true;
        st.attention_layer = 0;
        st.base = base;
        st.accel = run(6, {4, 5});
        st.accel_config = {{"fastvar", {{"enabled", true}, {"ratios", {0.4, 0.5}}}},
                           {"skip", {{"enabled", true}, {"last_n", 2}}}};
        QStringList seen;
        auto reason = [&](const QString& tab, int64_t scale = -1) {
            const QString t = emptyTabReason(tab, st, Side::Accelerated, scale, 0);
            seen << t;
            return t;
        };
        QString t = reason("fastvar");
        QVERIFY2(t.contains("Scale skipping removed the scales FastVAR would prune (scales 4–5)"),
                 qPrintable(t));
        // The all-records tab gives the same reason.
        QVERIFY(reason("").contains("would prune (scales 4–5)"));
        // Skip removed only the last scale: FastVAR's records exist elsewhere; a frame without
        // one says why.
        st.accel = run(6, {5});
        t = reason("fastvar", 2);
        QVERIFY2(t.contains("FastVAR prunes only the last 2 scales (scales 4–5); scale 2 ran with "
                            "every token"),
                 qPrintable(t));
        QVERIFY(reason("fastvar", 5).contains("Scale skipping removed scale 5"));
        // Ratios all 0.
        st.accel_config["fastvar"]["ratios"] = {0.0, 0.0};
        QVERIFY(reason("fastvar").contains("ratios are all 0"));
        // Another method's tab while FastVAR is on names what is on.
        t = reason("sparvar");
        QVERIFY2(t.contains("SparVAR is off in the run on show (on: "), qPrintable(t));
        QVERIFY(t.contains("FastVAR"));
        // Cancelled or failed accelerated run.
        st.accel = nullptr;
        st.accel_missing = "cancelled";
        QVERIFY(reason("fastvar").contains("accelerated run was cancelled"));
        QVERIFY(emptyTabReason("attention", st, Side::Accelerated, 0, 0).contains("cancelled"));
        st.accel_missing = "out of memory";
        QVERIFY(reason("fastvar").contains("failed: out of memory"));
        st.accel_missing.clear();
        QVERIFY(reason("fastvar").contains("appear when the accelerated run finishes"));
        // A run made with recording off, and recording off now.
        auto plain = run(6, {});
        st.accel = plain;
        st.run_recorded = false;
        QVERIFY(reason("fastvar").contains("made with recording off"));
        st.run_recorded = true;
        st.recording = false;
        QVERIFY(reason("fastvar").startsWith("Recording is off"));
        st.recording = true;
        // Method on and recorded, nothing reported, CUDA graphs.
        st.accel_config["fastvar"]["ratios"] = {0.4, 0.5};
        plain->run.cuda_graphs = true;
        QVERIFY(reason("fastvar").contains("replayed CUDA graphs"));
        // LazyVAR starting after the last scale.
        plain->run.cuda_graphs = false;
        st.accel_config = {{"lazyvar", {{"enabled", true}, {"start_scale", 7}}}};
        QVERIFY2(reason("lazyvar").contains("starts at scale 7, but this run has 6 scales"),
                 qPrintable(seen.back()));
        // No accelerator on; tabs of another family.
        st.accel_config = nlohmann::json::object();
        plain->same_as_baseline = true;
        QVERIFY(reason("").contains("No accelerator is on"));
        QVERIFY(reason("ams_kv").contains("enable AMS-KV on the left"));
        QVERIFY(reason("text").contains("reads no text"));
        QVERIFY(reason("mar").contains("come from MAR models"));
        st.family = Family::Mar;
        QVERIFY(reason("fastvar").contains("the loaded model is a MAR"));
        QVERIFY(emptyTabReason("attention", st).contains("MAR models record no attention"));
        st.family = Family::Var;
        // The attention tab: graphs, SparVAR's sparse scales, a skipped scale.
        auto accel = run(6, {5});
        accel->run.attention.push_back({0, 0, {}});
        st.accel = accel;
        st.accel_config = {{"sparvar", {{"enabled", true}, {"sparse_scales", 2}}}};
        QVERIFY(emptyTabReason("attention", st, Side::Accelerated, 5, 0)
                    .contains("Scale skipping removed scale 5 on this side"));
        QVERIFY(emptyTabReason("attention", st, Side::Accelerated, 4, 0)
                    .contains("SparVAR computed scale 4 sparsely"));
        accel->run.attention.clear();
        accel->run.cuda_graphs = true;
        QVERIFY(emptyTabReason("attention", st, Side::Accelerated, 1, 0)
                    .contains("replayed CUDA graphs"));
        // Two runs of the history side by side: they keep no records.
        st.history_pair = true;
        QVERIFY(reason("fastvar").startsWith("Two runs from the history"));
        QVERIFY(emptyTabReason("attention", st).startsWith("Two runs from the history"));
        st.history_pair = false;
        // Whatever happened, no text asks to enable a method that was on.
        for (const QString& s : seen) {
            QVERIFY2(!s.contains("enable FastVAR", Qt::CaseInsensitive) ||
                         s.contains("No accelerator is on"),
                     qPrintable(s));
        }
    }

    // In the window: the tabs of methods that were off, a frame without records and a cancelled
    // accelerated run say so.
    void inspectorTabsExplainTheRunOnShow() {
        MainWindow w(test_loader);
        Request r = tiny_request(true);  // 6 scales
        r.accel = {{"fastvar", {{"enabled", true}, {"ratios", {0.4, 0.5}}}}};
        w.applyRequest(r, true);
        QVERIFY(wait_job(w));
        AccelInspector* fast = w.inspector()->methodTab("fastvar");
        QVERIFY(fast->recordCount() > 0);
        const QString lazy = w.inspector()->methodTab("lazyvar")->view()->emptyText();
        QVERIFY2(lazy.startsWith("LazyVAR is off in the run on show (on: FastVAR)"),
                 qPrintable(lazy));
        // A filmstrip frame of a scale FastVAR did not prune.
        emit w.comparison()->scaleSelected(1);
        QVERIFY2(fast->valuesText().contains("FastVAR prunes only the last 2 scales"),
                 qPrintable(fast->valuesText()));
        // The accelerated run cancelled: the tab says so, not "enable FastVAR".
        w.inspector()->setAcceleratedMissing("cancelled");
        w.results()->clearSide(Side::Accelerated);
        const QString cancelled = fast->view()->emptyText();
        QVERIFY2(cancelled.startsWith("The accelerated run was cancelled"), qPrintable(cancelled));
    }

    // Menus in the usual order.
    void menusInTheUsualOrder() {
        MainWindow w(test_loader);
        QStringList titles;
        for (QAction* a : w.menuBar()->actions()) titles << a->text().remove('&');
        QCOMPARE(titles, QStringList({"File", "Edit", "View", "Help"}));
    }

  private:
    static std::string varscope_source_dir() { return VARSCOPE_SOURCE_DIR; }
};

QTEST_MAIN(UiTest)
#include "ui_test.moc"
