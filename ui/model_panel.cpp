#include "ui/model_panel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QMessageBox>
#include <QPushButton>
#include <QRandomGenerator>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QStyle>
#include <QTimer>
#include <QToolButton>
#include <limits>

#include "core/text/class_matcher.h"
#include "ui/elided_combo_box.h"
#include "ui/elided_label.h"
#include "ui/mar_settings.h"

namespace varscope::gui {
namespace {

QString source_data(const ModelSource& s) {
    if (s.kind == ModelSource::Kind::Files)  // a T5 folder makes a text-to-image triple
        return QString::fromStdString("files\n" + s.var_path + "\n" + s.vae_path +
                                      (s.t5_path.empty() ? "" : "\n" + s.t5_path) +
                                      (s.low_memory ? "\nlow-memory" : ""));
    if (s.kind == ModelSource::Kind::Custom)
        return QString::fromStdString("custom\n" + s.custom_name);
    return s.family == Family::Mar        ? QStringLiteral("embedded\nmar")
           : s.family == Family::Infinity ? QStringLiteral("embedded\ninfinity")
                                          : QStringLiteral("embedded");
}

ModelSource source_from_data(const QString& d) {
    const QStringList parts = d.split('\n');
    ModelSource s;
    if (parts.value(0) == "files") {
        s.kind = ModelSource::Kind::Files;
        s.var_path = parts.value(1).toStdString();
        s.vae_path = parts.value(2).toStdString();
        s.t5_path = parts.value(3).toStdString();
        s.low_memory = parts.value(4) == "low-memory";
    } else if (parts.value(0) == "custom") {
        s.kind = ModelSource::Kind::Custom;
        s.custom_name = parts.value(1).toStdString();
    } else if (parts.value(1) == "mar") {
        s.family = Family::Mar;
    } else if (parts.value(1) == "infinity") {
        s.family = Family::Infinity;
    }
    return s;
}

// The official Infinity sampling (InfinityRunner::defaults: scripts/infer.sh's settings).
constexpr double kInfinityCfg = 4.0, kInfinityTopP = 0.97;
constexpr int kInfinityTopK = 900;

// Picks the VAR and VQVAE checkpoints of an official pair.
class CheckpointDialog : public QDialog {
  public:
    explicit CheckpointDialog(QWidget* parent) : QDialog(parent) {
        setWindowTitle(tr("Open checkpoints"));
        auto* form = new QFormLayout(this);
        auto row = [&](QLineEdit*& edit, const QString& what) {
            edit = new QLineEdit(this);
            edit->setPlaceholderText(
                tr("%1 checkpoint (.pth, .safetensors or a shard index)").arg(what));
            auto* browse = new QPushButton(tr("Browse…"), this);
            connect(browse, &QPushButton::clicked, this, [this, edit, what] {
                const QString f = QFileDialog::getOpenFileName(
                    this, tr("%1 checkpoint").arg(what), QFileInfo(edit->text()).path(),
                    tr("Checkpoints (*.pth *.safetensors *.pt *.safetensors.index.json);;All "
                       "files (*)"));
                if (!f.isEmpty()) edit->setText(f);
            });
            auto* h = new QHBoxLayout;
            h->addWidget(edit, 1);
            h->addWidget(browse);
            form->addRow(what, h);
        };
        row(var_, tr("Model"));
        row(vae_, tr("VAE"));
        t5_ = new QLineEdit(this);
        t5_->setObjectName("t5Folder");
        t5_->setPlaceholderText(tr("text-to-image only: the T5 encoder folder"));
        auto* browse_t5 = new QPushButton(tr("Browse…"), this);
        connect(browse_t5, &QPushButton::clicked, this, [this] {
            const QString d =
                QFileDialog::getExistingDirectory(this, tr("T5 encoder folder"), t5_->text());
            if (!d.isEmpty()) t5_->setText(d);
        });
        auto* t5_row = new QHBoxLayout;
        t5_row->addWidget(t5_, 1);
        t5_row->addWidget(browse_t5);
        form->addRow(tr("T5"), t5_row);
        low_memory_ = new QCheckBox(tr("Low-memory mode"), this);
        low_memory_->setObjectName("lowMemory");
        low_memory_->setToolTip(
            tr("Text-to-image on a GPU: the T5 encoder leaves the GPU after encoding, and "
               "before a run that would not fit the free memory the last transformer blocks "
               "move to host memory and are copied in as they run (same images, slower)."));
        form->addRow(QString(), low_memory_);
        auto* note = new QLabel(tr("Official pairs: a VAR with its VQVAE (var_d16.pth + "
                                   "vae_ch160v4096z32.pth) or a MAR with its KL VAE "
                                   "(checkpoint-last.pth + kl16.ckpt); the family is read from "
                                   "the tensor names. An Infinity (text-to-image) transformer "
                                   "takes its BSQ VAE and its T5 encoder folder (config.json, "
                                   "model.safetensors, spiece.model)."),
                                this);
        note->setWordWrap(true);
        form->addRow(note);
        auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
        connect(buttons, &QDialogButtonBox::accepted, this, [this] {
            for (auto* e : {var_, vae_})
                if (!QFileInfo(e->text()).isFile()) {
                    QMessageBox::warning(this, tr("Open checkpoints"),
                                         tr("'%1' is not a file.").arg(e->text()));
                    return;
                }
            if (!t5_->text().isEmpty() && !QFileInfo(t5_->text()).isDir()) {
                QMessageBox::warning(this, tr("Open checkpoints"),
                                     tr("'%1' is not a folder.").arg(t5_->text()));
                return;
            }
            accept();
        });
        connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
        form->addRow(buttons);
        resize(560, sizeHint().height());
    }
    QLineEdit* var_;
    QLineEdit* vae_;
    QLineEdit* t5_;
    QCheckBox* low_memory_;
};

}  // namespace

ModelPanel::ModelPanel(QWidget* parent) : QWidget(parent) {
    auto* form = new QFormLayout(this);
    form_ = form;
    form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);

    model_ = new ElidedComboBox(this);
    model_->setObjectName("modelCombo");
    model_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    model_->setMinimumContentsLength(14);
    model_->setBaseToolTip(
        tr("Model: the embedded emoji text-to-image model, VAR or MAR, or opened "
           "checkpoints"));
    auto* open = new QToolButton(this);
    open->setText(tr("Open…"));
    open->setToolTip(
        tr("Open a VAR + VQVAE or MAR + KL VAE checkpoint pair, or an Infinity + BSQ "
           "VAE + T5 folder (Ctrl+O)"));
    connect(open, &QToolButton::clicked, this, &ModelPanel::openCheckpoints);
    auto* mrow = new QHBoxLayout;
    mrow->addWidget(model_, 1);
    mrow->addWidget(open);
    form->addRow(tr("Model"), mrow);

    device_ = new QComboBox(this);
    device_->setObjectName("device");
    device_->addItem(tr("CPU"), "cpu");
    device_->addItem(tr("CUDA"), "cuda");
    if (!Engine::cuda_available()) {
        auto* items = qobject_cast<QStandardItemModel*>(device_->model());
        items->item(1)->setEnabled(false);
        items->item(1)->setToolTip(tr("No CUDA device (or LibTorch without CUDA)"));
    } else {
        device_->setCurrentIndex(1);
    }
    precision_ = new QComboBox(this);
    precision_->setObjectName("precision");
    for (const auto& name : model_precisions())
        precision_->addItem(QString::fromStdString(name), QString::fromStdString(name));
    precision_->setToolTip(
        tr("Transformer precision on CUDA. bf16 and fp16 run on the tensor cores, and SparVAR's "
           "sparse attention runs on its CUDA kernels only in bf16 or fp16 (in fp32 it runs its "
           "exact reference, which saves no time). The CPU runs fp32."));
    auto* drow = new QHBoxLayout;
    drow->addWidget(device_, 1);
    drow->addWidget(precision_);
    form->addRow(tr("Device"), drow);
    updatePrecisionEnabled();

    prompt_ = new QLineEdit(this);
    prompt_->setObjectName("prompt");
    prompt_->setPlaceholderText(tr("e.g. red heart, cat, rocket"));
    prompt_->setClearButtonEnabled(true);
    form->addRow(tr("Prompt"), prompt_);
    suggestions_ = new QListWidget(this);
    suggestions_->setObjectName("suggestions");
    suggestions_->setMaximumHeight(92);
    suggestions_->setToolTip(tr("Best matching classes; click one to use it"));
    form->addRow(QString(), suggestions_);

    class_id_ = new QSpinBox(this);
    class_id_->setObjectName("classId");
    class_id_->setRange(0, 0);
    class_name_ = new ElidedLabel(this);
    class_name_->setObjectName("className");
    class_name_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    auto* crow = new QHBoxLayout;
    crow->addWidget(class_id_);
    crow->addWidget(class_name_, 1);
    form->addRow(tr("Class"), crow);
    class_row_ = crow;

    seed_ = new QSpinBox(this);
    seed_->setObjectName("seed");
    seed_->setRange(0, std::numeric_limits<int>::max());
    dice_ = new QToolButton(this);
    dice_->setIcon(style()->standardIcon(QStyle::SP_BrowserReload));
    dice_->setToolTip(tr("Random seed (Ctrl+R)"));
    connect(dice_, &QToolButton::clicked, this, &ModelPanel::rollDice);
    auto* srow = new QHBoxLayout;
    srow->addWidget(seed_, 1);
    srow->addWidget(dice_);
    form->addRow(tr("Seed"), srow);

    cfg_ = new QDoubleSpinBox(this);
    cfg_->setObjectName("cfg");
    cfg_->setRange(0, 20);
    cfg_->setSingleStep(0.5);
    cfg_->setValue(4.0);
    cfg_->setToolTip(tr("Classifier-free guidance scale (ramped over the scales)"));
    form->addRow(tr("CFG"), cfg_);
    top_k_ = new QSpinBox(this);
    top_k_->setObjectName("topK");
    top_k_->setRange(0, 100000);
    top_k_->setValue(900);
    top_k_->setToolTip(tr("Top-k filter; 0 = off"));
    form->addRow(tr("Top-k"), top_k_);
    top_p_ = new QDoubleSpinBox(this);
    top_p_->setObjectName("topP");
    top_p_->setRange(0, 1);
    top_p_->setDecimals(3);
    top_p_->setSingleStep(0.01);
    top_p_->setValue(0.95);
    top_p_->setToolTip(tr("Top-p (nucleus) filter; 0 = off"));
    form->addRow(tr("Top-p"), top_p_);
    keep_words_ = new QCheckBox(tr("Keep words the text encoder never saw"), this);
    keep_words_->setObjectName("keepUnknownWords");
    keep_words_->setToolTip(
        tr("Off (default): words outside the text encoder's training captions are left out of "
           "the prompt before it is read, and the status bar names them. On: the prompt is read "
           "as typed, every word split into the pieces its tokenizer knows"));
    form->addRow(QString(), keep_words_);
    form->setRowVisible(keep_words_, false);
    connect(keep_words_, &QCheckBox::toggled, this, [this] {
        if (!updating_) emit settingsChanged();
    });
    mar_ = new MarSettings(this);
    form->addRow(mar_);
    form->setRowVisible(mar_, false);
    connect(mar_, &MarSettings::settingsChanged, this, [this] {
        if (!updating_) emit settingsChanged();
    });
    // A new respacing changes the model key: the next run reloads the model.
    connect(mar_, &MarSettings::diffusionStepsChanged, this, [this] {
        if (!updating_) emit settingsChanged();
    });
    recommended_button_ = new QToolButton(this);
    recommended_button_->setObjectName("useRecommended");
    recommended_button_->setText(tr("Use the model's recommendation"));
    connect(recommended_button_, &QToolButton::clicked, this, &ModelPanel::applyRecommendation);
    form->addRow(QString(), recommended_button_);
    // First launch: the embedded model's recommendation (saved settings, applied later, win).
    recommendation_ = Engine::embedded_recommendation();
    if (recommendation_.cfg) cfg_->setValue(*recommendation_.cfg);
    if (recommendation_.top_k) top_k_->setValue(int(*recommendation_.top_k));
    if (recommendation_.top_p) top_p_->setValue(*recommendation_.top_p);
    setLoadedModelRecommendation(recommendation_);

    const ModelSource first = defaultModelSource();
    rebuildModelCombo(first);
    if (first.family == Family::Infinity) {  // no classes: the prompt is the model's text
        recommendation_ = {};                // the VAR's is not this model's
        cfg_->setValue(kInfinityCfg);
        top_k_->setValue(kInfinityTopK);
        top_p_->setValue(kInfinityTopP);
        setFamily(Family::Infinity);
    } else {
        setClassList(QString::fromStdString(Engine::embedded_class_list()), -1);
    }

    connect(model_, qOverload<int>(&QComboBox::currentIndexChanged), this, [this] {
        if (updating_) return;
        model_picked_by_user_ = true;
        const ModelSource s = source_from_data(model_->currentData().toString());
        if (s.kind == ModelSource::Kind::Embedded) {
            // The embedded files' recommendations are known without loading them, so the first
            // run already uses them (MAR at VAR-sized defaults would be 4x slower and worse).
            setFamily(s.family);
            if (s.family == Family::Mar)
                setLoadedMarRecommendation(Engine::embedded_mar_recommendation());
            else if (s.family == Family::Var)
                setLoadedModelRecommendation(Engine::embedded_recommendation());
            // Infinity: its defaults apply when it has loaded (ModelInfo::recommended).
        }
        emit modelChanged();
    });
    connect(device_, qOverload<int>(&QComboBox::currentIndexChanged), this, [this] {
        updatePrecisionEnabled();
        if (!updating_) emit modelChanged();
    });
    connect(precision_, qOverload<int>(&QComboBox::currentIndexChanged), this, [this] {
        if (!updating_ && precision_->isEnabled()) emit modelChanged();
    });
    // Typing picks the best class at once, but the run waits for Enter or a pause in the typing:
    // "red heart" made a run per keystroke ("r", "re", "red", ... each a class of its own).
    prompt_pause_.setSingleShot(true);
    prompt_pause_.setInterval(800);
    connect(&prompt_pause_, &QTimer::timeout, this, [this] {
        // Not while the user is choosing in the suggestion list: the choice commits.
        if (suggestions_->hasFocus()) return;
        commitPrompt();
    });
    connect(prompt_, &QLineEdit::textEdited, this, [this] {
        if (family_ == Family::Infinity) {  // free text: the run follows the pause or Enter
            prompt_pause_.start();
            return;
        }
        updateSuggestions();
        if (suggestions_->count() > 0) {
            updating_ = true;  // no settingsChanged per keystroke
            class_id_->setValue(suggestions_->item(0)->data(Qt::UserRole).toInt());
            updating_ = false;
        }
        prompt_pause_.start();
    });
    connect(prompt_, &QLineEdit::returnPressed, this, [this] {
        commitPrompt();
        emit runRequested();
    });
    connect(suggestions_, &QListWidget::itemClicked, this, [this](QListWidgetItem* it) {
        prompt_pause_.stop();
        class_id_->setValue(it->data(Qt::UserRole).toInt());
        commitPrompt();
    });
    connect(suggestions_, &QListWidget::itemActivated, this, [this](QListWidgetItem* it) {
        prompt_pause_.stop();
        class_id_->setValue(it->data(Qt::UserRole).toInt());
        commitPrompt();
        emit runRequested();
    });
    connect(class_id_, qOverload<int>(&QSpinBox::valueChanged), this, [this](int id) {
        class_name_->setFullText(className(id));
        for (int i = 0; i < suggestions_->count(); ++i)
            if (suggestions_->item(i)->data(Qt::UserRole).toInt() == id)
                suggestions_->setCurrentRow(i);
        if (!updating_) {
            committed_class_ = id;
            emit settingsChanged();
        }
    });
    connect(seed_, qOverload<int>(&QSpinBox::valueChanged), this, [this] {
        if (!updating_) emit settingsChanged();
    });
    for (auto* box : {cfg_, top_p_})
        connect(box, qOverload<double>(&QDoubleSpinBox::valueChanged), this, [this] {
            if (!updating_) emit settingsChanged();
        });
    connect(top_k_, qOverload<int>(&QSpinBox::valueChanged), this, [this] {
        if (!updating_) emit settingsChanged();
    });
}

ModelPanel::~ModelPanel() = default;

void ModelPanel::rebuildModelCombo(const ModelSource& select) {
    updating_ = true;
    model_->clear();
    // Short names: the combo cuts, not elides, its text (at 1280×800 "Embedded emoji VAR (d16,
    // 191"); the details are in the tooltips.
    model_->addItem(tr("Emoji VAR (embedded)"), source_data(ModelSource{}));
    model_->setItemData(0, tr("Embedded emoji VAR: d16, 1911 emoji"), Qt::ToolTipRole);
    ModelSource mar;
    mar.family = Family::Mar;
    model_->addItem(tr("Emoji MAR (embedded)"), source_data(mar));
    model_->setItemData(1, tr("Embedded emoji MAR: 8M parameters, 1911 emoji"), Qt::ToolTipRole);
    ModelSource t2i;
    t2i.family = Family::Infinity;
    model_->addItem(tr("Emoji text-to-image (embedded)"), source_data(t2i));
    model_->setItemData(2,
                        tr("Embedded emoji text-to-image model: Infinity with a small T5, 64x64 "
                           "images from free text"),
                        Qt::ToolTipRole);
    auto* items = qobject_cast<QStandardItemModel*>(model_->model());
    if (!Engine::embedded_available()) {
        items->item(0)->setEnabled(false);
        items->item(0)->setToolTip(tr("resources/models/emoji-var/vqvae.safetensors not found"));
    }
    if (!Engine::embedded_mar_available()) {
        items->item(1)->setEnabled(false);
        items->item(1)->setToolTip(tr("resources/models/emoji-mar/klvae.safetensors not found"));
    }
    if (!Engine::embedded_t2i_available()) {
        items->item(2)->setEnabled(false);
        items->item(2)->setToolTip(
            tr("resources/models/emoji-t2i-{infinity,bsq-vae}.safetensors or emoji-t2i-t5/ not "
               "found"));
    }
    for (const QString& entry : recent_) {  // "model\nvae", "model\nvae\nt5[\nlow-memory]"
        const QStringList p = entry.split('\n');
        ModelSource s;
        s.kind = ModelSource::Kind::Files;
        s.var_path = p.value(0).toStdString();
        s.vae_path = p.value(1).toStdString();
        s.t5_path = p.value(2).toStdString();
        s.low_memory = p.value(3) == "low-memory";
        QString name = QFileInfo(p.value(0)).fileName() + " + " + QFileInfo(p.value(1)).fileName();
        if (!s.t5_path.empty()) name += " + " + QFileInfo(p.value(2)).fileName();
        if (s.low_memory) name += tr(" (low memory)");
        model_->addItem(name, source_data(s));
        model_->setItemData(model_->count() - 1, entry, Qt::ToolTipRole);
    }
    if (select.kind == ModelSource::Kind::Custom)
        model_->addItem(QString::fromStdString(select.custom_name), source_data(select));
    ModelSource key = select;
    key.device = "cpu";
    key.diffusion_steps.clear();
    const int idx = model_->findData(source_data(key));
    model_->setCurrentIndex(std::max(idx, 0));
    updating_ = false;
}

ModelSource ModelPanel::modelSource() const {
    ModelSource s = source_from_data(model_->currentData().toString());
    s.device = device_->currentData().toString().toStdString();
    s.precision =
        precision_->isEnabled() ? precision_->currentData().toString().toStdString() : "fp32";
    if (s.kind == ModelSource::Kind::Files) s.family = family_;  // as detected when it loaded
    if (s.family == Family::Mar) s.diffusion_steps = mar_->diffusionSteps();
    return s;
}

void ModelPanel::setFamily(Family f) {
    family_ = f;
    const bool is_mar = f == Family::Mar, t2i = f == Family::Infinity;
    form_->setRowVisible(top_k_, !is_mar);
    form_->setRowVisible(top_p_, !is_mar);
    form_->setRowVisible(mar_, is_mar);
    // Text-to-image: the prompt is the model's text; no classes to pick or suggest.
    form_->setRowVisible(class_row_, !t2i);
    form_->setRowVisible(suggestions_, !t2i);
    form_->setRowVisible(keep_words_, t2i);
    prompt_->setEnabled(t2i || matcher_ != nullptr);
    prompt_->setPlaceholderText(
        t2i        ? tr("describe the emoji, e.g. thumbs up, dark skin tone, twemoji style")
        : matcher_ ? tr("e.g. red heart, cat, rocket")
                   : tr("no class names for this model: use the class id"));
    prompt_->setToolTip(t2i ? tr("The text the model draws (read by its T5 encoder); it runs "
                                 "after a pause in the typing or on Enter")
                            : tr("Words naming a class: the best match is used"));
    if (t2i) committed_prompt_ = prompt_->text().trimmed();
    cfg_->setToolTip(is_mar
                         ? tr("Classifier-free guidance scale (scheduled over the decoding steps)")
                         : tr("Classifier-free guidance scale (ramped over the scales)"));
    updateRecommendationButton();
}

ModelSource ModelPanel::defaultModelSource() {
    ModelSource s;  // the embedded VAR
    if (Engine::embedded_t2i_available()) s.family = Family::Infinity;
    return s;
}

void ModelPanel::updateRecommendationButton() {
    const bool is_mar = family_ == Family::Mar;
    const bool none = is_mar ? mar_recommendation_.empty() : recommendation_.empty();
    const std::string what = is_mar ? mar_recommendation_.describe() : recommendation_.describe();
    recommended_button_->setEnabled(!none);
    recommended_button_->setToolTip(
        none ? tr("This model file recommends no sampling settings")
             : tr("Set %1, as the model file recommends").arg(QString::fromStdString(what)));
}

void ModelPanel::setLoadedModel(const ModelInfo& info) {
    setFamily(info.family);
    if (info.family == Family::Mar) {
        if (!model_picked_by_user_) {
            // Show the respacing in use without overriding the user's choice.
            mar_recommendation_ = info.mar_recommended;
            updateRecommendationButton();
            return;
        }
        setLoadedMarRecommendation(info.mar_recommended);
    } else {
        setLoadedModelRecommendation(info.recommended);
    }
}

void ModelPanel::setLoadedMarRecommendation(const MarSamplingRecommendation& r) {
    mar_recommendation_ = r;
    updateRecommendationButton();
    if (!model_picked_by_user_) return;
    model_picked_by_user_ = false;
    updating_ = true;
    mar_->applyRecommendation(r, cfg_);  // missing entries: the official MAR defaults
    updating_ = false;
    emit settingsChanged();
}

void ModelPanel::addRecent(const QString& var, const QString& vae, const QString& t5,
                           bool low_memory) {
    const QString pair = var + "\n" + vae + (t5.isEmpty() ? QString() : "\n" + t5) +
                         (low_memory && !t5.isEmpty() ? "\nlow-memory" : "");
    recent_.removeAll(pair);
    recent_.prepend(pair);
    while (recent_.size() > 8) recent_.removeLast();
    emit recentFilesChanged();
}

void ModelPanel::setRecentFiles(const QStringList& pairs) {
    const ModelSource current = modelSource();
    recent_ = pairs;
    rebuildModelCombo(current);
}

void ModelPanel::setModelSource(const ModelSource& src) {
    if (src.kind == ModelSource::Kind::Files)
        addRecent(QString::fromStdString(src.var_path), QString::fromStdString(src.vae_path),
                  QString::fromStdString(src.t5_path), src.low_memory);
    updating_ = true;
    const int d =
        device_->findData(QString::fromStdString(src.device).startsWith("cuda") ? "cuda" : "cpu");
    auto* items = qobject_cast<QStandardItemModel*>(device_->model());
    if (d >= 0 && items->item(d)->isEnabled()) device_->setCurrentIndex(d);
    const int p = precision_->findData(QString::fromStdString(src.precision));
    if (p >= 0) precision_->setCurrentIndex(p);
    updatePrecisionEnabled();
    updating_ = false;
    rebuildModelCombo(src);
}

bool ModelPanel::pickModel(const ModelSource& src) {
    const int i = model_->findData(source_data(src));
    if (i < 0) return false;
    if (i == model_->currentIndex()) return true;
    model_->setCurrentIndex(i);  // the combo's handler treats it as the user's pick
    return true;
}

void ModelPanel::openCheckpoints() {
    CheckpointDialog dlg(this);
    if (dlg.exec() != QDialog::Accepted) return;
    ModelSource s;
    s.kind = ModelSource::Kind::Files;
    s.var_path = dlg.var_->text().toStdString();
    s.vae_path = dlg.vae_->text().toStdString();
    s.t5_path = dlg.t5_->text().toStdString();
    s.low_memory = !s.t5_path.empty() && dlg.low_memory_->isChecked();
    s.device = device_->currentData().toString().toStdString();
    s.precision = precision_->currentData().toString().toStdString();
    setModelSource(s);
    emit modelChanged();
}

void ModelPanel::updatePrecisionEnabled() {
    precision_->setEnabled(device_->currentData().toString() == "cuda");
}

QString ModelPanel::prompt() const {
    return prompt_->text();
}

GenerationSettings ModelPanel::sampling() const {
    GenerationSettings g;
    g.class_id = class_id_->value();
    g.seed = static_cast<uint64_t>(seed_->value());
    g.cfg = cfg_->value();
    g.top_k = top_k_->value();
    g.top_p = top_p_->value();
    if (family_ == Family::Infinity) {
        g.prompt = prompt_->text().trimmed().toStdString();
        g.keep_unknown_words = keep_words_->isChecked();
    }
    mar_->read(g);
    return g;
}

void ModelPanel::applyRequest(const Request& r) {
    setModelSource(r.model);
    if (r.model.kind != ModelSource::Kind::Custom) setFamily(r.model.family);
    updating_ = true;
    mar_->apply(r.gen);
    mar_->setDiffusionSteps(r.model.diffusion_steps);
    prompt_->setText(r.prompt);
    updateSuggestions();
    if (r.gen.class_id > class_id_->maximum()) class_id_->setMaximum(int(r.gen.class_id));
    class_id_->setValue(int(r.gen.class_id));
    seed_->setValue(int(r.gen.seed));
    cfg_->setValue(r.gen.cfg);
    top_k_->setValue(int(r.gen.top_k));
    top_p_->setValue(r.gen.top_p);
    keep_words_->setChecked(r.gen.keep_unknown_words);
    updating_ = false;
    committed_class_ = class_id_->value();
    committed_prompt_ = prompt_->text().trimmed();
    prompt_pause_.stop();
    class_name_->setFullText(className(class_id_->value()));
}

void ModelPanel::setLoadedModelRecommendation(const SamplingRecommendation& r) {
    recommendation_ = r;
    updateRecommendationButton();
    if (!model_picked_by_user_) return;
    model_picked_by_user_ = false;
    updating_ = true;                   // one settingsChanged below, not three
    const GenerationSettings official;  // the official VAR defaults
    cfg_->setValue(r.cfg.value_or(official.cfg));
    top_k_->setValue(int(r.top_k.value_or(official.top_k)));
    top_p_->setValue(r.top_p.value_or(official.top_p));
    updating_ = false;
    emit settingsChanged();
}

void ModelPanel::applyRecommendation() {
    if (family_ == Family::Mar) {
        if (mar_recommendation_.empty()) return;
        updating_ = true;
        mar_->applyRecommendation(mar_recommendation_, cfg_);
        updating_ = false;
        emit settingsChanged();
        return;
    }
    if (recommendation_.empty()) return;
    updating_ = true;
    if (recommendation_.cfg) cfg_->setValue(*recommendation_.cfg);
    if (recommendation_.top_k) top_k_->setValue(int(*recommendation_.top_k));
    if (recommendation_.top_p) top_p_->setValue(*recommendation_.top_p);
    updating_ = false;
    emit settingsChanged();
}

void ModelPanel::setPrompt(const QString& text) {
    prompt_->setText(text);
    if (family_ == Family::Infinity) {
        commitPrompt();
        return;
    }
    updateSuggestions();
    if (suggestions_->count() > 0)
        class_id_->setValue(suggestions_->item(0)->data(Qt::UserRole).toInt());
    commitPrompt();
}

void ModelPanel::commitPrompt() {
    prompt_pause_.stop();
    if (family_ == Family::Infinity) {  // the text itself is the setting
        const QString text = prompt_->text().trimmed();
        if (text == committed_prompt_) return;
        committed_prompt_ = text;
        emit settingsChanged();
        return;
    }
    if (class_id_->value() == committed_class_) return;
    committed_class_ = class_id_->value();
    emit settingsChanged();
}

void ModelPanel::rollDice() {
    seed_->setValue(int(QRandomGenerator::global()->bounded(1000000)));
}

void ModelPanel::setClassList(const QString& path, int numClasses) {
    matcher_.reset();
    if (!path.isEmpty()) {
        try {
            auto classes = load_class_list(path.toStdString());
            if (numClasses < 0) numClasses = int(classes.size());
            if (int(classes.size()) == numClasses)
                matcher_ = std::make_unique<ClassMatcher>(std::move(classes));
        } catch (const std::exception&) {
            // No names: ids still work.
        }
    }
    updating_ = true;
    class_id_->setRange(0, std::max(0, numClasses - 1));
    updating_ = false;
    committed_class_ = class_id_->value();
    prompt_->setEnabled(matcher_ != nullptr || family_ == Family::Infinity);
    // A prompt typed before the names were known picks its class now.
    if (matcher_ && !prompt_->text().trimmed().isEmpty()) {
        const auto best = matcher_->rank(prompt_->text().toStdString(), 1);
        if (!best.empty() && best.front().class_id != class_id_->value())
            class_id_->setValue(int(best.front().class_id));
    }
    if (family_ != Family::Infinity)
        prompt_->setPlaceholderText(matcher_ ? tr("e.g. red heart, cat, rocket")
                                             : tr("no class names for this model: use the "
                                                  "class id"));
    class_name_->setFullText(className(class_id_->value()));
    updateSuggestions();
}

QString ModelPanel::className(int64_t id) const {
    if (!matcher_ || id < 0 || id >= int64_t(matcher_->size())) return {};
    const auto& info = matcher_->info(id);
    return QString::fromStdString(info.short_name.empty() ? info.name : info.short_name);
}

void ModelPanel::updateSuggestions() {
    suggestions_->clear();
    if (!matcher_ || family_ == Family::Infinity) return;
    for (const Match& m : matcher_->rank(prompt_->text().toStdString(), 6)) {
        auto* it = new QListWidgetItem(
            QStringLiteral("[%1] %2").arg(m.class_id).arg(QString::fromStdString(m.label)));
        it->setData(Qt::UserRole, int(m.class_id));
        suggestions_->addItem(it);
    }
}

}  // namespace varscope::gui
