#include "ui/method_panel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSlider>
#include <QSpinBox>
#include <QToolButton>
#include <QVBoxLayout>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "ui/engine/engine.h"

namespace varscope::gui {
namespace {

constexpr int kSliderSteps = 1000;

QString json_text(const nlohmann::json& j) {
    if (j.is_array()) {
        QStringList parts;
        for (const auto& v : j) parts << QString::fromStdString(v.dump());
        return parts.join(", ");
    }
    return QString::fromStdString(j.dump());
}

// model_top: the loaded model's upper bound where it is below the spec's.
QString tooltip(const ParamSpec& p, double model_top = NAN) {
    QString t = "<b>" + QString::fromStdString(p.label).toHtmlEscaped() + "</b>";
    if (!p.symbol.empty()) t += " (" + QString::fromStdString(p.symbol).toHtmlEscaped() + ")";
    if (!p.help.empty()) t += "<br>" + QString::fromStdString(p.help).toHtmlEscaped();
    t += "<br>" + QObject::tr("Paper default: %1").arg(json_text(p.default_value).toHtmlEscaped());
    if (p.kind != ParamKind::Bool && model_top < p.max)
        t += "<br>" + QObject::tr("Range on this model: [%1, %2]").arg(p.min).arg(model_top);
    else if (p.kind != ParamKind::Bool)
        t += "<br>" + QObject::tr("Range: [%1, %2]").arg(p.min).arg(p.max);
    if (p.kind == ParamKind::IntList || p.kind == ParamKind::RealList)
        t += "<br>" +
             QObject::tr("%1 to %2 comma-separated values").arg(p.min_items).arg(p.max_items);
    return t;
}

int decimals_for(const ParamSpec& p) {
    const double span = p.max - p.min;
    return span <= 1 ? 4 : span <= 100 ? 3 : 2;
}

}  // namespace

MethodPanel::MethodPanel(QWidget* parent) : QWidget(parent), methods_(Engine::methods(family_)) {
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    auto* top = new QHBoxLayout;
    presets_ = new QComboBox(this);
    presets_->setObjectName("presets");
    presets_->addItem(tr("Preset…"));
    for (const QString& n : presetNames()) presets_->addItem(n);
    presets_->setToolTip(tr("Each method at its paper's defaults, and the papers' combinations"));
    connect(presets_, qOverload<int>(&QComboBox::activated), this, [this](int i) {
        if (i > 0) applyPreset(presets_->itemText(i));
        presets_->setCurrentIndex(0);
    });
    auto* reset = new QPushButton(tr("Baseline"), this);
    reset->setToolTip(tr("Switch every accelerator off"));
    connect(reset, &QPushButton::clicked, this, [this] { applyPreset("baseline"); });
    top->addWidget(presets_, 1);
    top->addWidget(reset);
    layout->addLayout(top);

    message_ = new QLabel(this);
    message_->setObjectName("methodMessage");
    message_->setWordWrap(true);
    message_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    message_->setStyleSheet("QLabel { color: #b00020; }");
    message_->hide();
    layout->addWidget(message_);

    // Both families' sections are built once; switching the model family shows the other set
    // and keeps each set's settings.
    for (Family f : {Family::Var, Family::Mar})
        for (const auto& m : Engine::methods(f)) {
            QWidget* section = buildSection(m);
            section->setVisible(f == family_);
            sections_.push_back({f, m.id, section});
            layout->addWidget(section);
        }
    layout->addStretch(1);
}

QWidget* MethodPanel::buildSection(const MethodSpec& m) {
    auto* box = new QWidget(this);
    box->setObjectName(QString::fromStdString("section." + m.id));
    auto* v = new QVBoxLayout(box);
    v->setContentsMargins(0, 2, 0, 2);
    auto* header = new QHBoxLayout;
    auto* arrow = new QToolButton(box);
    arrow->setArrowType(Qt::RightArrow);
    arrow->setCheckable(true);
    arrow->setAutoRaise(true);
    arrow->setToolTip(tr("Show the hyperparameters"));
    auto* enable = new QCheckBox(QString::fromStdString(m.title), box);
    enable->setObjectName(QString::fromStdString(m.id + ".enabled"));
    QFont f = enable->font();
    f.setBold(true);
    enable->setFont(f);
    const QString help =
        QString::fromStdString(m.summary) +
        (m.paper.empty() ? QString() : "\n" + tr("Paper: %1").arg(QString::fromStdString(m.paper)));
    enable->setToolTip(help);
    header->addWidget(arrow);
    header->addWidget(enable, 1);
    v->addLayout(header);
    enables_.emplace_back(m.id, enable);

    auto* body = new QWidget(box);
    auto* form = new QFormLayout(body);
    form->setContentsMargins(22, 0, 0, 4);
    form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
    if (!m.summary.empty()) {
        auto* s = new QLabel(QString::fromStdString(m.summary), body);
        s->setWordWrap(true);
        s->setStyleSheet("QLabel { color: palette(mid); }");
        form->addRow(s);
    }
    if (m.params.empty()) {
        auto* none = new QLabel(tr("No hyperparameters exposed yet."), body);
        none->setStyleSheet("QLabel { font-style: italic; }");
        form->addRow(none);
    }
    for (const auto& p : m.params) {
        QString label = QString::fromStdString(p.label);
        if (!p.symbol.empty()) label += " (" + QString::fromStdString(p.symbol) + ")";
        auto* l = new QLabel(label, body);
        l->setToolTip(tooltip(p));
        l->setWordWrap(true);
        form->addRow(l, buildEditor(m, p));
    }
    body->setVisible(false);
    v->addWidget(body);
    connect(arrow, &QToolButton::toggled, body, [arrow, body](bool on) {
        arrow->setArrowType(on ? Qt::DownArrow : Qt::RightArrow);
        body->setVisible(on);
    });
    connect(enable, &QCheckBox::toggled, this, [this, arrow](bool on) {
        if (on && !updating_) arrow->setChecked(true);
        changed();
    });
    return box;
}

QWidget* MethodPanel::buildEditor(const MethodSpec& m, const ParamSpec& p) {
    const QString name = QString::fromStdString(m.id + "." + p.key);
    Editor e{m.id, p, {}, {}, {}, {}, {}};
    QWidget* w = nullptr;
    switch (p.kind) {
        case ParamKind::Bool: {
            auto* c = new QCheckBox(this);
            c->setObjectName(name);
            c->setToolTip(tooltip(p));
            c->setChecked(p.default_value.is_boolean() && p.default_value.get<bool>());
            connect(c, &QCheckBox::toggled, this, &MethodPanel::changed);
            e.get = [c] { return nlohmann::json(c->isChecked()); };
            e.set = [c](const nlohmann::json& j) {
                c->setChecked(j.is_boolean() && j.get<bool>());
            };
            w = c;
            break;
        }
        case ParamKind::Int:
        case ParamKind::Real: {
            const bool integer = p.kind == ParamKind::Int;
            auto* row = new QWidget(this);
            auto* h = new QHBoxLayout(row);
            h->setContentsMargins(0, 0, 0, 0);
            auto* slider = new QSlider(Qt::Horizontal, row);
            slider->setObjectName(name + ".slider");
            // The upper end moves with the loaded model (setModelCounts); the mappings read it.
            const double lo = p.min;
            auto hi = std::make_shared<double>(p.max);
            auto int_slider = [=] { return integer && *hi - lo <= kSliderSteps; };
            auto slider_range = [=] {
                slider->setRange(int_slider() ? int(lo) : 0,
                                 int_slider() ? int(*hi) : kSliderSteps);
            };
            slider_range();
            QAbstractSpinBox* spin;
            std::function<double()> value;
            std::function<void(double)> set_value;
            std::function<void(double)> set_top;
            if (integer) {
                auto* s = new QSpinBox(row);
                s->setRange(int(std::max(lo, -2e9)), int(std::min(*hi, 2e9)));
                spin = s;
                value = [s] { return double(s->value()); };
                set_value = [s](double v) { s->setValue(int(std::lround(v))); };
                set_top = [s](double top) { s->setMaximum(int(std::min(top, 2e9))); };
                connect(s, qOverload<int>(&QSpinBox::valueChanged), this, &MethodPanel::changed);
            } else {
                auto* s = new QDoubleSpinBox(row);
                s->setDecimals(decimals_for(p));
                s->setRange(lo, *hi);
                s->setSingleStep((*hi - lo) / 100.0);
                spin = s;
                value = [s] { return s->value(); };
                set_value = [s](double v) { s->setValue(v); };
                set_top = [s](double top) { s->setMaximum(top); };
                connect(s, qOverload<double>(&QDoubleSpinBox::valueChanged), this,
                        &MethodPanel::changed);
            }
            spin->setObjectName(name);
            auto to_slider = [=](double v) {
                return int_slider() ? int(std::lround(v))
                                    : int(std::lround((v - lo) / (*hi - lo > 0 ? *hi - lo : 1) *
                                                      kSliderSteps));
            };
            auto from_slider = [=](int s) {
                return int_slider() ? double(s) : lo + (*hi - lo) * s / double(kSliderSteps);
            };
            // Slider and spin box mirror each other; the spin box holds the value.
            connect(slider, &QSlider::valueChanged, spin, [=](int s) {
                if (to_slider(value()) != s) set_value(from_slider(s));
            });
            auto sync = [=] {
                const QSignalBlocker b(slider);
                slider->setValue(to_slider(value()));
            };
            if (integer)
                connect(static_cast<QSpinBox*>(spin), qOverload<int>(&QSpinBox::valueChanged),
                        slider, sync);
            else
                connect(static_cast<QDoubleSpinBox*>(spin),
                        qOverload<double>(&QDoubleSpinBox::valueChanged), slider, sync);
            if (p.default_value.is_number()) set_value(p.default_value.get<double>());
            sync();
            h->addWidget(slider, 1);
            h->addWidget(spin);
            e.get = [=] {
                return integer ? nlohmann::json(int64_t(std::lround(value())))
                               : nlohmann::json(value());
            };
            // What the user (or a preset) asked for, kept while a model bound lowers the shown
            // value, so that a larger model gets it back (64 -> 16 -> 64 steps: 20, 15, 20).
            auto wanted = std::make_shared<double>(value());
            auto bounding = std::make_shared<bool>(false);
            auto remember = [=] {
                if (!*bounding) *wanted = value();
            };
            if (integer)
                connect(static_cast<QSpinBox*>(spin), qOverload<int>(&QSpinBox::valueChanged), this,
                        remember);
            else
                connect(static_cast<QDoubleSpinBox*>(spin),
                        qOverload<double>(&QDoubleSpinBox::valueChanged), this, remember);
            e.set = [=](const nlohmann::json& j) {
                if (j.is_number()) {
                    *bounding = true;  // the spin box may clamp: remember the value asked for
                    set_value(j.get<double>());
                    *bounding = false;
                    *wanted = j.get<double>();
                }
                sync();
            };
            // A value above the new top is lowered to it (the spin box clamps), one below it
            // returns to what was asked for.
            e.wanted = [=] {
                return integer ? nlohmann::json(int64_t(std::lround(*wanted)))
                               : nlohmann::json(*wanted);
            };
            e.fit = [=](const nlohmann::json& j) {
                if (!j.is_number()) return;
                *bounding = true;
                set_value(j.get<double>());
                *bounding = false;
                sync();
            };
            e.set_top = [=](double top) {
                *hi = top;
                {
                    const QSignalBlocker b(slider);
                    slider_range();
                }
                *bounding = true;
                set_top(top);
                set_value(std::min(*wanted, top));
                *bounding = false;
                sync();
                slider->setToolTip(tooltip(p, top));
                spin->setToolTip(tooltip(p, top));
            };
            slider->setToolTip(tooltip(p));
            spin->setToolTip(tooltip(p));
            w = row;
            break;
        }
        case ParamKind::IntList:
        case ParamKind::RealList: {
            auto* edit = new QLineEdit(this);
            edit->setObjectName(name);
            edit->setText(json_text(p.default_value));
            edit->setPlaceholderText(tr("comma-separated numbers"));
            connect(edit, &QLineEdit::editingFinished, this, &MethodPanel::changed);
            const bool integer = p.kind == ParamKind::IntList;
            // Unparseable entries are passed on as strings so that from_json names the entry.
            e.get = [edit, integer] {
                nlohmann::json arr = nlohmann::json::array();
                for (const QString& part : edit->text().split(',', Qt::SkipEmptyParts)) {
                    bool ok = false;
                    const QString t = part.trimmed();
                    if (integer) {
                        const qlonglong v = t.toLongLong(&ok);
                        if (ok) arr.push_back(int64_t(v));
                    } else {
                        const double v = t.toDouble(&ok);
                        if (ok) arr.push_back(v);
                    }
                    if (!ok) arr.push_back(t.toStdString());
                }
                return arr;
            };
            e.set = [edit](const nlohmann::json& j) { edit->setText(json_text(j)); };
            edit->setToolTip(tooltip(p));
            w = edit;
            break;
        }
    }
    if (!e.wanted) e.wanted = e.get;
    if (!e.fit) e.fit = e.set;
    editors_.push_back(std::move(e));
    return w;
}

bool MethodPanel::inFamily(const std::string& method) const {
    for (const auto& s : sections_)
        if (s.method == method) return s.family == family_;
    return false;
}

nlohmann::json MethodPanel::config() const {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [id, box] : enables_)
        if (inFamily(id)) j[id] = {{"enabled", box->isChecked()}};
    for (const auto& e : editors_)
        if (inFamily(e.method)) j[e.method][e.spec.key] = e.get();
    return j;
}

void MethodPanel::setConfig(const nlohmann::json& j) {
    updating_ = true;
    for (const auto& [id, box] : enables_) {
        if (!inFamily(id)) continue;
        const auto it = j.find(id);
        box->setChecked(it != j.end() && it->is_object() && it->value("enabled", true));
    }
    for (auto& e : editors_) {
        if (!inFamily(e.method)) continue;
        const auto m = j.find(e.method);
        if (m != j.end() && m->is_object() && m->contains(e.spec.key)) e.set(m->at(e.spec.key));
    }
    fitToModel();
    updating_ = false;
    keep_fit_note_ = true;
    changed();
    keep_fit_note_ = false;
}

void MethodPanel::fitToModel() {
    fit_note_.clear();
    if (family_ != Family::Var || counts_.scales < 2) return;
    // The values asked for (before any model bound lowered them), fitted as a whole.
    nlohmann::json asked = config();
    for (const auto& e : editors_)
        if (inFamily(e.method)) asked[e.method][e.spec.key] = e.wanted();
    std::vector<std::string> notes;
    const nlohmann::json fitted = Engine::fit_accel(asked, family_, counts_.scales, &notes);
    if (notes.empty()) return;
    for (auto& e : editors_) {
        if (!inFamily(e.method) || !fitted.contains(e.method)) continue;
        const auto& part = fitted.at(e.method);
        if (part.contains(e.spec.key) && part.at(e.spec.key) != asked[e.method][e.spec.key])
            e.fit(part.at(e.spec.key));
    }
    QStringList lines;
    for (const auto& n : notes) lines << QString::fromStdString(n);
    fit_note_ =
        tr("Fitted to this model's %1 scales: %2").arg(counts_.scales).arg(lines.join("; "));
}

QStringList MethodPanel::presetNames() const {
    QStringList names;
    for (const auto& [name, _] : Engine::presets(model_family_))
        names << QString::fromStdString(name);
    return names;
}

bool MethodPanel::applyPreset(const QString& name) {
    // Case-insensitive: the names are lower case, users type "FastVAR".
    for (const auto& [preset, config] : Engine::presets(model_family_)) {
        if (QString::fromStdString(preset).compare(name, Qt::CaseInsensitive) != 0) continue;
        setConfig(config);
        return true;
    }
    return false;
}

void MethodPanel::setModelCounts(const ModelCounts& counts) {
    updating_ = true;  // one configChanged for all the clamps, not one per editor
    counts_ = counts;
    const nlohmann::json before = config();
    for (auto& e : editors_)
        if (e.set_top && e.spec.counts != ParamCount::None) e.set_top(model_max(e.spec, counts));
    fitToModel();
    updating_ = false;
    keep_fit_note_ = true;
    if (config() != before) changed();
    keep_fit_note_ = false;
    showMessages();
}

void MethodPanel::setFamily(Family model) {
    const Family f = Engine::accel_family(model);  // Infinity: VAR's accelerators
    if (f == family_ && model == model_family_) return;
    const bool same_methods = f == family_;
    family_ = f;
    model_family_ = model;  // Infinity also offers the papers' Infinity-2B settings
    presets_->clear();
    presets_->addItem(tr("Preset…"));
    for (const QString& n : presetNames()) presets_->addItem(n);
    if (same_methods) return;
    methods_ = Engine::methods(f);
    for (const auto& s : sections_) s.widget->setVisible(s.family == f);
    changed();
}

void MethodPanel::setRuntimeError(const QString& message) {
    runtime_error_ = message;
    showMessages();
}

void MethodPanel::changed() {
    if (updating_) return;
    if (!keep_fit_note_) fit_note_.clear();  // the user moved a setting after the fit
    error_ = QString::fromStdString(Engine::validate_accel(config(), family_));
    runtime_error_.clear();
    showMessages();
    if (error_.isEmpty()) emit configChanged();
}

void MethodPanel::showMessages() {
    const QString text = !error_.isEmpty()           ? tr("Invalid settings: %1").arg(error_)
                         : !runtime_error_.isEmpty() ? runtime_error_
                                                     : fit_note_;
    // Errors in red; a fit note is information.
    message_->setStyleSheet(text == fit_note_ && !text.isEmpty()
                                ? "QLabel { color: palette(text); }"
                                : "QLabel { color: #b00020; }");
    message_->setText(text);
    message_->setVisible(!text.isEmpty());
}

}  // namespace varscope::gui
