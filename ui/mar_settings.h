// MAR's sampling controls (decoding steps, CFG schedule, temperature, diffusion steps of the
// head), shown by the model panel in place of VAR's top-k/top-p when a MAR model is picked.
// The diffusion respacing is fixed when a model loads, so changing it reloads the model.
#pragma once

#include <QWidget>
#include <string>

#include "ui/engine/engine.h"

class QComboBox;
class QDoubleSpinBox;
class QSpinBox;

namespace varscope::gui {

class MarSettings : public QWidget {
    Q_OBJECT
  public:
    explicit MarSettings(QWidget* parent = nullptr);

    void read(GenerationSettings& g) const;            // num_iter, cfg_schedule, temperature
    void apply(const GenerationSettings& g);           // without signals
    std::string diffusionSteps() const;                // "" = the model file's recommendation
    void setDiffusionSteps(const std::string& steps);  // without signals; "" or a count
    // Sets what `r` names (cfg into `cfg`), the rest to the official MAR defaults; no signals.
    void applyRecommendation(const MarSamplingRecommendation& r, QDoubleSpinBox* cfg);

    QSpinBox* numIterBox() const { return num_iter_; }
    QSpinBox* diffusionStepsBox() const { return diffusion_steps_; }

  signals:
    void settingsChanged();
    void diffusionStepsChanged();

  private:
    QSpinBox* num_iter_;
    QComboBox* schedule_;
    QDoubleSpinBox* temperature_;
    QSpinBox* diffusion_steps_;
    bool updating_ = false;
};

}  // namespace varscope::gui
