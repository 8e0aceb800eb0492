#include "ui/mar_settings.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QSignalBlocker>
#include <QSpinBox>

namespace varscope::gui {

MarSettings::MarSettings(QWidget* parent) : QWidget(parent) {
    setObjectName("marSettings");
    auto* form = new QFormLayout(this);
    form->setContentsMargins(0, 0, 0, 0);
    form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);

    num_iter_ = new QSpinBox(this);
    num_iter_->setObjectName("marNumIter");
    num_iter_->setRange(1, 256);  // MarSampleOptions::validate caps it at the token count
    num_iter_->setValue(64);
    num_iter_->setToolTip(
        tr("Decoding steps: the cosine schedule unmasks all tokens in this many "
           "steps (official: 64)"));
    form->addRow(tr("Steps"), num_iter_);

    schedule_ = new QComboBox(this);
    schedule_->setObjectName("marCfgSchedule");
    schedule_->addItem(tr("linear"), "linear");
    schedule_->addItem(tr("constant"), "constant");
    schedule_->setToolTip(
        tr("CFG schedule: linear ramps the guidance up with the decoded fraction "
           "(official), constant uses the CFG value at every step"));
    form->addRow(tr("CFG schedule"), schedule_);

    temperature_ = new QDoubleSpinBox(this);
    temperature_->setObjectName("marTemperature");
    temperature_->setRange(0.05, 5.0);
    temperature_->setSingleStep(0.05);
    temperature_->setValue(1.0);
    temperature_->setToolTip(tr("Diffusion sampling temperature of the head"));
    form->addRow(tr("Temperature"), temperature_);

    diffusion_steps_ = new QSpinBox(this);
    diffusion_steps_->setObjectName("marDiffusionSteps");
    diffusion_steps_->setRange(0, 1000);
    diffusion_steps_->setSpecialValueText(tr("model's"));
    diffusion_steps_->setValue(0);
    diffusion_steps_->setKeyboardTracking(false);  // reloads: only on Enter / focus out
    diffusion_steps_->setToolTip(
        tr("Diffusion steps of the DiffLoss head (respacing of 1000; "
           "official 100). \"model's\" = what the model file recommends. "
           "Changing it reloads the model."));
    form->addRow(tr("Diffusion steps"), diffusion_steps_);

    auto changed = [this] {
        if (!updating_) emit settingsChanged();
    };
    connect(num_iter_, qOverload<int>(&QSpinBox::valueChanged), this, changed);
    connect(schedule_, qOverload<int>(&QComboBox::currentIndexChanged), this, changed);
    connect(temperature_, qOverload<double>(&QDoubleSpinBox::valueChanged), this, changed);
    connect(diffusion_steps_, qOverload<int>(&QSpinBox::valueChanged), this, [this] {
        if (!updating_) emit diffusionStepsChanged();
    });
}

void MarSettings::read(GenerationSettings& g) const {
    g.num_iter = num_iter_->value();
    g.cfg_schedule = schedule_->currentData().toString().toStdString();
    g.temperature = temperature_->value();
}

void MarSettings::apply(const GenerationSettings& g) {
    updating_ = true;
    num_iter_->setValue(int(g.num_iter));
    const int i = schedule_->findData(QString::fromStdString(g.cfg_schedule));
    schedule_->setCurrentIndex(std::max(i, 0));
    temperature_->setValue(g.temperature);
    updating_ = false;
}

std::string MarSettings::diffusionSteps() const {
    return diffusion_steps_->value() == 0 ? std::string()
                                          : std::to_string(diffusion_steps_->value());
}

void MarSettings::setDiffusionSteps(const std::string& steps) {
    updating_ = true;
    bool ok = false;
    const int n = QString::fromStdString(steps).toInt(&ok);
    diffusion_steps_->setValue(ok ? n : 0);  // respacing specs like "50,50" are not offered here
    updating_ = false;
}

void MarSettings::applyRecommendation(const MarSamplingRecommendation& r, QDoubleSpinBox* cfg) {
    GenerationSettings official;  // num_iter 64, linear, temperature 1
    official.num_iter = r.num_iter.value_or(64);
    official.cfg_schedule = r.cfg_schedule.value_or("linear");
    official.temperature = r.temperature.value_or(1.0);
    apply(official);
    if (cfg) {
        const QSignalBlocker block(cfg);
        cfg->setValue(r.cfg.value_or(1.0));  // the official evaluation's default guidance
    }
    setDiffusionSteps({});
}

}  // namespace varscope::gui
