#include "ui/comparison_view.h"

#include <QCheckBox>
#include <QGridLayout>
#include <QLabel>
#include <QPushButton>
#include <cmath>

#include "core/accel/probe_kinds.h"
#include "ui/filmstrip.h"
#include "visualization/float_grid.h"
#include "visualization/image_canvas.h"

namespace varscope::gui {
namespace {
constexpr float kDiffMax = 0.5f;  // |Δ| range of the difference image (mean over RGB)

QString bytes_text(int64_t b) {
    if (b >= (int64_t(1) << 20)) return QString::number(b / double(1 << 20), 'f', 2) + " MiB";
    if (b >= 1024) return QString::number(b / 1024.0, 'f', 1) + " KiB";
    return QString::number(b) + " B";
}
}  // namespace

QString ComparisonMetrics::text() const {
    if (!valid) return {};
    const QString p = std::isinf(psnr) ? QStringLiteral("∞") : QString::number(psnr, 'f', 2);
    QString t = QObject::tr("PSNR %1 dB · SSIM %2 · speedup %3× (%4 → %5 ms)")
                    .arg(p)
                    .arg(ssim, 0, 'f', 4)
                    .arg(speedup, 0, 'f', 2)
                    .arg(base_ms, 0, 'f', 1)
                    .arg(accel_ms, 0, 'f', 1);
    // MAR keeps no KV cache (its transformer is bidirectional): no "KV 0 B → 0 B" there.
    if (base_kv > 0 || accel_kv > 0)
        t += QObject::tr(" · KV %1 → %2").arg(bytes_text(base_kv), bytes_text(accel_kv));
    if (sparvar_reference) t += QObject::tr(" · SparVAR on its reference path");
    if (cuda)
        t += base_graphs && accel_graphs     ? QObject::tr(" · CUDA graphs")
             : !base_graphs && !accel_graphs ? QObject::tr(" · eager")
             : base_graphs ? QObject::tr(" · baseline as CUDA graphs, accelerated eager")
                           : QObject::tr(" · baseline eager, accelerated as CUDA graphs");
    return t;
}

QString acceleratedCaption(const SideResult& r) {
    if (r.same_as_baseline) return QObject::tr("Accelerated: none enabled (= baseline)");
    return QObject::tr("%1 · %2 ms")
        .arg(QString::fromStdString(r.run.accel_summary))
        .arg(r.run.total_ms, 0, 'f', 1);
}

bool ranSparVarReference(const RunOutput& run) {
    for (const auto& a : run.accel) {
        if (a.method != "sparvar" || a.kind != probe_kinds::kCslaTokenMask) continue;
        const auto it = a.values.find("cuda_kernels");
        if (it != a.values.end() && it->second == 0.0) return true;
    }
    return false;
}

QString ComparisonMetrics::toolTip() const {
    if (!valid) return {};
    QString t = QObject::tr(
                    "Times are the model's own: every scale (MAR: step) and the final decode.\n"
                    "Left out: the filmstrip previews and probe records, and one-time CUDA "
                    "graph capture\n(baseline %1 ms, accelerated %2 ms).")
                    .arg(base_overhead_ms, 0, 'f', 1)
                    .arg(accel_overhead_ms, 0, 'f', 1);
    if (sparvar_reference)
        t += QObject::tr(
            "\nSparVAR's sparse attention ran on its exact reference (dense attention with the "
            "mask), which computes every score, so it saves no time here. Its speed comes from "
            "the CUDA kernels: a CUDA GPU with bf16 or fp16, block-wise mask, reference kernels "
            "off.");
    if (cuda && !base_graphs && !accel_graphs)
        t += QObject::tr(
            "\nBoth sides ran eagerly, not as CUDA graph replays: the inspector records "
            "attention maps and accelerator records inside the steps, which a replay cannot "
            "(AMS-KV has no graph form at all). At batch 1 graphs are 2-3x faster; the sweep "
            "records nothing and times with graphs where the method allows.");
    if (matched_eager)
        t += QObject::tr(
            "\nOne side could not run as CUDA graphs, so the other ran again eagerly: both "
            "are timed the same way.");
    if (cuda && base_graphs != accel_graphs)
        t += QObject::tr(
            "\nOnly one side ran as CUDA graphs: the speedup mixes two ways of "
            "running and says little about the method.");
    return t;
}

ComparisonView::ComparisonView(QWidget* parent) : QWidget(parent) {
    sync_ = new viz::ViewSync(this);
    auto* grid = new QGridLayout(this);
    grid->setContentsMargins(4, 4, 4, 4);
    auto make = [&](const QString& caption, const QString& empty) {
        auto* c = new viz::ImageCanvas(this);
        c->setSync(sync_);
        c->setCaption(caption);
        c->setEmptyText(empty);
        return c;
    };
    base_canvas_ = make(tr("Baseline"), tr("Press Generate (Ctrl+Enter) to sample an image"));
    accel_canvas_ = make(tr("Accelerated"), tr("Enable an accelerator on the left to compare"));
    diff_canvas_ =
        make(tr("|accelerated − baseline|"), tr("Difference appears after both sides ran"));
    base_canvas_->setObjectName("baselineCanvas");
    accel_canvas_->setObjectName("acceleratedCanvas");
    base_strip_ = new Filmstrip(this);
    accel_strip_ = new Filmstrip(this);
    grid->addWidget(base_canvas_, 0, 0);
    grid->addWidget(accel_canvas_, 0, 1);
    grid->addWidget(diff_canvas_, 0, 2);
    grid->addWidget(base_strip_, 1, 0);
    grid->addWidget(accel_strip_, 1, 1);
    grid->setRowStretch(0, 1);
    diff_canvas_->hide();

    auto* bar = new QHBoxLayout;
    show_diff_ = new QCheckBox(tr("Difference"), this);
    show_diff_->setObjectName("showDifference");
    show_diff_->setToolTip(tr("Show |accelerated − baseline| as a heatmap (D)"));
    show_diff_->setShortcut(QKeySequence(Qt::Key_D));
    connect(show_diff_, &QCheckBox::toggled, this, &ComparisonView::setShowDifference);
    auto* fit = new QPushButton(tr("Fit"), this);
    fit->setToolTip(tr("Reset zoom and pan (or double-click an image); wheel zooms, drag pans"));
    connect(fit, &QPushButton::clicked, sync_, &viz::ViewSync::reset);
    metrics_label_ = new QLabel(this);
    metrics_label_->setObjectName("metricsLabel");
    metrics_label_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    // The line grows with its notes (graphs, reference path); wrapped, it cannot widen the window.
    metrics_label_->setWordWrap(true);
    bar->addWidget(show_diff_);
    bar->addWidget(fit);
    bar->addSpacing(12);
    bar->addWidget(metrics_label_, 1);
    grid->addLayout(bar, 2, 0, 1, 3);

    for (auto* s : {base_strip_, accel_strip_})
        connect(s, &Filmstrip::frameClicked, this, [this](int i) {
            base_strip_->setSelected(i);
            accel_strip_->setSelected(i);
            emit scaleSelected(i);
        });
}

QStringList ComparisonView::scaleCaptions(const SideResult& r) {
    QStringList c;
    for (const auto& s : r.run.scales)
        c << (r.run.family == Family::Mar ? tr("step %1").arg(s.scale + 1)
              : s.skipped                 ? tr("skip")
                                          : QString::number(s.patch_num) + QStringLiteral("²"));
    return c;
}

void ComparisonView::setResult(const SideResultPtr& r) {
    if (!r) return;
    if (r->side == Side::Baseline) {
        base_ = r;
        base_canvas_->setImage(r->image);
        base_canvas_->setBusy({});
        base_canvas_->setCaption(tr("Baseline · %1 ms%2")
                                     .arg(r->run.total_ms, 0, 'f', 1)
                                     .arg(r->cached ? tr(" (cached)") : QString()));
        base_strip_->setFrames(r->filmstrip, scaleCaptions(*r));
    } else {
        accel_ = r;
        accel_canvas_->setImage(r->image);
        accel_canvas_->setBusy({});
        accel_canvas_->setCaption(acceleratedCaption(*r));
        accel_strip_->setFrames(r->filmstrip, scaleCaptions(*r));
    }
    updateComparison();
}

void ComparisonView::updateComparison() {
    metrics_ = {};
    diff_image_ = {};
    if (base_ && accel_ && !base_->image.isNull() && !accel_->image.isNull()) {
        metrics_.valid = true;
        const ImageQuality q = Engine::image_quality(base_->run.image, accel_->run.image);
        metrics_.psnr = q.psnr;
        metrics_.ssim = q.ssim;
        metrics_.base_ms = base_->run.total_ms;
        metrics_.accel_ms = accel_->run.total_ms;
        metrics_.speedup =
            accel_->run.total_ms > 0 ? base_->run.total_ms / accel_->run.total_ms : 0;
        metrics_.base_kv = base_->run.kv_bytes;
        metrics_.accel_kv = accel_->run.kv_bytes;
        metrics_.base_overhead_ms = base_->run.overhead_ms;
        metrics_.accel_overhead_ms = accel_->run.overhead_ms;
        metrics_.sparvar_reference = ranSparVarReference(accel_->run);
        metrics_.cuda = base_->run.cuda || accel_->run.cuda;
        metrics_.base_graphs = base_->run.cuda_graphs;
        metrics_.accel_graphs = accel_->run.cuda_graphs;
        metrics_.matched_eager = base_->matched_eager || accel_->matched_eager;
        const viz::FloatGrid d = viz::image_difference(base_->image, accel_->image);
        diff_image_ = viz::render_heatmap(d, viz::Colormap::Magma, {0.f, kDiffMax});
        diff_canvas_->setCaption(
            tr("|Δ| (mean RGB, 0 … %1) · mean %2").arg(kDiffMax).arg(d.mean(), 0, 'f', 4));
    }
    diff_canvas_->setImage(diff_image_);
    metrics_label_->setText(metricsText());
    metrics_label_->setToolTip(metrics_.toolTip());
}

QString ComparisonView::metricsText() const {
    return metrics_.text();
}

void ComparisonView::setProgress(Side side, int scale, int scales) {
    auto* c = side == Side::Baseline ? base_canvas_ : accel_canvas_;
    c->setBusy(
        (family_ == Family::Mar ? tr("step %1/%2") : tr("scale %1/%2")).arg(scale + 1).arg(scales));
}

void ComparisonView::setPreview(Side side, const QImage& image) {
    // The image so far replaces the side's picture while its run is in progress.
    (side == Side::Baseline ? base_canvas_ : accel_canvas_)->setImage(image);
}

void ComparisonView::setSideMessage(Side side, const QString& message) {
    auto* c = side == Side::Baseline ? base_canvas_ : accel_canvas_;
    c->setBusy({});
    if (side == Side::Accelerated) {
        accel_.reset();
        c->setImage({});
        accel_strip_->setFrames({}, {});
        updateComparison();
    }
    c->setEmptyText(message);
    c->setCaption(side == Side::Baseline ? tr("Baseline") : tr("Accelerated"));
}

void ComparisonView::markStale() {
    base_canvas_->setBusy(tr("waiting…"));
    accel_canvas_->setBusy(tr("waiting…"));
}

void ComparisonView::clearBusy() {
    base_canvas_->setBusy({});
    accel_canvas_->setBusy({});
}

void ComparisonView::clear() {
    base_.reset();
    accel_.reset();
    base_canvas_->setImage({});
    accel_canvas_->setImage({});
    base_strip_->setFrames({}, {});
    accel_strip_->setFrames({}, {});
    updateComparison();
}

void ComparisonView::setShowDifference(bool on) {
    if (show_diff_->isChecked() != on) show_diff_->setChecked(on);
    diff_canvas_->setVisible(on);
}

bool ComparisonView::showDifference() const {
    return show_diff_->isChecked();
}

}  // namespace varscope::gui
