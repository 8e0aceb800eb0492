#include "ui/comparison_view.h"

#include <QCheckBox>
#include <QGridLayout>
#include <QLabel>
#include <QMenu>
#include <QPushButton>

#include "core/accel/probe_kinds.h"
#include "ui/filmstrip.h"
#include "visualization/image_canvas.h"

namespace varscope::gui {

QString acceleratedCaption(const SideResult& r) {
    if (r.same_as_baseline) return QObject::tr("Accelerated: none enabled (= baseline)");
    return QObject::tr("%1 · %2 ms")
        .arg(QString::fromStdString(r.run.accel_summary))
        .arg(r.run.total_ms, 0, 'f', 1);
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

    // Right-click an image to save it at full size (native or upscaled).
    for (auto [canvas, which] : {std::pair{base_canvas_, SavedImage::Baseline},
                                 {accel_canvas_, SavedImage::Accelerated},
                                 {diff_canvas_, SavedImage::Difference}}) {
        canvas->setContextMenuPolicy(Qt::CustomContextMenu);
        connect(canvas, &QWidget::customContextMenuRequested, this,
                [this, canvas = canvas, which = which](const QPoint& pos) {
                    QMenu* menu = imageMenu(which, this);
                    if (menu->isEmpty()) {
                        delete menu;
                        return;
                    }
                    menu->setAttribute(Qt::WA_DeleteOnClose);
                    menu->popup(canvas->mapToGlobal(pos));
                });
    }

    for (auto* s : {base_strip_, accel_strip_})
        connect(s, &Filmstrip::frameClicked, this, [this](int i) {
            base_strip_->setSelected(i);
            accel_strip_->setSelected(i);
            emit scaleSelected(i);
        });
}

QMenu* ComparisonView::imageMenu(SavedImage which, QWidget* parent) {
    auto* menu = new QMenu(parent);
    const bool shown =
        model_ && (which == SavedImage::Baseline      ? bool(model_->baseline())
                   : which == SavedImage::Accelerated ? bool(model_->accelerated())
                                                      : !model_->differenceImage().isNull());
    if (!shown) return menu;
    const QString what = which == SavedImage::Baseline      ? tr("Save baseline image…")
                         : which == SavedImage::Accelerated ? tr("Save accelerated image…")
                                                            : tr("Save difference map…");
    menu->addAction(what, this, [this, which] { emit saveImageRequested(which); });
    menu->addAction(tr("Save all images…"), this,
                    [this] { emit saveImageRequested(std::nullopt); });
    return menu;
}

QStringList ComparisonView::scaleCaptions(const SideResult& r) {
    QStringList c;
    for (const auto& s : r.run.scales)
        c << (r.run.family == Family::Mar ? tr("step %1").arg(s.scale + 1)
              : s.skipped                 ? tr("skip")
                                          : QString::number(s.patch_num) + QStringLiteral("²"));
    return c;
}

void ComparisonView::setResultsModel(ResultsModel* model) {
    if (model_) disconnect(model_, nullptr, this, nullptr);
    model_ = model;
    if (model_) connect(model_, &ResultsModel::changed, this, &ComparisonView::modelChanged);
    showModel();
}

void ComparisonView::showSide(Side side, const SideResultPtr& r) {
    const bool base = side == Side::Baseline;
    auto* canvas = base ? base_canvas_ : accel_canvas_;
    auto* strip = base ? base_strip_ : accel_strip_;
    (base ? shown_base_ : shown_accel_) = r;
    canvas->setBusy({});
    if (!r) {
        canvas->setImage({});
        canvas->setCaption(base ? tr("Baseline") : tr("Accelerated"));
        strip->setFrames({}, {});
        return;
    }
    canvas->setImage(r->image);
    // One of two history runs side by side: its label names the run (neither is a baseline).
    const QString label = model_ ? model_->label(side) : QString();
    if (!label.isEmpty())
        canvas->setCaption(label);
    else
        canvas->setCaption(base ? tr("Baseline · %1 ms%2")
                                      .arg(r->run.total_ms, 0, 'f', 1)
                                      .arg(r->cached ? tr(" (cached)") : QString())
                                : acceleratedCaption(*r));
    strip->setFrames(r->filmstrip, scaleCaptions(*r));
}

void ComparisonView::modelChanged() {
    // Only the sides that changed: the other may be showing the previews of its run.
    const SideResultPtr base = model_ ? model_->baseline() : nullptr;
    const SideResultPtr accel = model_ ? model_->accelerated() : nullptr;
    if (base != shown_base_) showSide(Side::Baseline, base);
    if (accel != shown_accel_) showSide(Side::Accelerated, accel);
    const QImage diff = model_ ? model_->differenceImage() : QImage();
    diff_canvas_->setImage(diff);
    if (!diff.isNull())
        diff_canvas_->setCaption(tr("|Δ| (mean RGB, 0 … %1) · mean %2")
                                     .arg(ResultsModel::kDiffMax)
                                     .arg(model_->differenceMean(), 0, 'f', 4));
    else
        diff_canvas_->setCaption(tr("|accelerated − baseline|"));
    metrics_label_->setText(metricsText());
    metrics_label_->setToolTip(model_ ? model_->metrics().toolTip() : QString());
}

void ComparisonView::showModel() {
    showSide(Side::Baseline, model_ ? model_->baseline() : nullptr);
    showSide(Side::Accelerated, model_ ? model_->accelerated() : nullptr);
    modelChanged();
}

QString ComparisonView::metricsText() const {
    return model_ ? model_->metrics().text() : QString();
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
    // A failed or cancelled accelerated side shows its message, not the previews of the run.
    if (side == Side::Accelerated && !(model_ && model_->accelerated())) {
        c->setImage({});
        accel_strip_->setFrames({}, {});
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

void ComparisonView::setShowDifference(bool on) {
    if (show_diff_->isChecked() != on) show_diff_->setChecked(on);
    diff_canvas_->setVisible(on);
}

bool ComparisonView::showDifference() const {
    return show_diff_->isChecked();
}

}  // namespace varscope::gui
