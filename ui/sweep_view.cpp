#include "ui/sweep_view.h"

#include <qcustomplot.h>

#include <QComboBox>
#include <QDir>
#include <QDragEnterEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QMessageBox>
#include <QMimeData>
#include <QPushButton>
#include <QSaveFile>
#include <QSignalBlocker>
#include <QSvgGenerator>
#include <QToolTip>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "visualization/figure.h"

namespace varscope::gui {
namespace {

const QColor kPoint(150, 150, 150), kFront(31, 119, 180);
constexpr int kHitPixels = 8;

QString number(double v) {
    if (std::isinf(v)) return v > 0 ? QStringLiteral("∞") : QStringLiteral("−∞");
    return QString::number(v, 'g', 5);
}

void fill_better(QComboBox* box) {
    box->addItem(QObject::tr("higher is better"), int(Better::Higher));
    box->addItem(QObject::tr("lower is better"), int(Better::Lower));
}

Better better_of(const QComboBox* box) {
    return Better(box->currentData().toInt());
}

void set_better(QComboBox* box, Better b) {
    box->setCurrentIndex(std::max(0, box->findData(int(b))));
}

QString local_json_file(const QMimeData* mime) {
    if (!mime->hasUrls()) return {};
    for (const QUrl& u : mime->urls())
        if (u.isLocalFile() && u.toLocalFile().endsWith(".json", Qt::CaseInsensitive))
            return u.toLocalFile();
    return {};
}

}  // namespace

SweepView::SweepView(QWidget* parent) : QWidget(parent) {
    setAcceptDrops(true);
    auto* v = new QVBoxLayout(this);
    v->setContentsMargins(2, 2, 2, 2);

    auto* bar = new QHBoxLayout;
    auto* open = new QPushButton(tr("Open…"), this);
    open->setObjectName("sweepOpen");
    open->setToolTip(tr("Open a sweep.json written by varscope-cli sweep (or drop it here)"));
    connect(open, &QPushButton::clicked, this, &SweepView::openRequested);
    x_field_ = new QComboBox(this);
    x_field_->setObjectName("sweepXField");
    y_field_ = new QComboBox(this);
    y_field_->setObjectName("sweepYField");
    x_better_ = new QComboBox(this);
    x_better_->setObjectName("sweepXBetter");
    y_better_ = new QComboBox(this);
    y_better_->setObjectName("sweepYBetter");
    fill_better(x_better_);
    fill_better(y_better_);
    export_ = new QPushButton(tr("Export…"), this);
    export_->setObjectName("sweepExport");
    export_->setToolTip(tr("The plot as PNG or SVG"));
    connect(export_, &QPushButton::clicked, this, &SweepView::exportDialog);
    bar->addWidget(open);
    bar->addWidget(new QLabel(tr("x:"), this));
    bar->addWidget(x_field_);
    bar->addWidget(x_better_);
    bar->addWidget(new QLabel(tr("y:"), this));
    bar->addWidget(y_field_);
    bar->addWidget(y_better_);
    bar->addStretch(1);
    bar->addWidget(export_);
    v->addLayout(bar);

    auto* notice_row = new QHBoxLayout;
    file_ = new QLabel(tr("No sweep result open: File ▸ Open sweep result…, or drop a sweep.json "
                          "here (varscope-cli sweep writes it)."),
                       this);
    file_->setObjectName("sweepFile");
    file_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    notice_ = new QLabel(this);
    notice_->setObjectName("sweepNotice");
    notice_->setWordWrap(true);
    notice_->hide();
    load_anyway_ = new QPushButton(tr("Load anyway"), this);
    load_anyway_->setObjectName("sweepLoadAnyway");
    load_anyway_->hide();
    connect(load_anyway_, &QPushButton::clicked, this, [this] {
        const int index = load_anyway_index_;
        showNotice({});
        if (index >= 0) emit loadAnywayRequested(index);
    });
    v->addWidget(file_);
    notice_row->addWidget(notice_, 1);
    notice_row->addWidget(load_anyway_);
    v->addLayout(notice_row);

    plot_ = new QCustomPlot(this);
    plot_->setObjectName("sweepResultPlot");
    plot_->setMinimumSize(260, 180);
    plot_->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    plot_->setMouseTracking(true);
    plot_->legend->setVisible(true);
    plot_->legend->setFont(QFont(plot_->font().family(), 8));
    plot_->legend->setBrush(QColor(255, 255, 255, 200));
    v->addWidget(plot_, 1);
    summary_ = new QLabel(this);
    summary_->setObjectName("sweepSummary");
    summary_->setWordWrap(true);
    v->addWidget(summary_);

    connect(plot_, &QCustomPlot::mouseMove, this, [this](QMouseEvent* e) {
        const int i = pointAt(e->position().toPoint());
        if (i >= 0)
            QToolTip::showText(e->globalPosition().toPoint(), pointToolTip(i), plot_);
        else
            QToolTip::hideText();
    });
    connect(plot_, &QCustomPlot::mousePress, this,
            [this](QMouseEvent* e) { pressed_at_ = e->position().toPoint(); });
    connect(plot_, &QCustomPlot::mouseRelease, this, [this](QMouseEvent* e) {
        if (e->button() != Qt::LeftButton ||
            (e->position().toPoint() - pressed_at_).manhattanLength() > kHitPixels)
            return;  // a drag of the axes
        const int i = pointAt(e->position().toPoint());
        if (i >= 0) emit pointActivated(i);
    });
    for (auto* box : {x_field_, y_field_}) {
        connect(box, qOverload<int>(&QComboBox::currentIndexChanged), this, [this, box] {
            if (filling_) return;
            // A field's own direction: FID and latency are better low.
            const QSignalBlocker block(box == x_field_ ? x_better_ : y_better_);
            set_better(box == x_field_ ? x_better_ : y_better_,
                       default_better(box->currentData().toString().toStdString()));
            replot();
        });
    }
    for (auto* box : {x_better_, y_better_})
        connect(box, qOverload<int>(&QComboBox::currentIndexChanged), this, [this] {
            if (!filling_) replot();
        });
    fillAxisPickers();
    replot();
}

bool SweepView::open(const QString& path, QString* error) {
    try {
        setResult(read_sweep_result(path.toStdString()));
    } catch (const std::exception& e) {
        const QString message = QString::fromUtf8(e.what());
        showNotice(tr("Could not open the sweep result: %1").arg(message), true);
        if (error) *error = message;
        return false;
    }
    file_->setText(tr("Sweep result %1 · model: %2")
                       .arg(QDir::toNativeSeparators(path))
                       .arg(result_->model.empty()
                                ? tr("not recorded")
                                : QString::fromStdString(result_->model).section('\n', 0, 0)));
    file_->setToolTip(QString::fromStdString(result_->model));
    return true;
}

void SweepView::setResult(SweepResult result) {
    result_ = std::move(result);
    showNotice({});
    fillAxisPickers();
    replot();
}

void SweepView::fillAxisPickers() {
    filling_ = true;
    x_field_->clear();
    y_field_->clear();
    if (result_)
        for (const auto& f : result_->fields)
            for (auto* box : {x_field_, y_field_})
                box->addItem(QString::fromStdString(sweep_field_label(f)),
                             QString::fromStdString(f));
    // The CLI's axes first: speedup against its quality metric.
    std::string x = "speedup", y = result_ ? result_->quality_metric : "";
    if (x_field_->findData(QString::fromStdString(x)) < 0 && x_field_->count() > 0)
        x = x_field_->itemData(0).toString().toStdString();
    if (y_field_->findData(QString::fromStdString(y)) < 0 && y_field_->count() > 0)
        y = y_field_->itemData(std::min(1, y_field_->count() - 1)).toString().toStdString();
    x_field_->setCurrentIndex(std::max(0, x_field_->findData(QString::fromStdString(x))));
    y_field_->setCurrentIndex(std::max(0, y_field_->findData(QString::fromStdString(y))));
    set_better(x_better_, default_better(x));
    set_better(y_better_, default_better(y));
    for (auto* w : {static_cast<QWidget*>(x_field_), static_cast<QWidget*>(y_field_),
                    static_cast<QWidget*>(x_better_), static_cast<QWidget*>(y_better_),
                    static_cast<QWidget*>(export_)})
        w->setEnabled(result_.has_value());
    filling_ = false;
}

bool SweepView::setAxes(const std::string& x, const std::string& y) {
    const int xi = x_field_->findData(QString::fromStdString(x));
    const int yi = y_field_->findData(QString::fromStdString(y));
    if (xi < 0 || yi < 0) return false;
    filling_ = true;
    x_field_->setCurrentIndex(xi);
    y_field_->setCurrentIndex(yi);
    set_better(x_better_, default_better(x));
    set_better(y_better_, default_better(y));
    filling_ = false;
    replot();
    return true;
}

void SweepView::setBetter(Better x, Better y) {
    filling_ = true;
    set_better(x_better_, x);
    set_better(y_better_, y);
    filling_ = false;
    replot();
}

ParetoAxis SweepView::xAxis() const {
    return {x_field_->currentData().toString().toStdString(), better_of(x_better_)};
}

ParetoAxis SweepView::yAxis() const {
    return {y_field_->currentData().toString().toStdString(), better_of(y_better_)};
}

double SweepView::shownValue(double v, bool y) const {
    if (!std::isinf(v)) return v;
    const double lo = y ? y_lo_ : x_lo_, hi = y ? y_hi_ : x_hi_;
    const double span = std::max({hi - lo, std::abs(hi) * 0.1, 1e-9});
    return v > 0 ? hi + 0.08 * span : lo - 0.08 * span;
}

void SweepView::replot() {
    plot_->clearPlottables();
    plot_->clearItems();
    front_.clear();
    shown_.clear();
    if (!result_) {
        summary_->clear();
        plot_->replot();
        return;
    }
    const auto& points = result_->points;
    const ParetoAxis x = xAxis(), y = yAxis();
    front_ = sweep_pareto_front(points, x, y);
    // Finite ranges first: infinite values (identical images) are drawn just past them.
    x_lo_ = y_lo_ = 1e300;
    x_hi_ = y_hi_ = -1e300;
    for (int i = 0; i < int(points.size()); ++i) {
        const auto xv = points[i].field(x.field), yv = points[i].field(y.field);
        if (!xv || !yv) continue;
        shown_.push_back(i);
        if (!std::isinf(*xv)) x_lo_ = std::min(x_lo_, *xv), x_hi_ = std::max(x_hi_, *xv);
        if (!std::isinf(*yv)) y_lo_ = std::min(y_lo_, *yv), y_hi_ = std::max(y_hi_, *yv);
    }
    if (x_lo_ > x_hi_) x_lo_ = 0, x_hi_ = 1;
    if (y_lo_ > y_hi_) y_lo_ = 0, y_hi_ = 1;

    QVector<double> px, py, fx, fy;
    for (int i : shown_) {
        const double xv = shownValue(*points[i].field(x.field), false);
        const double yv = shownValue(*points[i].field(y.field), true);
        (front_[i] ? fx : px).push_back(xv);
        (front_[i] ? fy : py).push_back(yv);
    }
    auto* others = plot_->addGraph();
    others->setName(tr("points"));
    others->setLineStyle(QCPGraph::lsNone);
    others->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, kPoint, kPoint, 7));
    others->setData(px, py);
    auto* staircase = new QCPCurve(plot_->xAxis, plot_->yAxis);
    staircase->removeFromLegend();
    staircase->setPen(QPen(kFront, 1.5));
    QVector<double> sx, sy;
    for (const auto& [xv, yv] : pareto_staircase(points, front_, x, y)) {
        sx.push_back(shownValue(xv, false));
        sy.push_back(shownValue(yv, true));
    }
    staircase->setData(sx, sy);
    auto* on_front = plot_->addGraph();
    on_front->setName(tr("Pareto front"));
    on_front->setLineStyle(QCPGraph::lsNone);
    on_front->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, kFront, kFront, 9));
    on_front->setData(fx, fy);
    std::vector<int> named;  // the front's points by x: their names alternate above and below
    for (int i : shown_)
        if (front_[i]) named.push_back(i);
    std::sort(named.begin(), named.end(),
              [&](int a, int b) { return *points[a].field(x.field) < *points[b].field(x.field); });
    for (size_t k = 0; k < named.size(); ++k) {
        const int i = named[k];
        const bool below = k % 2 == 1;
        auto* label = new QCPItemText(plot_);
        label->position->setCoords(shownValue(*points[i].field(x.field), false),
                                   shownValue(*points[i].field(y.field), true));
        // Names of points in the right half go to their left: they stay inside the plot.
        const bool right_half = label->position->coords().x() > (x_lo_ + x_hi_) / 2;
        label->setPositionAlignment((right_half ? Qt::AlignRight : Qt::AlignLeft) |
                                    (below ? Qt::AlignTop : Qt::AlignBottom));
        label->setPadding(
            QMargins(right_half ? 0 : 6, below ? 4 : 0, right_half ? 6 : 0, below ? 0 : 4));
        label->setFont(QFont(plot_->font().family(), 8));
        label->setText(QString::fromStdString(points[i].name));
        label->setClipToAxisRect(false);
    }

    auto axis_label = [](const ParetoAxis& a) {
        return QString::fromStdString(sweep_field_label(a.field)) +
               (a.better == Better::Higher ? tr(" ↑ better") : tr(" ↓ better"));
    };
    plot_->xAxis->setLabel(axis_label(x));
    plot_->yAxis->setLabel(axis_label(y));
    auto pad = [](double lo, double hi, bool has_inf) {
        const double span = std::max({hi - lo, std::abs(hi) * 0.1, 1e-9});
        return QCPRange(lo - (has_inf ? 0.15 : 0.07) * span, hi + (has_inf ? 0.15 : 0.07) * span);
    };
    bool x_inf = false, y_inf = false;
    for (int i : shown_) {
        x_inf = x_inf || std::isinf(*points[i].field(x.field));
        y_inf = y_inf || std::isinf(*points[i].field(y.field));
    }
    plot_->xAxis->setRange(pad(x_lo_, x_hi_, x_inf));
    plot_->yAxis->setRange(pad(y_lo_, y_hi_, y_inf));
    // The legend in the corner better than every point in both fields: nothing lies beyond
    // the front there.
    plot_->axisRect()->insetLayout()->setInsetAlignment(
        0, (x.better == Better::Higher ? Qt::AlignRight : Qt::AlignLeft) |
               (y.better == Better::Higher ? Qt::AlignTop : Qt::AlignBottom));

    const int on = int(std::count(front_.begin(), front_.end(), true));
    QString text = tr("%1 points, %2 on the Pareto front of %3 and %4 (blue). Hover a point for "
                      "its settings; click it to load them into the accelerator panel.")
                       .arg(points.size())
                       .arg(on)
                       .arg(QString::fromStdString(sweep_field_label(x.field)),
                            QString::fromStdString(sweep_field_label(y.field)));
    const int missing = int(points.size() - shown_.size());
    if (missing > 0) text += tr(" %n point(s) without both numbers not drawn.", nullptr, missing);
    if (x_inf || y_inf) text += tr(" ∞: images identical to the baseline's (drawn at the edge).");
    summary_->setText(text);
    plot_->replot();
}

std::optional<QPoint> SweepView::pointPosition(int index) const {
    if (!result_ || std::find(shown_.begin(), shown_.end(), index) == shown_.end())
        return std::nullopt;
    const auto& p = result_->points[size_t(index)];
    const double x = shownValue(*p.field(xAxis().field), false);
    const double y = shownValue(*p.field(yAxis().field), true);
    return QPoint(int(std::lround(plot_->xAxis->coordToPixel(x))),
                  int(std::lround(plot_->yAxis->coordToPixel(y))));
}

int SweepView::pointAt(const QPoint& pixel) const {
    int best = -1;
    int best_d = kHitPixels * kHitPixels + 1;
    for (int i : shown_) {
        const QPoint d = *pointPosition(i) - pixel;
        const int d2 = d.x() * d.x() + d.y() * d.y();
        // Of overlapping points the front's (drawn on top) wins.
        if (d2 < best_d || (d2 == best_d && front_[i])) best = i, best_d = d2;
    }
    return best;
}

QString SweepView::pointToolTip(int index) const {
    if (!result_ || index < 0 || index >= int(result_->points.size())) return {};
    const auto& p = result_->points[size_t(index)];
    QStringList lines;
    lines << p.name.c_str();
    if (p.values.is_object() && !p.values.empty()) {
        QStringList settings;
        for (const auto& [k, v] : p.values.items())
            settings << QString::fromStdString(k + " = " + v.dump());
        lines << tr("settings: %1").arg(settings.join(", "));
    } else if (p.name == "baseline") {
        lines << tr("accelerators off");
    }
    for (const auto& f : result_->fields) {
        const auto v = p.field(f);
        if (!v) continue;
        QString line = QString::fromStdString(sweep_field_label(f)) + ": " + number(*v);
        if (std::isinf(*v)) line += tr(" (images identical to the baseline's)");
        lines << line;
    }
    if (index < int(front_.size()) && front_[size_t(index)]) lines << tr("on the Pareto front");
    lines << (p.accel.is_null() ? tr("(the file records no accelerator config for this point)")
                                : tr("Click to load these settings."));
    return lines.join('\n');
}

void SweepView::showNotice(const QString& text, bool error, int loadAnywayIndex) {
    notice_->setText(text);
    notice_->setStyleSheet(error ? "color: #b00020;" : "");
    notice_->setVisible(!text.isEmpty());
    load_anyway_index_ = loadAnywayIndex;
    load_anyway_->setVisible(loadAnywayIndex >= 0);
}

QString SweepView::notice() const {
    return notice_->text();
}

bool SweepView::exportPlot(const QString& path, QString* error) const {
    if (!result_) {
        if (error) *error = tr("nothing to export: open a sweep result first");
        return false;
    }
    const int w = std::max(plot_->width(), 640), h = std::max(plot_->height(), 420);
    if (QFileInfo(path).suffix().toLower() != "svg")
        return viz::write_image(plot_->toPixmap(w, h, 2.0).toImage(), path,
                                {{"Software", "VARScope"}}, error);
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly)) {
        if (error) *error = tr("cannot write %1: %2").arg(path, file.errorString());
        return false;
    }
    QSvgGenerator svg;
    svg.setOutputDevice(&file);
    svg.setSize(QSize(w, h));
    svg.setViewBox(QRect(0, 0, w, h));
    svg.setTitle(tr("VARScope sweep: %1").arg(QString::fromStdString(result_->path)));
    QCPPainter painter(&svg);
    plot_->toPainter(&painter, w, h);
    painter.end();
    if (!file.commit()) {
        if (error) *error = tr("cannot write %1: %2").arg(path, file.errorString());
        return false;
    }
    return true;
}

void SweepView::exportDialog() {
    if (!result_) return;
    const QString dir = QFileInfo(QString::fromStdString(result_->path)).absolutePath();
    QString path = QFileDialog::getSaveFileName(this, tr("Export the sweep plot"),
                                                QDir(dir).filePath("pareto-front.png"),
                                                tr("PNG (*.png);;SVG (*.svg)"));
    if (path.isEmpty()) return;
    const QString suffix = QFileInfo(path).suffix().toLower();
    if (suffix != "png" && suffix != "svg") path += ".png";
    QString error;
    if (!exportPlot(path, &error)) QMessageBox::warning(this, tr("Export failed"), error);
}

void SweepView::dragEnterEvent(QDragEnterEvent* e) {
    if (!local_json_file(e->mimeData()).isEmpty()) e->acceptProposedAction();
}

void SweepView::dropEvent(QDropEvent* e) {
    const QString path = local_json_file(e->mimeData());
    if (path.isEmpty()) return;
    e->acceptProposedAction();
    open(path);
}

}  // namespace varscope::gui
