// Model and sampling controls: model picker (embedded models, official checkpoint pairs and
// Infinity + BSQ VAE + T5 triples, recent files), prompt (class-conditional models: with ranked
// class suggestions and the class id; text-to-image: free text, no classes), seed (with dice),
// CFG, top-k/top-p, device. Emits modelChanged() / settingsChanged(); holds no model itself.
#pragma once

#include <QTimer>
#include <QWidget>
#include <memory>

#include "ui/run_types.h"

class QCheckBox;
class QComboBox;
class QFormLayout;
class QDoubleSpinBox;
class QLabel;
class QLayout;
class QLineEdit;
class QListWidget;
class QSpinBox;
class QToolButton;

namespace varscope {
class ClassMatcher;
}

namespace varscope::gui {

class ElidedComboBox;

class ElidedLabel;
class MarSettings;

class ModelPanel : public QWidget {
    Q_OBJECT
  public:
    explicit ModelPanel(QWidget* parent = nullptr);
    ~ModelPanel() override;

    ModelSource modelSource() const;
    // Selects the source, adding a checkpoint pair to the list (and the recent files).
    void setModelSource(const ModelSource& src);
    // As if the user picked the (listed) source in the combo: its recommendation will apply.
    // False when the combo does not list it.
    bool pickModel(const ModelSource& src);
    QString prompt() const;
    // As if typed and settled: the best matching class is picked (settingsChanged) at once;
    // text-to-image: the text is the setting.
    void setPrompt(const QString& text);
    // What opens when no model was saved: the embedded text-to-image model when it is shipped,
    // else the embedded VAR.
    static ModelSource defaultModelSource();
    GenerationSettings sampling() const;  // class, seed, cfg, top-k, top-p
    void applyRequest(const Request& r);  // model + prompt + sampling
    // The loaded model's recommended sampling (ModelInfo::recommended). After the user picked
    // another model, its recommendation (or the official VAR defaults when it has none) is
    // applied; restored requests are never overridden.
    void setLoadedModelRecommendation(const SamplingRecommendation& r);
    // MAR's counterpart ("varscope.mar_sampling"; missing entries: the official MAR defaults).
    void setLoadedMarRecommendation(const MarSamplingRecommendation& r);
    // A model finished loading: shows its family's controls and applies its recommendation.
    void setLoadedModel(const ModelInfo& info);
    void applyRecommendation();  // the "Recommended" button
    // VAR: top-k / top-p; MAR: decoding steps, CFG schedule, temperature, diffusion steps.
    void setFamily(Family f);
    Family family() const { return family_; }
    MarSettings* marSettings() const { return mar_; }

    // Class names of the loaded model (from the engine); "" = none, prompt disabled;
    // numClasses < 0 accepts the list's size.
    void setClassList(const QString& path, int numClasses);
    QStringList recentFiles() const { return recent_; }
    void setRecentFiles(const QStringList& pairs);  // "var\nvae" or "model\nvae\nt5" entries
    QString className(int64_t id) const;

    QSpinBox* seedBox() const { return seed_; }
    QSpinBox* classBox() const { return class_id_; }
    QLineEdit* promptEdit() const { return prompt_; }
    QListWidget* suggestions() const { return suggestions_; }
    int promptPauseMs() const { return prompt_pause_.interval(); }

  public slots:
    void rollDice();
    void openCheckpoints();

  signals:
    void modelChanged();
    void settingsChanged();
    void runRequested();  // Enter in the prompt or on a suggestion: run now
    void recentFilesChanged();

  private:
    void updateSuggestions();
    // The class the prompt picked becomes a setting (settingsChanged) if it is a new one.
    void commitPrompt();
    void rebuildModelCombo(const ModelSource& select);
    void addRecent(const QString& var, const QString& vae, const QString& t5 = {},
                   bool low_memory = false);
    void updateRecommendationButton();

    void updatePrecisionEnabled();

    ElidedComboBox* model_;  // long checkpoint names elide
    QComboBox* device_;
    QComboBox* precision_;  // fp32 / bf16 / fp16; CUDA only (the CPU runs fp32)
    QLineEdit* prompt_;
    QListWidget* suggestions_;
    QSpinBox* class_id_;
    QLayout* class_row_ = nullptr;  // id and name: hidden for a text-to-image model
    ElidedLabel* class_name_;
    QSpinBox* seed_;
    QToolButton* dice_;
    QToolButton* recommended_button_;
    SamplingRecommendation recommendation_;
    MarSamplingRecommendation mar_recommendation_;
    QFormLayout* form_;
    MarSettings* mar_;
    Family family_ = Family::Var;
    bool model_picked_by_user_ = false;  // apply the next loaded model's defaults
    QDoubleSpinBox* cfg_;
    QSpinBox* top_k_;
    QDoubleSpinBox* top_p_;
    QCheckBox* keep_words_;  // text-to-image: GenerationSettings::keep_unknown_words
    QStringList recent_;
    std::unique_ptr<ClassMatcher> matcher_;
    bool updating_ = false;
    QTimer prompt_pause_;       // typing in the prompt: a run after this pause (or on Enter)
    int committed_class_ = 0;   // the class id last announced by settingsChanged
    QString committed_prompt_;  // text-to-image: the text last announced by settingsChanged
};

}  // namespace varscope::gui
