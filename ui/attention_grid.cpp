#include "ui/attention_grid.h"

#include <QComboBox>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QLabel>
#include <QMenu>
#include <QMessageBox>
#include <QPushButton>
#include <QVBoxLayout>
#include <cmath>

#include "visualization/figure.h"
#include "visualization/grid_figure.h"
#include "visualization/heatmap_view.h"

namespace varscope::gui {
namespace {

constexpr size_t kCacheSize = 16;  // analyses kept (runs x methods)

using analysis::GridMeasure;
using analysis::MeasureGrid;

QString measure_text(GridMeasure m) {
    return QString::fromStdString(analysis::grid_measure_name(m)).replace('_', ' ');
}

// The methods a request enables, by id.
std::vector<std::string> enabled_methods(const nlohmann::json& accel) {
    std::vector<std::string> ids;
    if (accel.is_object())
        for (const auto& [id, m] : accel.items())
            if (m.is_object() && m.value("enabled", true)) ids.push_back(id);
    return ids;
}

QString scale_text(const AnalysisOutput& a, int s) {
    const int64_t side = s < int(a.sides.size()) ? a.sides[size_t(s)] : 0;
    return QObject::tr("%1 (%2×%2)").arg(s).arg(side);
}

}  // namespace

AttentionGrid::AttentionGrid(QWidget* parent) : QWidget(parent) {
    auto* v = new QVBoxLayout(this);
    auto* bar = new QHBoxLayout;
    method_ = new QComboBox(this);
    method_->setObjectName("gridMethod");
    method_->setToolTip(
        tr("The method whose mask is measured (each enabled method alone, or all together); "
           "the dense run's attention is the reference"));
    method_->setSizeAdjustPolicy(QComboBox::AdjustToContents);
    measure_ = new QComboBox(this);
    measure_->setObjectName("gridMeasure");
    measure_->setToolTip(tr("The measure per cell (docs/analysis.md defines each)"));
    for (size_t i = 0; i < analysis::grid_measure_names().size(); ++i)
        measure_->addItem(measure_text(GridMeasure(i)), int(i));
    axes_ = new QComboBox(this);
    axes_->setObjectName("gridAxes");
    axes_->addItems({tr("scale × layer"), tr("layer × head")});
    axes_->setToolTip(
        tr("Scale × layer (each cell the mean over the heads) or layer × head at "
           "one scale"));
    scale_ = new QComboBox(this);
    scale_->setObjectName("gridScale");
    scale_->setToolTip(tr("The query scale of the layer × head view"));
    scale_->setSizeAdjustPolicy(QComboBox::AdjustToContents);
    bar->addWidget(method_);
    bar->addWidget(measure_);
    auto* look = new QHBoxLayout;
    look->addWidget(axes_);
    look->addWidget(scale_);
    cmap_ = new QComboBox(this);
    cmap_->addItems(viz::colormap_names());
    cmap_->setToolTip(tr("Colormap"));
    look->addWidget(cmap_);
    analyze_ = new QPushButton(tr("Analyse"), this);
    analyze_->setObjectName("gridAnalyze");
    analyze_->setToolTip(
        tr("Run the method with its records and the dense baseline measured per scale, layer and "
           "head (two runs on the worker)"));
    export_ = new QPushButton(tr("Export"), this);
    export_->setObjectName("gridExport");
    auto* menu = new QMenu(export_);
    menu->addAction(tr("Figure (PNG or SVG)…"), this, [this] { exportDialog(ExportKind::Figure); });
    menu->addAction(tr("Grid cells (CSV)…"), this, [this] { exportDialog(ExportKind::GridCsv); });
    menu->addAction(tr("Every measure (JSON, as varscope-cli analyze)…"), this,
                    [this] { exportDialog(ExportKind::MeasuresJson); });
    menu->addAction(tr("Every measure (CSV, as varscope-cli analyze)…"), this,
                    [this] { exportDialog(ExportKind::MeasuresCsv); });
    export_->setMenu(menu);
    // The buttons on a row of their own: beside the view's boxes they made the inspector wider
    // than a 1280-px window leaves it beside the images.
    auto* actions = new QHBoxLayout;
    actions->addWidget(analyze_);
    actions->addWidget(export_);
    actions->addStretch(1);
    look->addStretch(1);
    bar->addStretch(1);
    v->addLayout(bar);
    v->addLayout(look);
    v->addLayout(actions);
    status_ = new QLabel(this);
    status_->setObjectName("gridStatus");
    status_->setWordWrap(true);
    v->addWidget(status_);
    view_ = new viz::HeatmapView(this);
    view_->setObjectName("gridView");
    view_->setKeepAspect(false);
    view_->setCellToolTips(true);
    v->addWidget(view_, 1);

    connect(method_, qOverload<int>(&QComboBox::currentIndexChanged), this, [this] {
        if (updating_) return;
        refresh();
        requestIfNeeded(false);
    });
    for (auto* c : {measure_, axes_, scale_})
        connect(c, qOverload<int>(&QComboBox::currentIndexChanged), this, [this] {
            if (!updating_) refresh();
        });
    connect(cmap_, qOverload<int>(&QComboBox::currentIndexChanged), this,
            [this](int i) { view_->setColormap(static_cast<viz::Colormap>(i)); });
    connect(analyze_, &QPushButton::clicked, this, [this] { requestIfNeeded(true); });
    connect(view_, &viz::HeatmapView::cellClicked, this, [this](int row, int col) {
        if (!current() || !std::isfinite(grid_.at(row, col))) return;
        int64_t s = 0, l = 0, h = 0;
        grid_.locate(row, col, s, l, h);
        emit cellActivated(int(s), int(l), int(h));
    });
    rebuildMethods();
}

std::string AttentionGrid::keyOf(const Request& request, const nlohmann::json& method) {
    // What only the views record does not change the analysis' runs.
    GenerationSettings g = request.gen;
    g.attention_layer = -1;
    g.filmstrip = false;
    g.cuda_graphs = true;
    return g.baseline_key(request.model.key()) + "|" + method.dump();
}

nlohmann::json AttentionGrid::currentMethod() const {
    const QVariant d = method_->currentData();
    return d.isValid() ? nlohmann::json::parse(d.toString().toStdString())
                       : nlohmann::json::object();
}

QString AttentionGrid::currentKey() const {
    return request_ ? QString::fromStdString(keyOf(*request_, currentMethod())) : QString();
}

const AnalysisOutput* AttentionGrid::current() const {
    if (!request_) return nullptr;
    const std::string key = keyOf(*request_, currentMethod());
    for (const auto& a : cache_)
        if (a->key == key) return &a->out;
    return nullptr;
}

GridMeasure AttentionGrid::measure() const {
    return GridMeasure(measure_->currentData().toInt());
}

int AttentionGrid::methodCount() const {
    return method_->count();
}

bool AttentionGrid::selectMeasure(GridMeasure m) {
    const int i = measure_->findData(int(m));
    if (i < 0) return false;
    measure_->setCurrentIndex(i);
    return true;
}

bool AttentionGrid::selectMethod(int index) {
    if (index < 0 || index >= method_->count()) return false;
    method_->setCurrentIndex(index);
    return true;
}

void AttentionGrid::showScaleLayer() {
    axes_->setCurrentIndex(0);
}

bool AttentionGrid::showLayerHead(int scale) {
    if (scale < 0 || scale >= scale_->count()) return false;
    {
        const QSignalBlocker b(scale_);
        scale_->setCurrentIndex(scale);
    }
    if (axes_->currentIndex() == 1)
        refresh();
    else
        axes_->setCurrentIndex(1);
    return true;
}

void AttentionGrid::setRun(const std::optional<Request>& request) {
    const QString before = currentKey();
    request_ = request;
    rebuildMethods();
    if (currentKey() != before) requested_.clear();  // jobs of another run were replaced
    refresh();
    requestIfNeeded(false);
}

void AttentionGrid::rebuildMethods() {
    const QSignalBlocker b(method_);
    const int keep = method_->currentIndex();
    method_->clear();
    if (!request_) {
        method_->addItem(tr("no run"));
        method_->setEnabled(false);
        return;
    }
    method_->setEnabled(true);
    const nlohmann::json& accel = request_->accel;
    const auto ids = enabled_methods(accel);
    auto summary = [](const nlohmann::json& j) {
        return QString::fromStdString(Engine::accel_summary(j, Family::Var));
    };
    if (ids.empty()) {
        method_->addItem(tr("dense attention (no method on)"), QString("{}"));
    } else {
        method_->addItem(ids.size() > 1 ? tr("%1 (together)").arg(summary(accel)) : summary(accel),
                         QString::fromStdString(accel.dump()));
        if (ids.size() > 1)
            for (const auto& id : ids) {
                const nlohmann::json one = {{id, accel[id]}};
                method_->addItem(summary(one), QString::fromStdString(one.dump()));
            }
    }
    method_->setCurrentIndex(keep >= 0 && keep < method_->count() ? keep : 0);
}

void AttentionGrid::rebuildScales() {
    const AnalysisOutput* a = current();
    QStringList items;
    for (int s = 0; a && s < int(a->sides.size()); ++s)
        items << tr("scale %1").arg(scale_text(*a, s));
    QStringList shown;
    for (int i = 0; i < scale_->count(); ++i) shown << scale_->itemText(i);
    if (items == shown) return;  // another model's schedule gets its own names
    const QSignalBlocker b(scale_);
    const int keep = scale_->currentIndex(), n = int(items.size());
    scale_->clear();
    scale_->addItems(items);
    scale_->setCurrentIndex(keep >= 0 && keep < n ? keep : n - 1);
}

void AttentionGrid::setAnalysis(const AnalysisResultPtr& result) {
    if (!result) return;
    requested_.erase(result->key);
    failed_.erase(result->key);
    for (auto it = cache_.begin(); it != cache_.end(); ++it)
        if ((*it)->key == result->key) {
            cache_.erase(it);
            break;
        }
    cache_.push_front(result);
    if (cache_.size() > kCacheSize) cache_.pop_back();
    refresh();
}

void AttentionGrid::setAnalysisFailed(const QString& key, const QString& message) {
    requested_.erase(key.toStdString());
    failed_[key.toStdString()] = message;
    refresh();
}

void AttentionGrid::showEvent(QShowEvent* e) {
    QWidget::showEvent(e);
    requestIfNeeded(false);
}

void AttentionGrid::requestIfNeeded(bool explicit_request) {
    if (!request_ || current()) return;
    const std::string key = keyOf(*request_, currentMethod());
    if (!explicit_request && (!isVisible() || requested_.count(key) || failed_.count(key))) return;
    failed_.erase(key);
    requested_.insert(key);
    refresh();
    emit analysisRequested(QString::fromStdString(key),
                           QString::fromStdString(currentMethod().dump()));
}

QString AttentionGrid::cellText(int row, int col) const {
    const AnalysisOutput* a = current();
    if (!a || row < 0 || col < 0 || row >= grid_.rows || col >= grid_.cols) return {};
    int64_t s = 0, l = 0, h = 0;
    grid_.locate(row, col, s, l, h);
    const double v = grid_.at(row, col);
    const GridMeasure m = measure();
    QString where = tr("scale %1 · layer %2").arg(scale_text(*a, int(s))).arg(l);
    if (h >= 0)
        where += tr(" · head %1").arg(h);
    else
        where += tr(" · mean of %1 heads").arg(grid_.heads[size_t(row * grid_.cols + col)]);
    if (!std::isfinite(v)) return where + tr(": not measured");
    QString value = QString::number(v, 'g', 8);
    if (m == GridMeasure::HeadType)
        value += h >= 0 ? (v >= 0.5 ? tr(" (contextual)") : tr(" (structural)"))
                        : tr(" (share of contextual heads)");
    QString extra;
    if (const auto* r = a->find(s, l, std::max<int64_t>(h, a->heads.empty() ? 0 : a->heads[0])))
        extra = tr(" · %1 queries, %2 keys").arg(r->queries).arg(r->keys);
    return tr("%1: %2 = %3%4").arg(where, measure_text(m), value, extra);
}

void AttentionGrid::refresh() {
    rebuildScales();
    const AnalysisOutput* a = current();
    scale_->setEnabled(axes_->currentIndex() == 1);
    export_->setEnabled(a != nullptr);
    analyze_->setEnabled(request_.has_value() && !a);
    if (!a) {
        grid_ = {};
        view_->clear();
        const std::string key = request_ ? keyOf(*request_, currentMethod()) : std::string();
        if (!request_)
            view_->setEmptyText(
                tr("Generate with a VAR or text-to-image model, then open this "
                   "tab: the grid measures every scale, layer and head."));
        else if (requested_.count(key))
            view_->setEmptyText(tr("Analysing: the method's run and the dense run measured…"));
        else if (const auto it = failed_.find(key); it != failed_.end())
            view_->setEmptyText(tr("The analysis failed: %1").arg(it->second));
        else
            view_->setEmptyText(tr("Press Analyse to measure this run."));
        status_->clear();
        return;
    }
    const GridMeasure m = measure();
    const int64_t scales = int64_t(a->sides.size());
    if (axes_->currentIndex() == 0)
        grid_ = analysis::scale_layer_grid(a->records, m, scales, a->layers, a->typing);
    else
        grid_ = analysis::layer_head_grid(a->records, m, scale_->currentIndex(), a->layers,
                                          a->heads_total, a->typing);
    std::vector<float> values(grid_.values.begin(), grid_.values.end());
    view_->setGrid(viz::FloatGrid(int(grid_.rows), int(grid_.cols), std::move(values)));
    view_->setColormap(static_cast<viz::Colormap>(cmap_->currentIndex()));
    view_->setLegendLabel(measure_text(m));
    view_->setTitle(axes_->currentIndex() == 0
                        ? tr("%1 · %2 · scale (rows) × layer (columns), mean over heads")
                              .arg(measure_text(m), QString::fromStdString(a->method))
                        : tr("%1 · %2 · scale %3 · layer (rows) × head (columns)")
                              .arg(measure_text(m), QString::fromStdString(a->method))
                              .arg(scale_text(*a, scale_->currentIndex())));
    view_->setCellLabeler([this](int row, int col) { return cellText(row, col); });
    QStringList rows, cols;
    for (int64_t r = 0; r < grid_.rows; ++r)
        rows << (axes_->currentIndex() == 0 ? tr("%1: %2×%2").arg(r).arg(a->sides[size_t(r)])
                                            : tr("L%1").arg(r));
    for (int64_t c = 0; c < grid_.cols; ++c)
        cols << (axes_->currentIndex() == 0 ? tr("L%1").arg(c) : tr("h%1").arg(c));
    view_->setAxisLabels(rows, cols);
    status_->setText(tr("%1 records (%2 of %3 heads measured) · analysed in %4 s · click a cell "
                        "for its attention map")
                         .arg(a->records.size())
                         .arg(a->heads.size())
                         .arg(a->heads_total)
                         .arg(a->millis / 1000.0, 0, 'f', 1));
}

viz::GridFigure AttentionGrid::figure() const {
    viz::GridFigure f;
    const AnalysisOutput* a = current();
    if (!a) return f;
    f.grid = view_->grid();
    f.cmap = static_cast<viz::Colormap>(cmap_->currentIndex());
    f.legend = measure_text(measure());
    const bool by_scale = grid_.axes == MeasureGrid::Axes::ScaleLayer;
    f.title = by_scale ? tr("%1 · %2 (mean over %3 heads)")
                             .arg(measure_text(measure()), QString::fromStdString(a->method))
                             .arg(a->heads.size())
                       : tr("%1 · %2 · scale %3")
                             .arg(measure_text(measure()), QString::fromStdString(a->method))
                             .arg(scale_text(*a, int(grid_.scale)));
    f.row_axis = by_scale ? tr("scale (side)") : tr("layer");
    f.col_axis = by_scale ? tr("layer") : tr("head");
    if (by_scale)
        for (int s = 0; s < grid_.rows; ++s) f.row_labels << scale_text(*a, s);
    return f;
}

bool AttentionGrid::exportTo(const QString& path, ExportKind kind, QString* error) const {
    const AnalysisOutput* a = current();
    if (!a) {
        if (error) *error = tr("nothing to export: analyse the run first");
        return false;
    }
    switch (kind) {
        case ExportKind::Figure:
            return viz::write_grid_figure(figure(), path, error);
        case ExportKind::GridCsv:
            return viz::write_text_file(
                path, QByteArray::fromStdString(analysis::grid_csv(grid_, measure())), error);
        case ExportKind::MeasuresJson:
            return viz::write_text_file(path, QByteArray::fromStdString(a->json + "\n"), error);
        case ExportKind::MeasuresCsv:
            return viz::write_text_file(path, QByteArray::fromStdString(a->csv), error);
    }
    return false;
}

void AttentionGrid::exportDialog(ExportKind kind) {
    const QString filter = kind == ExportKind::Figure         ? tr("Figure (*.png *.svg)")
                           : kind == ExportKind::MeasuresJson ? tr("JSON (*.json)")
                                                              : tr("CSV (*.csv)");
    const QString name = kind == ExportKind::Figure         ? "grid.png"
                         : kind == ExportKind::GridCsv      ? "grid.csv"
                         : kind == ExportKind::MeasuresJson ? "measures.json"
                                                            : "measures.csv";
    const QString path = QFileDialog::getSaveFileName(this, tr("Export the grid"), name, filter);
    if (path.isEmpty()) return;
    QString error;
    if (!exportTo(path, kind, &error)) QMessageBox::warning(this, tr("Export failed"), error);
}

}  // namespace varscope::gui
