#include "ui/inspector.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QSpinBox>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "core/accel/probe_kinds.h"
#include "core/analysis/measure_grid.h"
#include "ui/attention_grid.h"
#include "visualization/heatmap_view.h"

namespace varscope::gui {
namespace {

QComboBox* colormap_combo(QWidget* parent, viz::Colormap initial) {
    auto* c = new QComboBox(parent);
    c->addItems(viz::colormap_names());
    c->setCurrentIndex(static_cast<int>(initial));
    c->setToolTip(QObject::tr("Colormap"));
    return c;
}

std::vector<int64_t> patch_nums_of(const SideResultPtr& r) {
    std::vector<int64_t> pn;
    if (r)
        for (const auto& s : r->run.scales) pn.push_back(s.patch_num);
    return pn;
}

bool is_binary(const std::vector<float>& v) {
    return !v.empty() &&
           std::all_of(v.begin(), v.end(), [](float x) { return x == 0.f || x == 1.f; });
}

}  // namespace

int64_t ScaleLayout::begin(size_t scale) const {
    int64_t b = 0;
    for (size_t i = 0; i < scale && i < patch_nums.size(); ++i) b += tokens(i);
    return b;
}

std::tuple<int64_t, int64_t, int64_t> ScaleLayout::locate(int64_t token) const {
    for (size_t s = 0; s < patch_nums.size(); ++s) {
        if (token < tokens(s)) return {int64_t(s), token / patch_nums[s], token % patch_nums[s]};
        token -= tokens(s);
    }
    return {-1, 0, 0};
}

// --- attention -------------------------------------------------------------------------------

AttentionInspector::AttentionInspector(QWidget* parent) : QWidget(parent) {
    auto* v = new QVBoxLayout(this);
    auto* bar = new QHBoxLayout;
    side_ = new QComboBox(this);
    side_->addItems({tr("Baseline"), tr("Accelerated")});
    side_->setToolTip(
        tr("Which run's attention to show (accelerators that replace attention "
           "report their own maps in their tabs)"));
    scale_ = new QComboBox(this);
    scale_->setObjectName("attentionScale");
    scale_->setSizeAdjustPolicy(QComboBox::AdjustToContents);
    scale_->setToolTip(tr("Query scale"));
    layer_ = new QSpinBox(this);
    layer_->setObjectName("attentionLayer");
    layer_->setPrefix(tr("layer "));
    layer_->setToolTip(tr("Transformer block; another layer re-runs with eager attention there"));
    head_ = new QComboBox(this);
    head_->setObjectName("attentionHead");
    head_->setToolTip(tr("Attention head (or the mean over heads)"));
    head_->setSizeAdjustPolicy(QComboBox::AdjustToContents);
    cmap_ = colormap_combo(this, viz::Colormap::Inferno);
    log_ = new QCheckBox(tr("log"), this);
    log_->setChecked(true);
    log_->setToolTip(tr("log10 of the probabilities (small weights become visible)"));
    // Three rows: in one the bar was wider than the dock's default width, and the layout cut the
    // scale box's text ("9: 16×16" read "9: 16×1"); in two the dock needed 410 px, more than a
    // 1280-px window leaves it beside the images. The first two rows pick the map, the third
    // how it is drawn.
    auto* look = new QHBoxLayout;
    auto* where = new QHBoxLayout;
    bar->addWidget(side_);
    bar->addWidget(new QLabel(tr("Scale"), this));
    bar->addWidget(scale_);
    bar->addStretch(1);
    where->addWidget(layer_);
    where->addWidget(head_);
    where->addStretch(1);
    look->addWidget(cmap_);
    look->addWidget(log_);
    mask_ = new QCheckBox(tr("Kept by the method"), this);
    mask_->setObjectName("attentionMask");
    mask_->setToolTip(
        tr("Dim every entry the accelerated run's methods drop at this scale and layer (FastVAR's "
           "pruned tokens, AMS-KV's evicted cache, SparVAR's CSLA blocks and CS4A keys, LazyVAR's "
           "pruned queries, skipped scales), with the recall of the kept entries in the corner: "
           "the dense map as the sparse attention sees it"));
    look->addWidget(mask_);
    look->addStretch(1);
    v->addLayout(bar);
    v->addLayout(where);
    v->addLayout(look);
    view_ = new viz::HeatmapView(this);
    view_->setObjectName("attentionView");
    view_->setKeepAspect(false);
    view_->setEmptyText(
        tr("Attention maps are recorded for one layer at every scale.\n"
           "Press Generate to see them."));
    v->addWidget(view_, 1);

    connect(side_, qOverload<int>(&QComboBox::currentIndexChanged), this,
            &AttentionInspector::refresh);
    connect(scale_, qOverload<int>(&QComboBox::currentIndexChanged), this,
            &AttentionInspector::refresh);
    connect(head_, qOverload<int>(&QComboBox::currentIndexChanged), this,
            &AttentionInspector::refresh);
    connect(log_, &QCheckBox::toggled, this, &AttentionInspector::refresh);
    connect(mask_, &QCheckBox::toggled, this, &AttentionInspector::refresh);
    connect(cmap_, qOverload<int>(&QComboBox::currentIndexChanged), this,
            [this](int i) { view_->setColormap(static_cast<viz::Colormap>(i)); });
    view_->setColormap(viz::Colormap::Inferno);
    connect(layer_, qOverload<int>(&QSpinBox::valueChanged), this, [this](int l) {
        refresh();
        emit layerRequested(l);
    });
}

void AttentionInspector::setDepth(int depth, int heads) {
    const QSignalBlocker b(layer_);
    layer_->setRange(0, std::max(0, depth - 1));
    if (layer_->value() >= depth) layer_->setValue(depth - 1);
    const QSignalBlocker h(head_);
    head_->clear();
    head_->addItem(tr("mean"));
    for (int i = 0; i < heads; ++i) head_->addItem(tr("head %1").arg(i));
}

int AttentionInspector::layer() const {
    return layer_->value();
}

void AttentionInspector::setScale(int scale) {
    if (scale >= 0 && scale < scale_->count()) scale_->setCurrentIndex(scale);
}

void AttentionInspector::setResults(const SideResultPtr& base, const SideResultPtr& accel) {
    base_ = state_.base = base;
    accel_ = state_.accel = accel;
    const auto pn = patch_nums_of(base ? base : accel);
    const int keep = scale_->currentIndex();
    {
        const QSignalBlocker b(scale_);
        scale_->clear();
        for (size_t s = 0; s < pn.size(); ++s) scale_->addItem(tr("%1: %2×%2").arg(s).arg(pn[s]));
        scale_->setCurrentIndex(keep >= 0 && keep < scale_->count() ? keep : scale_->count() - 1);
    }
    refresh();
}

QString AttentionInspector::overlay_mask(const AttentionOutput& rec, int head) {
    // The kept set comes from the accelerated run; it applies to whichever dense map is shown
    // (the baseline's, usually: sparse methods replace the accelerated side's attention).
    const MaskOutput* m = nullptr;
    if (accel_)
        for (const auto& x : accel_->run.masks)
            if (x.scale == rec.scale && x.layer == rec.layer) m = &x;
    if (!m) return tr(" · no method mask at this scale/layer");
    const int64_t heads = rec.probs.dim(0), q = rec.probs.dim(1), k = rec.probs.dim(2);
    if (m->queries != q || m->keys != k || (m->heads != 1 && m->heads != heads))
        return tr(" · the mask (%1×%2) does not fit this map: show the baseline")
            .arg(m->queries)
            .arg(m->keys);
    // Per head: its mask and the recall on its probabilities (core's map_recall); the mean view
    // keeps an entry that some head keeps and averages the heads' recalls.
    const size_t n = size_t(q * k);
    std::vector<uint8_t> shown(n, 0);
    double recall = 0;
    int counted = 0;
    for (int64_t h = 0; h < heads; ++h) {
        if (head >= 0 && h != head) continue;
        const size_t mh = m->heads == 1 ? 0 : size_t(h);
        const std::vector<uint8_t> kept(m->kept.begin() + long(mh * n),
                                        m->kept.begin() + long((mh + 1) * n));
        const std::vector<float> probs(rec.probs.values.begin() + long(size_t(h) * n),
                                       rec.probs.values.begin() + long(size_t(h + 1) * n));
        recall += analysis::map_recall(probs, kept, q, k);
        ++counted;
        for (size_t i = 0; i < n; ++i) shown[i] = shown[i] || kept[i];
    }
    overlay_recall_ = counted > 0 ? recall / counted : 0.0;
    size_t n_kept = 0;
    for (auto x : shown) n_kept += x;
    view_->setKeptMask(std::move(shown));
    view_->setCornerText(tr("recall %1").arg(overlay_recall_, 0, 'f', 3));
    return tr(" · the method keeps %1 % of the entries")
        .arg(100.0 * double(n_kept) / double(std::max<size_t>(n, 1)), 0, 'f', 1);
}

void AttentionInspector::showMap(int scale, int layer, int head) {
    {
        const QSignalBlocker a(side_), b(scale_), c(head_);
        side_->setCurrentIndex(0);  // the dense map
        if (scale >= 0 && scale < scale_->count()) scale_->setCurrentIndex(scale);
        if (head + 1 >= 0 && head + 1 < head_->count()) head_->setCurrentIndex(head + 1);
    }
    if (layer != layer_->value())
        layer_->setValue(layer);  // refreshes and asks for that layer's maps
    else
        refresh();
}

void AttentionInspector::setMaskShown(bool on) {
    mask_->setChecked(on);
}

int AttentionInspector::scale() const {
    return scale_->currentIndex();
}

int AttentionInspector::head() const {
    return head_->currentIndex() - 1;
}

void AttentionInspector::setRecording(bool on) {
    state_.recording = on;
    refresh();
}

void AttentionInspector::setRunState(const InspectorRunState& st) {
    state_ = st;
    base_ = st.base;
    accel_ = st.accel;
    refresh();
}

void AttentionInspector::refresh() {
    overlay_recall_ = std::numeric_limits<double>::quiet_NaN();
    const SideResultPtr r = side_->currentIndex() == 0 ? base_ : accel_;
    const int scale = scale_->currentIndex(), layer = layer_->value();
    const AttentionOutput* rec = nullptr;
    if (r && state_.recording)
        for (const auto& a : r->run.attention)
            if (a.scale == scale && a.layer == layer) rec = &a;
    if (!rec || rec->probs.shape.size() != 3) {
        view_->clear();
        view_->setEmptyText(emptyTabReason(
            "attention", state_, side_->currentIndex() == 0 ? Side::Baseline : Side::Accelerated,
            scale, layer));
        return;
    }
    const int64_t heads = rec->probs.dim(0), q = rec->probs.dim(1), k = rec->probs.dim(2);
    const int head = head_->currentIndex() - 1;  // -1 = mean
    viz::FloatGrid g = viz::FloatGrid::filled(int(q), int(k), 0.f);
    const auto& vals = rec->probs.values;
    for (int64_t h = 0; h < heads; ++h) {
        if (head >= 0 && h != head) continue;
        for (int64_t i = 0; i < q * k; ++i) g.values[size_t(i)] += vals[size_t(h * q * k + i)];
    }
    if (head < 0)
        for (auto& x : g.values) x /= float(heads);
    if (log_->isChecked())
        for (auto& x : g.values) x = std::log10(std::max(x, 1e-6f));

    ScaleLayout layout{patch_nums_of(r)};
    std::vector<int> cols;
    for (size_t s = 1; s < layout.patch_nums.size(); ++s) {
        const int64_t b = layout.begin(s);
        if (b < k) cols.push_back(int(b));
    }
    view_->setGrid(g);
    const QString mask_note = mask_->isChecked() ? overlay_mask(*rec, head) : QString();
    view_->setPartitions({}, cols);
    view_->setLegendLabel(log_->isChecked() ? tr("log10 p") : tr("p"));
    view_->setTitle(
        tr("Scale %1 (%2×%2 queries) attending to %3 keys · layer %4 · %5")
            .arg(scale)
            .arg(layout.patch_nums[size_t(scale)])
            .arg(k)
            .arg(layer)
            .arg(head < 0 ? tr("mean of %1 heads").arg(heads) : tr("head %1").arg(head)) +
        mask_note);
    const int64_t qpn = layout.patch_nums[size_t(scale)];
    view_->setCellLabeler([layout, qpn](int row, int col) {
        auto [ks, ky, kx] = layout.locate(col);
        return QObject::tr("query (%1,%2) → key scale %3 (%4,%5)")
            .arg(row / qpn)
            .arg(row % qpn)
            .arg(ks)
            .arg(ky)
            .arg(kx);
    });
}

// --- accelerator records ---------------------------------------------------------------------

namespace {
// What the rows and columns of a known 2-D record are (core/accel/probe_kinds.h); empty names
// for other kinds, which keep the generic "[row, col]".
struct Axes {
    const char* rows = nullptr;
    const char* cols = nullptr;
};
Axes axes_of(const std::string& kind) {
    if (kind == probe_kinds::kKvOccupancy) return {"layer", "source scale"};
    if (kind == probe_kinds::kCslaTokenMask) return {"query token", "key token"};
    if (kind == probe_kinds::kCslaBlockMask) return {"query block", "key block"};
    return {};
}
}  // namespace

AccelInspector::AccelInspector(const QString& method, const QString& hint, QWidget* parent)
    : QWidget(parent), method_(method), hint_(hint) {
    auto* v = new QVBoxLayout(this);
    auto* bar = new QHBoxLayout;
    kind_ = new QComboBox(this);
    kind_->setObjectName("kind");
    kind_->setToolTip(tr("Record kind reported by the accelerator"));
    kind_->setSizeAdjustPolicy(QComboBox::AdjustToContents);
    scale_ = new QComboBox(this);
    scale_->setObjectName("scale");
    scale_->setToolTip(tr("Scale; \"stacked\" puts one record per scale side by side"));
    scale_->setSizeAdjustPolicy(QComboBox::AdjustToContents);
    layer_ = new QComboBox(this);
    layer_->setToolTip(tr("Layer"));
    index_ = new QSpinBox(this);
    index_->setPrefix(tr("slice "));
    index_->setToolTip(tr("Index over the leading dimensions of a >2-D record (e.g. heads)"));
    mode_ = new QComboBox(this);
    mode_->addItems({tr("Heatmap"), tr("Overlay on image")});
    mode_->setToolTip(
        tr("Token records (one value per token of the scale) can be laid over the image"));
    mode_->setCurrentIndex(1);
    cmap_ = colormap_combo(this, viz::Colormap::Viridis);
    // Two rows, as the attention bar: in one, a 480-px dock cut the record kind to
    // "cs4a_sele". The first row picks the record, the second its slice and how it is drawn
    // (the slice there keeps the dock narrow enough for a 1280-px window).
    auto* look = new QHBoxLayout;
    for (QWidget* w : std::initializer_list<QWidget*>{kind_, scale_, layer_}) bar->addWidget(w);
    bar->addStretch(1);
    look->addWidget(index_);
    look->addWidget(mode_);
    look->addWidget(cmap_);
    look->addStretch(1);
    v->addLayout(bar);
    v->addLayout(look);
    values_ = new QLabel(this);
    values_->setWordWrap(true);
    values_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    v->addWidget(values_);
    view_ = new viz::HeatmapView(this);
    view_->setObjectName("recordView");
    view_->setEmptyText(hint_);
    v->addWidget(view_, 1);

    connect(kind_, qOverload<int>(&QComboBox::currentIndexChanged), this, [this] {
        if (!updating_) rebuildScales();
    });
    for (auto* c : {scale_, layer_, mode_})
        connect(c, qOverload<int>(&QComboBox::currentIndexChanged), this, [this] {
            if (!updating_) refresh();
        });
    connect(index_, qOverload<int>(&QSpinBox::valueChanged), this, [this] {
        if (!updating_) refresh();
    });
    connect(cmap_, qOverload<int>(&QComboBox::currentIndexChanged), this,
            [this](int i) { view_->setColormap(static_cast<viz::Colormap>(i)); });
    rebuildKinds();
}

QString AccelInspector::currentKind() const {
    return kind_->currentData().toString();
}

QStringList AccelInspector::kinds() const {
    QStringList k;
    for (int i = 0; i < kind_->count(); ++i) k << kind_->itemData(i).toString();
    return k;
}

bool AccelInspector::selectKind(const QString& kind) {
    const int i = kind_->findData(kind);
    if (i < 0) return false;
    kind_->setCurrentIndex(i);
    return true;
}

void AccelInspector::setScale(int scale) {
    const int i = scale_->findData(QVariant::fromValue(ScaleChoice::of(scale)));
    if (i >= 0)
        scale_->setCurrentIndex(i);
    else if (!records_.empty() && scaleChoice().view == ScaleChoice::View::Scale)
        // The frame clicked has no record of this tab: the view keeps its scale and the readout
        // says why that one has none.
        values_->setText(emptyTabReason(method_, state_, Side::Accelerated, scale));
}

void AccelInspector::setResults(const SideResultPtr& base, const SideResultPtr& accel) {
    base_ = state_.base = base;
    accel_ = state_.accel = accel;
    records_.clear();
    // Acceleration records exist only on the accelerated side; records every run makes (MAR's
    // decode order) come from the baseline when there is no distinct accelerated run.
    source_ = accel_ && !accel_->same_as_baseline ? accel_ : base_;
    if (source_)
        for (const auto& a : source_->run.accel)
            if (method_.isEmpty() || QString::fromStdString(a.method) == method_)
                records_.push_back(&a);
    rebuildKinds();
}

void AccelInspector::setStepRecords(bool steps) {
    unit_ = steps ? tr("step") : tr("scale");
    units_ = steps ? tr("steps") : tr("scales");
    rebuildScales();
}

void AccelInspector::rebuildKinds() {
    const QString keep = kind_->currentData().toString();
    updating_ = true;
    kind_->clear();
    std::vector<std::string> seen;
    for (const auto* r : records_) {
        const std::string key = r->method + "/" + r->kind;
        if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
        seen.push_back(key);
        kind_->addItem(QString::fromStdString(method_.isEmpty() ? key : r->kind),
                       QString::fromStdString(key));
    }
    int i = kind_->findData(keep);
    if (i < 0) i = kind_->findData(preferred_);
    kind_->setCurrentIndex(i >= 0 ? i : 0);
    updating_ = false;
    for (QWidget* w : std::initializer_list<QWidget*>{kind_, scale_, layer_, index_, mode_, cmap_})
        w->setEnabled(!records_.empty());
    rebuildScales();
}

ScaleChoice AccelInspector::scaleChoice() const {
    return scale_->currentData().value<ScaleChoice>();
}

std::vector<const AccelOutput*> AccelInspector::matching() const {
    std::vector<const AccelOutput*> out;
    const QString key = kind_->currentData().toString();
    for (const auto* r : records_)
        if (QString::fromStdString(r->method + "/" + r->kind) == key) out.push_back(r);
    return out;
}

void AccelInspector::rebuildScales() {
    const auto recs = matching();
    const QVariant keep_scale = scale_->currentData(), keep_layer = layer_->currentData();
    updating_ = true;
    std::set<int64_t> scales, layers;
    for (const auto* r : recs) {
        scales.insert(r->scale);
        layers.insert(r->layer);
    }
    // Records without tensors but with scalar values (e.g. bytes per layer and scale) are
    // shown together as a layer x scale table.
    const bool table =
        !recs.empty() && std::all_of(recs.begin(), recs.end(), [](const AccelOutput* r) {
            return r->data.empty() && !r->values.empty();
        });
    scale_->clear();
    layer_->clear();
    if (table) {
        for (const auto& [key, _] : recs.front()->values)
            layer_->addItem(QString::fromStdString(key), QString::fromStdString(key));
        scale_->addItem(tr("all %1").arg(units_),
                        QVariant::fromValue(ScaleChoice{ScaleChoice::View::Table}));
    } else {
        // 1-D records of equal length, one per scale (e.g. bytes per layer): stackable into a
        // (entries x scales) map.
        const bool stackable =
            scales.size() > 1 && std::all_of(recs.begin(), recs.end(), [&](const AccelOutput* r) {
                return r->data.shape.size() == 1 && r->layer < 0 &&
                       r->data.shape == recs.front()->data.shape;
            });
        if (stackable)
            scale_->addItem(tr("stacked"),
                            QVariant::fromValue(ScaleChoice{ScaleChoice::View::Stacked}));
        for (int64_t s : scales)
            scale_->addItem(s < 0 ? tr("all %1").arg(units_) : tr("%1 %2").arg(unit_).arg(s),
                            QVariant::fromValue(ScaleChoice::of(s)));
        for (int64_t l : layers)
            layer_->addItem(l < 0 ? tr("all layers") : tr("layer %1").arg(l), qlonglong(l));
    }
    // Default: the stacked overview where there is one, else the last scale.
    int si = scale_->findData(keep_scale);
    if (si < 0) si = scale_->findData(QVariant::fromValue(ScaleChoice{ScaleChoice::View::Stacked}));
    scale_->setCurrentIndex(si >= 0 ? si : std::max(0, scale_->count() - 1));
    int li = layer_->findData(keep_layer);
    layer_->setCurrentIndex(li >= 0 ? li : 0);
    updating_ = false;
    refresh();
}

void AccelInspector::setRecording(bool on) {
    state_.recording = on;
    refresh();
}

void AccelInspector::setRunState(const InspectorRunState& st) {
    const SideResultPtr base = st.base, accel = st.accel;
    state_ = st;
    setResults(base, accel);  // rebuilds the records, then refreshes
}

QString AccelInspector::valuesText() const {
    return values_->text();
}

void AccelInspector::refresh() {
    const auto recs = matching();
    view_->setBackground({});
    view_->setPartitions({}, {});
    // The MAR decoding tab's order comes from the sampler, not from records: it stays.
    if (recs.empty()) {
        view_->clear();
        // Why it is empty first (what happened), then what the tab would show.
        view_->setEmptyText(emptyTabReason(method_, state_) + "\n\n" + hint_);
        values_->clear();
        return;
    }
    const std::vector<int64_t> pn = patch_nums_of(accel_);
    // Layer x scale table of one scalar value.
    const ScaleChoice choice = scaleChoice();
    if (choice.view == ScaleChoice::View::Table) {
        const std::string key = layer_->currentData().toString().toStdString();
        std::set<int64_t> ls, ss;
        for (const auto* r : recs) {
            ls.insert(r->layer);
            ss.insert(r->scale);
        }
        const std::vector<int64_t> lv(ls.begin(), ls.end()), sv(ss.begin(), ss.end());
        viz::FloatGrid g = viz::FloatGrid::filled(int(lv.size()), int(sv.size()), NAN);
        for (const auto* r : recs) {
            const auto it = r->values.find(key);
            if (it == r->values.end()) continue;
            const int row = int(std::find(lv.begin(), lv.end(), r->layer) - lv.begin());
            const int col = int(std::find(sv.begin(), sv.end(), r->scale) - sv.begin());
            g.at(row, col) = float(it->second);
        }
        view_->setKeepAspect(false);
        view_->setGrid(g);
        view_->setTitle(tr("%1: %2 per layer (rows) × %3 (columns)")
                            .arg(kind_->currentText(), QString::fromStdString(key), unit_));
        view_->setCellLabeler([lv, sv, unit = unit_](int row, int col) {
            return QObject::tr("layer %1, %2 %3")
                .arg(lv[size_t(row)])
                .arg(unit)
                .arg(sv[size_t(col)]);
        });
        values_->setText(tr("%1 records").arg(recs.size()));
        index_->setVisible(false);
        return;
    }
    if (choice.view == ScaleChoice::View::Stacked) {
        std::vector<const AccelOutput*> by_scale(recs.begin(), recs.end());
        std::sort(by_scale.begin(), by_scale.end(),
                  [](const AccelOutput* a, const AccelOutput* b) { return a->scale < b->scale; });
        const int rows = int(by_scale.front()->data.values.size());
        viz::FloatGrid g = viz::FloatGrid::filled(rows, int(by_scale.size()), NAN);
        std::vector<int64_t> sv;
        for (size_t c = 0; c < by_scale.size(); ++c) {
            sv.push_back(by_scale[c]->scale);
            for (int r = 0; r < rows; ++r) g.at(r, int(c)) = by_scale[c]->data.values[size_t(r)];
        }
        view_->setKeepAspect(false);
        view_->setGrid(g);
        view_->setColormap(static_cast<viz::Colormap>(cmap_->currentIndex()));
        view_->setTitle(
            tr("%1 per entry (rows, e.g. layers) × %2 (columns)").arg(kind_->currentText(), unit_));
        view_->setCellLabeler([sv, unit = unit_](int row, int col) {
            return QObject::tr("entry %1, %2 %3").arg(row).arg(unit).arg(sv[size_t(col)]);
        });
        values_->setText(tr("%1 records stacked").arg(by_scale.size()));
        index_->setVisible(false);
        mode_->setEnabled(false);
        return;
    }
    const int64_t scale = choice.scale;
    const qlonglong layer = layer_->currentData().toLongLong();
    const AccelOutput* rec = nullptr;
    for (const auto* r : recs)
        if (r->scale == scale && r->layer == layer) rec = r;
    if (!rec)
        for (const auto* r : recs)
            if (r->scale == scale) rec = r;
    if (!rec) rec = recs.back();

    QStringList facts;
    for (const auto& [k, v] : rec->values)
        facts << QStringLiteral("%1 = %2").arg(QString::fromStdString(k), viz::format_value(v));
    // Shape -> grid: (n) as one row, or as the scale's pn x pn token map; (r, c) as is; more
    // dimensions: the leading ones are flattened into the slice index.
    const auto& shape = rec->data.shape;
    const int64_t spn =
        rec->scale >= 0 && size_t(rec->scale) < pn.size() ? pn[size_t(rec->scale)] : 0;
    int64_t rows = 1, cols = int64_t(rec->data.values.size()), slices = 1;
    if (shape.size() == 1 && spn > 0 && shape[0] == spn * spn) {
        rows = cols = spn;
    } else if (shape.size() >= 2) {
        rows = shape[shape.size() - 2];
        cols = shape.back();
        slices = rows * cols > 0 ? int64_t(rec->data.values.size()) / (rows * cols) : 1;
    }
    index_->setVisible(slices > 1);
    {
        const QSignalBlocker b(index_);
        index_->setRange(0, int(std::max<int64_t>(0, slices - 1)));
    }
    if (rec->data.empty()) {
        view_->clear();
        view_->setEmptyText(tr("This record has no tensor."));
        values_->setText(facts.join(" · "));
        return;
    }
    const int64_t slice = std::min<int64_t>(index_->value(), slices - 1);
    // Cross-attention maps: a slice is a prompt token; its text beside the slice number.
    const auto& words = source_ ? source_->run.text_tokens : std::vector<std::string>{};
    index_->setSuffix(rec->kind == "cross_attention" && size_t(slice) < words.size()
                          ? QStringLiteral(" · ") + QString::fromStdString(words[size_t(slice)])
                          : QString());
    viz::FloatGrid g(int(rows), int(cols),
                     std::vector<float>(rec->data.values.begin() + slice * rows * cols,
                                        rec->data.values.begin() + (slice + 1) * rows * cols));
    // Index lists (rows x k key ids, -1 padded, e.g. CS4A's selected keys of each query block)
    // are shown as a mask over the dense (rows x keys) map.
    const bool index_list = rec->kind.find("selected") != std::string::npos ||
                            rec->kind.find("mapped") != std::string::npos;
    if (index_list) {
        int64_t keys = 0;
        if (auto it = rec->values.find("kv_len"); it != rec->values.end())
            keys = int64_t(it->second);
        for (float v : g.values) keys = std::max<int64_t>(keys, int64_t(v) + 1);
        viz::FloatGrid mask =
            viz::FloatGrid::filled(int(rows), int(std::max<int64_t>(keys, 1)), 0.f);
        for (int r = 0; r < g.rows; ++r)
            for (int c = 0; c < g.cols; ++c)
                if (g.at(r, c) >= 0) mask.at(r, int(g.at(r, c))) = 1.f;
        g = mask;
        facts << tr("%1 of %2 keys per row").arg(cols).arg(keys);
    }
    // AMS-KV's occupancy as the share of each source scale's tokens a layer holds: in raw counts
    // the condensed scales (1, 4, 9 … tokens) looked empty beside the last scales' hundreds.
    std::vector<float> held;  // the raw counts, for the readout
    const bool occupancy =
        rec->kind == probe_kinds::kKvOccupancy && size_t(g.cols) <= pn.size() && slices == 1;
    if (occupancy) {
        held = g.values;
        for (int r = 0; r < g.rows; ++r)
            for (int c = 0; c < g.cols; ++c) g.at(r, c) /= float(pn[size_t(c)] * pn[size_t(c)]);
        facts << tr("share of each source scale's tokens held");
    }
    const int64_t final_pn = pn.empty() ? 0 : pn.back();
    const bool token_map = g.rows == g.cols && ((spn > 0 && g.rows == spn) || g.rows == final_pn);
    const bool binary = is_binary(g.values);
    if (binary) facts << tr("zeros %1 %").arg(100.0 * g.zero_fraction(), 0, 'f', 1);
    QString dims;
    for (int64_t d : shape) dims += (dims.isEmpty() ? "" : "×") + QString::number(d);
    facts.prepend(tr("shape %1").arg(dims.isEmpty() ? tr("scalar") : dims));
    values_->setText(facts.join(" · "));
    mode_->setEnabled(token_map);
    view_->setKeepAspect(token_map || rows == cols);
    view_->setGrid(g, binary || occupancy
                          ? std::optional<viz::ValueRange>(viz::ValueRange{0.f, 1.f})
                          : std::nullopt);
    if (binary && cmap_->currentIndex() == static_cast<int>(viz::Colormap::Viridis))
        view_->setColormap(viz::Colormap::Mask);
    else
        view_->setColormap(static_cast<viz::Colormap>(cmap_->currentIndex()));
    if (token_map && mode_->currentIndex() == 1 && source_)
        view_->setBackground(source_->image, 0.55);  // the image the records were made for
    const Axes axes = axes_of(rec->kind);
    view_->setTitle(
        tr("%1 · %2 %3%4%5")
            .arg(kind_->currentText())
            .arg(unit_)
            .arg(rec->scale)
            .arg(rec->layer >= 0 ? tr(" · layer %1").arg(rec->layer) : QString())
            .arg(axes.rows ? tr(" · %1 × %2")
                                 .arg(QString::fromUtf8(axes.rows), QString::fromUtf8(axes.cols))
                           : QString()));
    const int cols_of_grid = g.cols;
    view_->setCellLabeler([token_map, index_list, axes, held, pn, cols_of_grid](int row, int col) {
        const QString counts = held.empty() ? QString()
                                            : QObject::tr(" (%1 of %2 tokens)")
                                                  .arg(held[size_t(row * cols_of_grid + col)])
                                                  .arg(pn[size_t(col)] * pn[size_t(col)]);
        return axes.rows ? QObject::tr("%1 %2, %3 %4%5")
                               .arg(QString::fromUtf8(axes.rows))
                               .arg(row)
                               .arg(QString::fromUtf8(axes.cols))
                               .arg(col)
                               .arg(counts)
               : token_map  ? QObject::tr("token (%1,%2)").arg(row).arg(col)
               : index_list ? QObject::tr("query block %1, key %2").arg(row).arg(col)
                            : QObject::tr("[%1, %2]").arg(row).arg(col);
    });
}

// --- tabs ------------------------------------------------------------------------------------

Inspector::Inspector(QWidget* parent) : QTabWidget(parent) {
    setObjectName("inspector");
    attention_ = new AttentionInspector(this);
    addTab(attention_, tr("Attention"));
    grid_ = new AttentionGrid(this);
    grid_->setObjectName("inspector.grid");
    addTab(grid_, tr("Grid"));
    connect(grid_, &AttentionGrid::analysisRequested, this, &Inspector::analysisRequested);
    connect(grid_, &AttentionGrid::cellActivated, this, [this](int scale, int layer, int head) {
        setCurrentWidget(attention_);
        attention_->showMap(scale, layer, head);
    });
    // What each tab shows; emptyTabReason says above it why it shows nothing.
    const std::vector<std::tuple<QString, QString, QString>> tabs = {
        {"fastvar", tr("FastVAR tokens"),
         tr("This tab shows FastVAR's pivotal-token scores and the pruned tokens per scale.")},
        {"sparvar", tr("SparVAR masks"),
         tr("This tab shows SparVAR's CSLA token/block masks and CS4A selected indices.")},
        {"lazyvar", tr("LazyVAR"),
         tr("This tab shows LazyVAR's update-index heatmaps and group assignments.")},
        {"ams_kv", tr("AMS-KV"), tr("This tab shows AMS-KV's cache occupancy per layer × scale.")},
        {"mar", tr("MAR decoding"),
         tr("This tab shows which tokens each step of a MAR model decoded (the decode order).")},
        {"lazymar", tr("LazyMAR"),
         tr("This tab shows, per step and layer, which tokens LazyMAR computed and which it "
            "reused from the token cache, their similarity to the cache, and the condition "
            "cache's skipped steps.")},
        {"text", tr("Cross-attention"),
         tr("This tab shows, per scale, which image regions each prompt token of a "
            "text-to-image model attends to (the attention tab's layer; the slice box picks the "
            "token).")},
        {"", tr("All records"),
         tr("This tab shows every accelerator record of the accelerated run.")}};
    for (const auto& [id, title, hint] : tabs) {
        auto* tab = new AccelInspector(id, hint, this);
        tab->setObjectName("inspector." + (id.isEmpty() ? QStringLiteral("all") : id));
        // SparVAR's CS4A records come first (its decision scale runs before the sparse scales),
        // but the sink + window mask is what shows why CSLA is fast: open on it (the token mask:
        // with the small models, 128-key blocks cover most of a scale).
        if (id == "sparvar") tab->setPreferredKind("sparvar/csla_token_mask");
        // AMS-KV: which source scales each layer still holds after a scale (the policy itself),
        // rather than the byte totals that come first.
        if (id == "ams_kv") tab->setPreferredKind("ams_kv/kv_occupancy");
        methods_.emplace_back(id, tab);
        addTab(tab, title);
    }
    connect(attention_, &AttentionInspector::layerRequested, this,
            &Inspector::attentionLayerRequested);
}

void Inspector::setResults(const SideResultPtr& base, const SideResultPtr& accel) {
    state_.base = base;
    state_.accel = accel;
    if (accel) state_.accel_missing.clear();
    attention_->setResults(base, accel);
    pushState();
}

void Inspector::setRequest(const Request& r, bool historyPair, bool historyOneRun) {
    state_.history_pair = historyPair;
    state_.history_one_run = historyPair && historyOneRun;
    state_.accel_config = r.accel;
    state_.run_recorded = r.gen.accel_records;
    state_.attention_layer = r.gen.attention_layer;
    state_.has_request = true;
}

void Inspector::setAcceleratedMissing(const QString& why) {
    state_.accel_missing = why;
    pushState();
}

void Inspector::pushState() {
    attention_->setRunState(state_);
    for (auto& [_, tab] : methods_) tab->setRunState(state_);
}

void Inspector::setRun(const std::optional<Request>& request) {
    grid_->setRun(request);
}

void Inspector::setModel(int depth, int heads) {
    attention_->setDepth(depth, heads);
}

void Inspector::setFamily(Family f) {
    state_.family = f;
    // MAR runs record no attention maps here (its attention is bidirectional over the buffer
    // and all tokens; the attention tab's scale partitions are VAR's).
    const bool is_mar = f == Family::Mar;
    setTabVisible(indexOf(attention_), !is_mar);
    setTabVisible(indexOf(grid_), !is_mar);
    for (const auto& [id, tab] : methods_) {
        const bool mar_tab = id == "mar" || id == "lazymar";
        const bool shown = id == "text" ? f == Family::Infinity  // text-to-image only
                                        : id.isEmpty() || mar_tab == is_mar;
        setTabVisible(indexOf(tab), shown);
        tab->setStepRecords(is_mar);
    }
    pushState();
}

void Inspector::setRecording(bool on) {
    state_.recording = on;
    pushState();
}

void Inspector::setScale(int scale) {
    attention_->setScale(scale);
    for (auto& [_, tab] : methods_) tab->setScale(scale);
}

AccelInspector* Inspector::methodTab(const QString& method) const {
    for (const auto& [id, tab] : methods_)
        if (id == method) return tab;
    return nullptr;
}

QImage Inspector::currentPanelImage() const {
    viz::HeatmapView* v = nullptr;
    if (currentWidget() == attention_)
        v = attention_->view();
    else if (currentWidget() == grid_)
        v = grid_->view();
    else
        for (const auto& [_, tab] : methods_)
            if (currentWidget() == tab) v = tab->view();
    if (!v || !v->hasData()) return {};
    return v->render(kFigurePanelSize);
}

QString Inspector::currentPanelTitle() const {
    return tabText(currentIndex());
}

}  // namespace varscope::gui
