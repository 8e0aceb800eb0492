// One collapsible section per accelerator with an enable switch and an editor for every
// hyperparameter, all generated from core/accel's MethodSpec tables (Engine::methods()): new
// parameters appear here as the methods land. The model family picks the set shown (VAR's
// methods or MAR's LazyMAR). Emits configChanged() with a valid AccelConfig / MarAccelConfig
// JSON; invalid input is reported in the panel (from_json's message).
#pragma once

#include <QWidget>
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/accel/param_spec.h"
#include "ui/engine/engine.h"

class QCheckBox;
class QComboBox;
class QLabel;
class QVBoxLayout;

namespace varscope::gui {

class MethodPanel : public QWidget {
    Q_OBJECT
  public:
    explicit MethodPanel(QWidget* parent = nullptr);

    nlohmann::json config() const;  // {"skip": {"enabled": ..., ...}, "fastvar": {...}, ...}
    void setConfig(const nlohmann::json& j);  // missing methods are switched off
    bool applyPreset(const QString& name);
    bool valid() const { return error_.isEmpty(); }
    QString validationError() const { return error_; }
    // An error from running the accelerated side (e.g. "not implemented yet"); "" clears it.
    void setRuntimeError(const QString& message);
    QStringList presetNames() const;
    const std::vector<MethodSpec>& methods() const { return methods_; }  // of the family
    void setFamily(Family f);  // shows that family's methods and presets
    // Bounds the sliders of settings that count scales, tokens, steps or blocks by the loaded
    // model (ParamSpec::counts); values above are lowered, with one configChanged. A setting
    // that is an index into the schedule (LazyVAR's start_scale) is fitted to it as
    // fit_to_schedule (core/accel/accel_config.h) does, here and in setConfig/applyPreset, with
    // a note in the panel; a larger model gets the values asked for back.
    void setModelCounts(const ModelCounts& counts);
    QString fitNote() const { return fit_note_; }
    Family family() const { return family_; }

  signals:
    void configChanged();

  private:
    struct Editor {
        std::string method;
        ParamSpec spec;
        std::function<nlohmann::json()> get;
        std::function<void(const nlohmann::json&)> set;
        std::function<void(double)> set_top;  // numeric editors: a new upper end
        // What the user or a preset asked for (numeric editors keep it while a model bound or
        // a fit lowers the shown value), and a set that keeps it.
        std::function<nlohmann::json()> wanted;
        std::function<void(const nlohmann::json&)> fit;
    };
    QWidget* buildSection(const MethodSpec& m);
    QWidget* buildEditor(const MethodSpec& m, const ParamSpec& p);
    void changed();
    void showMessages();
    void fitToModel();  // editors only (no configChanged): sets fit_note_
    bool inFamily(const std::string& method) const;

    struct Section {
        Family family;
        std::string method;
        QWidget* widget;
    };

    Family family_ = Family::Var;        // the accelerators' family (Infinity: Var)
    Family model_family_ = Family::Var;  // the model's: which presets are offered
    std::vector<MethodSpec> methods_;
    std::vector<Section> sections_;
    std::vector<Editor> editors_;
    std::vector<std::pair<std::string, QCheckBox*>> enables_;
    QComboBox* presets_;
    QLabel* message_;
    QString error_, runtime_error_, fit_note_;
    ModelCounts counts_;
    bool updating_ = false;
    bool keep_fit_note_ = false;  // changed() from a fit: the note stays
};

}  // namespace varscope::gui
