#include "ui/plots_panel.h"

#include <qcustomplot.h>

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <map>

#include "core/accel/probe_kinds.h"
#include "ui/engine/engine.h"
#include "visualization/float_grid.h"

namespace varscope::gui {
namespace {

const QColor kBase(60, 110, 200), kAccel(220, 100, 30), kHead(40, 150, 70), kHeadCfg(150, 60, 170);

QCustomPlot* make_plot(QWidget* parent, const QString& title, const QString& x, const QString& y) {
    auto* p = new QCustomPlot(parent);
    p->setMinimumSize(220, 170);
    p->plotLayout()->insertRow(0);
    auto* t = new QCPTextElement(p, title, QFont(p->font().family(), 10, QFont::Bold));
    p->plotLayout()->addElement(0, 0, t);
    p->xAxis->setLabel(x);
    p->yAxis->setLabel(y);
    p->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    p->legend->setVisible(true);
    p->legend->setFont(QFont(p->font().family(), 8));
    // Placed in the emptiest corner once data is in (place_legend); translucent, so a point
    // that still falls behind it shows.
    p->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignLeft);
    p->legend->setBrush(QColor(255, 255, 255, 200));
    return p;
}

}  // namespace

// The corner whose box (45 % of the axis width, 40 % of its height, where a legend goes) covers
// the fewest visible data points (or line segments' midpoints), first in the order top left, top
// right, bottom right, bottom left. Rising VAR curves leave the top left free; MAR's flat
// per-step curves cross it, and leave the bottom free.
Qt::Alignment emptiest_corner(const QCustomPlot* p, int* points_under) {
    const QCPRange xr = p->xAxis->range(), yr = p->yAxis->range();
    const Qt::Alignment corners[] = {Qt::AlignTop | Qt::AlignLeft, Qt::AlignTop | Qt::AlignRight,
                                     Qt::AlignBottom | Qt::AlignRight,
                                     Qt::AlignBottom | Qt::AlignLeft};
    int counts[4] = {0, 0, 0, 0};
    auto count = [&](double x, double y) {
        const double u = (x - xr.lower) / std::max(xr.size(), 1e-12);
        const double v = (y - yr.lower) / std::max(yr.size(), 1e-12);
        for (int c = 0; c < 4; ++c) {
            const bool left = corners[c] & Qt::AlignLeft, top = corners[c] & Qt::AlignTop;
            if ((left ? u <= 0.45 : u >= 0.55) && (top ? v >= 0.6 : v <= 0.4)) ++counts[c];
        }
    };
    for (int g = 0; g < p->graphCount(); ++g) {
        const QCPGraph* graph = p->graph(g);
        if (!graph->visible()) continue;
        const auto data = graph->data();
        for (auto it = data->constBegin(); it != data->constEnd(); ++it) {
            count(it->key, it->value);
            if (it + 1 != data->constEnd())
                count((it->key + (it + 1)->key) / 2, (it->value + (it + 1)->value) / 2);
        }
    }
    const auto best = std::min_element(counts, counts + 4) - counts;
    if (points_under) *points_under = counts[best];
    return corners[best];
}

void place_legend(QCustomPlot* p) {
    int under = 0;
    Qt::Alignment corner = emptiest_corner(p, &under);
    if (under > 0) {  // every corner has data (LazyMAR's two series): make room above it
        const QCPRange r = p->yAxis->range();
        p->yAxis->setRangeUpper(r.upper + 0.9 * r.size());
        corner = emptiest_corner(p);
    }
    p->axisRect()->insetLayout()->setInsetAlignment(0, corner);
}

namespace {

void set_series(QCustomPlot* p, int graph, const QString& name, const QColor& c,
                const QVector<double>& x, const QVector<double>& y) {
    while (p->graphCount() <= graph) p->addGraph();
    auto* g = p->graph(graph);
    g->setName(name);
    g->setPen(QPen(c, 2));
    g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 5));
    g->setData(x, y);
}

}  // namespace

PlotsPanel::PlotsPanel(QWidget* parent) : QWidget(parent) {
    auto* v = new QVBoxLayout(this);
    note_ = new QLabel(this);
    note_->setObjectName("plotsNote");
    note_->setWordWrap(true);
    note_->hide();
    v->addWidget(note_);
    auto* grid = new QGridLayout;
    latency_ = make_plot(this, tr("Latency per scale"), tr("scale"), tr("ms"));
    latency_->setObjectName("latencyPlot");
    cumulative_ = make_plot(this, tr("Cumulative time"), tr("scale"), tr("ms"));
    kv_ = make_plot(this, tr("KV cache after each scale"), tr("scale"), tr("MiB"));
    work_ = make_plot(this, tr("Work and time per scale"), tr("scale"), tr("× baseline"));
    work_->setObjectName("workPlot");
    work_->setToolTip(
        tr("Per scale, baseline ÷ accelerated: FLOPs of the step's forward (the work the method "
           "saves, its own scoring included) and time (the speedup). Where the speedup is below "
           "the work line, overhead, kernel launches or memory traffic take the saving back; at "
           "1 the scale costs what the baseline's does. A grouped step counts on its first "
           "scale; skipped scales have no point."));
    sweep_plot_ =
        make_plot(this, tr("Sweep: speedup vs PSNR"), tr("PSNR vs baseline (dB)"), tr("speedup ×"));
    sweep_plot_->setObjectName("sweepPlot");
    sweep_plot_->legend->setVisible(false);
    lazymar_ = make_plot(this, tr("LazyMAR per step"), tr("step"), tr("fraction"));
    lazymar_->setObjectName("lazymarPlot");
    lazymar_->setVisible(false);
    // Scales and steps are whole numbers: no ticks at 2.5 and 7.5.
    for (auto* p : {latency_, cumulative_, kv_, lazymar_, work_}) {
        QSharedPointer<QCPAxisTickerFixed> ticker(new QCPAxisTickerFixed);
        ticker->setTickStep(1.0);
        ticker->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
        p->xAxis->setTicker(ticker);
    }
    grid->addWidget(latency_, 0, 0);
    grid->addWidget(cumulative_, 0, 1);
    grid->addWidget(kv_, 0, 2);
    grid->addWidget(lazymar_, 0, 2);
    grid->addWidget(work_, 0, 3);
    grid->addWidget(sweep_plot_, 0, 4);
    v->addLayout(grid, 1);

    auto* bar = new QHBoxLayout;
    method_ = new QComboBox(this);
    method_->setObjectName("sweepMethod");
    param_ = new QComboBox(this);
    param_->setObjectName("sweepParam");
    from_ = new QDoubleSpinBox(this);
    from_->setObjectName("sweepFrom");
    to_ = new QDoubleSpinBox(this);
    to_->setObjectName("sweepTo");
    steps_ = new QSpinBox(this);
    steps_->setRange(2, 50);
    steps_->setValue(6);
    steps_->setSuffix(tr(" steps"));
    for (auto* s : {from_, to_}) s->setDecimals(3);
    run_ = new QPushButton(tr("Run sweep"), this);
    run_->setObjectName("runSweep");
    sweep_y_ = new QComboBox(this);
    sweep_y_->setObjectName("sweepY");
    sweep_y_->addItem(tr("speedup"), "speedup");
    sweep_y_->addItem(tr("attention work saved"), "work");
    sweep_y_->setToolTip(
        tr("What the sweep plots against PSNR: the measured speedup, or baseline attention FLOPs "
           "÷ accelerated (the work a method saves, also where its path saves no time, e.g. "
           "SparVAR's reference on the CPU)"));
    connect(sweep_y_, qOverload<int>(&QComboBox::currentIndexChanged), this,
            [this] { replotSweep(); });
    sweep_status_ = new QLabel(this);
    sweep_status_->setObjectName("sweepStatus");
    bar->addWidget(new QLabel(tr("Sweep"), this));
    bar->addWidget(method_);
    bar->addWidget(param_);
    bar->addWidget(new QLabel(tr("from"), this));
    bar->addWidget(from_);
    bar->addWidget(new QLabel(tr("to"), this));
    bar->addWidget(to_);
    bar->addWidget(steps_);
    bar->addWidget(run_);
    bar->addWidget(new QLabel(tr("y:"), this));
    bar->addWidget(sweep_y_);
    bar->addWidget(sweep_status_, 1);
    v->addLayout(bar);

    fillMethods();
    connect(method_, qOverload<int>(&QComboBox::currentIndexChanged), this,
            &PlotsPanel::fillParams);
    connect(param_, qOverload<int>(&QComboBox::currentIndexChanged), this,
            &PlotsPanel::resetSweepRange);
    fillParams();
    connect(run_, &QPushButton::clicked, this, [this] {
        if (method_->count() == 0) return;
        emit sweepRequested(method_->currentData().toString(), param_->currentData().toString(),
                            sweepValues());
    });
    setSweepRunning(false);
}

std::optional<ParamSpec> PlotsPanel::sweptParam() const {
    const auto id = method_->currentData().toString().toStdString();
    for (const auto& m : Engine::methods(family_))
        if (m.id == id)
            for (const auto& p : m.params)
                if (QString::fromStdString(p.key) == param_->currentData().toString()) return p;
    return std::nullopt;
}

void PlotsPanel::resetSweepRange() {
    const auto p = sweptParam();
    if (!p) return;
    // The whole range the loaded model accepts: a 10-scale VAR skips at most 9 scales, 16 MAR
    // steps start caching at step 15 at the latest.
    const double top = model_max(*p, counts_);
    for (auto* s : {from_, to_}) {
        s->setDecimals(p->kind == ParamKind::Int ? 0 : 3);
        s->setRange(p->min, top);
    }
    from_->setValue(p->min);
    to_->setValue(top);
}

void PlotsPanel::setModelCounts(const ModelCounts& counts) {
    const auto p = sweptParam();
    const bool moved = p && model_max(*p, counts) != model_max(*p, counts_);
    counts_ = counts;
    if (moved) resetSweepRange();  // else the user's range stays
}

void PlotsPanel::fillMethods() {
    const QSignalBlocker block(method_);
    method_->clear();
    for (const auto& m : Engine::methods(family_)) {
        const bool numeric = std::any_of(m.params.begin(), m.params.end(), [](const ParamSpec& p) {
            return p.kind == ParamKind::Int || p.kind == ParamKind::Real;
        });
        if (numeric)
            method_->addItem(QString::fromStdString(m.title), QString::fromStdString(m.id));
    }
}

void PlotsPanel::setFamily(Family f) {
    if (f == family_) return;
    family_ = f;
    const bool is_mar = f == Family::Mar;
    const QString unit = is_mar ? tr("step") : tr("scale");
    for (auto* p : {latency_, cumulative_}) p->xAxis->setLabel(unit);
    if (auto* t = qobject_cast<QCPTextElement*>(latency_->plotLayout()->element(0, 0)))
        t->setText(is_mar ? tr("Latency per step") : tr("Latency per scale"));
    kv_->setVisible(!is_mar);    // MAR keeps no KV cache across steps
    work_->setVisible(!is_mar);  // and has no per-part cost model
    lazymar_->setVisible(is_mar);
    fillMethods();
    fillParams();
    clearSweep();
    setSweepRunning(false);
}

void PlotsPanel::fillParams() {
    param_->clear();
    const auto id = method_->currentData().toString().toStdString();
    for (const auto& m : Engine::methods(family_))
        if (m.id == id)
            for (const auto& p : m.params)
                if (p.kind == ParamKind::Int || p.kind == ParamKind::Real)
                    param_->addItem(
                        QString::fromStdString(p.symbol.empty() ? p.label
                                                                : p.label + " (" + p.symbol + ")"),
                        QString::fromStdString(p.key));
}

std::vector<double> PlotsPanel::sweepValues() const {
    std::vector<double> v;
    const int n = steps_->value();
    const bool integer = from_->decimals() == 0;
    for (int i = 0; i < n; ++i) {
        double x = from_->value() + (to_->value() - from_->value()) * i / (n - 1);
        if (integer) x = std::round(x);
        if (v.empty() || v.back() != x) v.push_back(x);
    }
    return v;
}

QString PlotsPanel::note() const {
    return note_->text();
}

void PlotsPanel::setResults(const SideResultPtr& base, const SideResultPtr& accel,
                            const QString& baseName, const QString& accelName,
                            const QString& note) {
    note_->setText(note);
    note_->setVisible(!note.isEmpty());
    // The accelerated series needs a baseline to compare with, and is the baseline again when
    // no accelerator ran.
    const std::vector<ScaleSummary> bs =
        base ? scale_summary_of(*base) : std::vector<ScaleSummary>{};
    const std::vector<ScaleSummary> as = base && accel && !accel->same_as_baseline
                                             ? scale_summary_of(*accel)
                                             : std::vector<ScaleSummary>{};
    // Two runs of the history may be of models with other scale counts: each series its own.
    auto series = [](const std::vector<ScaleSummary>& rows, QVector<double>& xs,
                     QVector<double>& ms, QVector<double>& cum, QVector<double>& kv) {
        double c = 0;
        for (size_t i = 0; i < rows.size(); ++i) {
            xs << double(i);
            ms << rows[i].millis;
            c += rows[i].millis;
            cum << c;
            kv << rows[i].kv_bytes / double(1 << 20);
        }
    };
    QVector<double> bxs, bms, bcum, bkv, axs, ams, acum, akv;
    series(bs, bxs, bms, bcum, bkv);
    series(as, axs, ams, acum, akv);
    const QString bname = baseName.isEmpty() ? tr("baseline") : baseName;
    const QString aname = accelName.isEmpty() ? tr("accelerated") : accelName;
    const double n = double(std::max(bs.size(), as.size()));
    for (auto [plot, b, a] : {std::tuple{latency_, bms, ams}, std::tuple{cumulative_, bcum, acum},
                              std::tuple{kv_, bkv, akv}}) {
        set_series(plot, 0, bname, kBase, bxs, b);
        set_series(plot, 1, aname, kAccel, axs, a);
        plot->rescaleAxes();
        plot->xAxis->setRange(-0.5, std::max(1.0, n) - 0.5);
        plot->yAxis->setRangeLower(0);
        plot->yAxis->setRangeUpper(plot->yAxis->range().upper * 1.1 + 1e-9);
        plot->graph(1)->setVisible(!a.isEmpty());
        plot->graph(1)->removeFromLegend();
        if (!a.isEmpty()) plot->graph(1)->addToLegend();
        place_legend(plot);
        plot->replot();
    }
    setWorkResults(bs, as);
    setLazyMarResults(accel);
}

void PlotsPanel::setWorkResults(const std::vector<ScaleSummary>& bs,
                                const std::vector<ScaleSummary>& as) {
    QVector<double> wx, wy, tx, ty;
    for (size_t i = 0; i < std::min(bs.size(), as.size()); ++i) {
        const double bw = bs[i].work_flops(), aw = as[i].work_flops();
        if (bs[i].work_counted && as[i].work_counted && bw > 0 && aw > 0) {
            wx << double(i);
            wy << bw / aw;
        }
        if (bs[i].millis > 0 && as[i].millis > 0 && !as[i].skipped &&
            (!as[i].work_counted || aw > 0)) {
            tx << double(i);
            ty << bs[i].millis / as[i].millis;
        }
    }
    work_->clearItems();
    auto* parity = new QCPItemStraightLine(work_);  // 1: the scale costs the baseline's
    parity->point1->setCoords(0, 1);
    parity->point2->setCoords(1, 1);
    parity->setPen(QPen(Qt::gray, 1, Qt::DashLine));
    set_series(work_, 0, tr("less work (FLOPs)"), kHead, wx, wy);
    set_series(work_, 1, tr("speedup (time)"), kAccel, tx, ty);
    work_->rescaleAxes();
    work_->xAxis->setRange(-0.5, std::max<double>(1.0, double(bs.size())) - 0.5);
    work_->yAxis->setRangeLower(0);
    work_->yAxis->setRangeUpper(std::max(1.5, work_->yAxis->range().upper * 1.1));
    place_legend(work_);
    work_->replot();
}

void PlotsPanel::setLazyMarResults(const SideResultPtr& accel) {
    // Per step: the fraction of block rows computed (mean over blocks; 1 = no reuse) and the
    // CFG residual drift of the condition cache (relative change of uncond - cond since the
    // step it was cached), both from the LazyMAR probe records; with the released code's
    // DiffLoss head caches, how far their kept tensors had moved when refreshed.
    std::map<int64_t, std::pair<double, double>> rows;  // step -> (computed, total)
    QVector<double> dx, dy, mx, my, cx, cy;
    if (accel && !accel->same_as_baseline)
        for (const auto& r : accel->run.accel) {
            if (r.method != "lazymar") continue;
            if (r.kind == probe_kinds::kLazyMarTokens && r.values.count("computed") &&
                r.values.count("total")) {
                rows[r.scale].first += r.values.at("computed");
                rows[r.scale].second += r.values.at("total");
            } else if (r.kind == probe_kinds::kLazyMarCondition && r.values.count("drift")) {
                dx << double(r.scale);
                dy << r.values.at("drift");
            } else if (r.kind == probe_kinds::kLazyMarHeadCache) {
                // A drift needs a refresh after the first one.
                auto value = [&](const char* k) {
                    return r.values.count(k) ? r.values.at(k) : 0.0;
                };
                if (value("mlp_refreshes") > 1) {
                    mx << double(r.scale);
                    my << value("mlp_drift");
                }
                if (value("cfg_refreshes") > 1) {
                    cx << double(r.scale);
                    cy << value("cfg_drift");
                }
            }
        }
    QVector<double> fx, fy;
    for (const auto& [step, ct] : rows)
        if (ct.second > 0) {
            fx << double(step);
            fy << ct.first / ct.second;
        }
    set_series(lazymar_, 0, tr("computed fraction"), kAccel, fx, fy);
    set_series(lazymar_, 1, tr("CFG residual drift"), kBase, dx, dy);
    // The head caches' series only when they ran.
    while (lazymar_->graphCount() > 2) lazymar_->removeGraph(lazymar_->graphCount() - 1);
    if (!mx.isEmpty()) set_series(lazymar_, 2, tr("head MLP drift"), kHead, mx, my);
    if (!cx.isEmpty())
        set_series(lazymar_, lazymar_->graphCount(), tr("head CFG drift"), kHeadCfg, cx, cy);
    lazymar_->rescaleAxes();
    lazymar_->yAxis->setRange(0, std::max(1.05, lazymar_->yAxis->range().upper * 1.1));
    lazymar_->xAxis->setRange(-0.5, std::max<double>(1, fx.isEmpty() ? 1 : fx.back() + 1) - 0.5);
    place_legend(lazymar_);
    lazymar_->replot();
}

void PlotsPanel::clearSweep() {
    sweep_.clear();
    sweep_plot_->clearGraphs();
    sweep_plot_->clearItems();
    sweep_plot_->replot();
    setSweepRunning(false);  // the status line named the points just cleared
}

void PlotsPanel::addSweepPoint(const SweepPoint& p) {
    sweep_.push_back(p);
    replotSweep();
    sweep_status_->setText(tr("%1 points").arg(sweep_.size()) + sweepTiming());
}

QString PlotsPanel::sweepTiming() const {
    if (sweep_.empty() || !sweep_.back().cuda) return {};
    const bool graphs = std::all_of(sweep_.begin(), sweep_.end(),
                                    [](const SweepPoint& p) { return p.cuda_graphs; });
    const bool eager = std::none_of(sweep_.begin(), sweep_.end(),
                                    [](const SweepPoint& p) { return p.cuda_graphs; });
    // Each point is timed against a baseline run the same way (generation_worker.cpp).
    return graphs  ? tr(" · both sides as CUDA graphs")
           : eager ? tr(" · both sides eager (this method has no CUDA-graph form)")
                   : tr(" · CUDA graphs where the setting has a graph form, else eager");
}

void PlotsPanel::replotSweep() {
    const bool work = sweep_y_->currentData().toString() == "work";
    if (auto* t = qobject_cast<QCPTextElement*>(sweep_plot_->plotLayout()->element(0, 0)))
        t->setText(work ? tr("Sweep: attention work saved vs PSNR") : tr("Sweep: speedup vs PSNR"));
    sweep_plot_->yAxis->setLabel(work ? tr("attention work saved ×") : tr("speedup ×"));
    sweep_plot_->clearItems();
    if (sweep_.empty()) {
        sweep_plot_->clearGraphs();
        sweep_plot_->replot();
        return;
    }
    QVector<double> x, y;
    for (const auto& s : sweep_) {
        x << (std::isfinite(s.psnr) ? s.psnr : 99.0);  // identical image: plotted at 99 dB
        y << (work ? s.work_ratio : s.speedup);
    }
    set_series(sweep_plot_, 0, param_->currentText(), kAccel, x, y);
    sweep_plot_->graph(0)->setLineStyle(QCPGraph::lsNone);
    for (int i = 0; i < x.size(); ++i) {
        auto* label = new QCPItemText(sweep_plot_);
        label->position->setCoords(x[i], y[i]);
        label->setPositionAlignment(Qt::AlignLeft | Qt::AlignBottom);
        label->setText(" " + viz::format_value(sweep_[size_t(i)].value));
        label->setFont(QFont(font().family(), 8));
    }
    sweep_plot_->rescaleAxes();
    sweep_plot_->xAxis->scaleRange(1.2);
    sweep_plot_->yAxis->scaleRange(1.2);
    sweep_plot_->replot();
}

void PlotsPanel::setSweepRunning(bool running) {
    run_->setEnabled(!running && method_->count() > 0);
    if (running)
        sweep_status_->setText(tr("sweeping…"));
    else if (method_->count() == 0)
        sweep_status_->setText(tr("No accelerator exposes a numeric hyperparameter yet."));
    else  // ended (done, cancelled or failed): what it left, not "sweeping…"
        sweep_status_->setText(sweep_.empty() ? QString()
                                              : tr("%1 points").arg(sweep_.size()) + sweepTiming());
}

}  // namespace varscope::gui
